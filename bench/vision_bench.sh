#!/usr/bin/env bash
# Image classification against PyTorch (torchvision) on the same CPU, side by
# side in one run: records of an ImageFolder tree (a seeded 20 % held out),
# then
#   speed:   images/s of the whole training loop (decode, augment, step) of
#            Garden's vision/flowers and of bench/peers/peer_image_classification.py
#            (torchvision's resnet, ImageFolder-style Dataset + DataLoader
#            workers), the same model, size, batch, threads and augmentation,
#            and the peak memory of each;
#   quality: each trains for BUDGET seconds (the cosine schedule spans STEPS
#            steps, Garden's GARDEN_STEPS), then its held-out accuracy (the
#            same split) and the seconds each trained.
#
#   bash bench/vision_bench.sh IMAGE_DIR [speed|quality|both] [OUT]
#
# IMAGE_DIR: a folder per class (../shared/data/images/flowers). Environment:
# MODEL_ID 18 (or 50), SIZE 112, BATCH 64, THREADS 2 (the peer's compute
# threads; Garden uses every core), WORKERS 2 (the peer's DataLoader
# processes), SPEED_STEPS 40, ROUNDS 1 (speed: Garden then the peer, this
# many times alternately, so the machine's drift falls on both; then the
# median ratio), BUDGET 600, STEPS 2000, GARDEN_STEPS (STEPS; set it to
# the steps Garden trains in the peer's time for STEPS), SEED 1 (both sides' initialization
# and input order), AMP none (bf16: both sides'
# forward and loss under bfloat16 autocast, Garden's
# runtime.mixed_precision_dtype=bfloat16 and the peer's --amp bf16),
# SIDES both (quality: garden or peer runs that half alone), GARDEN_OVERRIDES (more of Garden's --params_override, e.g.
# task.train_data.crop_sampler=tensorflow).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
garden=${GARDEN:-$here/build/garden}
python=${PYTHON:-/usr/bin/python3}
images=$1
mode=${2:-both}
out=${3:-$(mktemp -d /tmp/vision_bench.XXXXXX)}
model_id=${MODEL_ID:-18}
size=${SIZE:-112}
batch=${BATCH:-64}
threads=${THREADS:-2}
workers=${WORKERS:-2}
speed_steps=${SPEED_STEPS:-40}
budget=${BUDGET:-600}
steps=${STEPS:-2000}
garden_steps=${GARDEN_STEPS:-$steps}
amp=${AMP:-none}
seed=${SEED:-1}
rounds=${ROUNDS:-1}
sides=${SIDES:-both}
case $sides in
  both | garden | peer) ;;
  *) echo "SIDES must be both, garden or peer, got '$sides'" >&2; exit 2 ;;
esac
mkdir -p "$out"
records=$out/records
[ -f "$records/labels.txt" ] || "$garden" create_image_records --image_dir="$images" \
  --output_dir="$records" --validation_fraction=0.2 > "$out/records.log"
classes=$(wc -l < "$records/labels.txt")
common="task.train_data.input_path=$records/train-*,task.validation_data.input_path=$records/validation-*,\
task.model.num_classes=$classes,task.model.backbone.resnet.model_id=$model_id,\
task.model.backbone.resnet.depth_multiplier=1.0,task.model.input_size=[$size,$size,3],\
task.train_data.global_batch_size=$batch,task.validation_data.global_batch_size=$batch,\
runtime.seed=$seed"
[ -z "${GARDEN_OVERRIDES:-}" ] || common="$common,$GARDEN_OVERRIDES"
peer=("$python" "$here/bench/peers/peer_image_classification.py" --data "$images" --split "$records"
  --model "resnet$model_id" --size "$size" --batch "$batch" --threads "$threads" --workers "$workers"
  --steps "$steps" --amp "$amp" --seed "$seed")
case $amp in
  none) ;;
  bf16) common="$common,runtime.mixed_precision_dtype=bfloat16" ;;
  *) echo "AMP must be none or bf16, got '$amp'" >&2; exit 2 ;;
esac
peak() { sed -n 's/^peak_kb \([0-9]*\)/\1/p' "$1"; }

if [ "$mode" = speed ] || [ "$mode" = both ]; then
  ratios=()
  for round in $(seq 1 "$rounds"); do
    rm -rf "$out/garden_speed"
    /usr/bin/time -f "peak_kb %M" "$garden" train --experiment=vision/flowers --mode=train \
      --model_dir="$out/garden_speed" --params_override="$common,trainer.train_steps=$speed_steps,\
trainer.steps_per_loop=5,trainer.summary_interval=5,trainer.checkpoint_interval=100000" \
      > "$out/garden_speed.log" 2>&1
    # steps/s of every loop but the first (the pipeline filling, the first allocations).
    garden_sps=$(grep "I train" "$out/garden_speed.log" | sed -n 's/.*steps_per_second: \([0-9.]*\).*/\1/p' |
      tail -n +2 | awk '{s += $1; n++} END {printf "%.4f", s / n}')
    garden_ips=$(awk -v s="$garden_sps" -v b="$batch" 'BEGIN {printf "%.2f", s * b}')
    /usr/bin/time -f "peak_kb %M" "${peer[@]}" --mode speed --steps "$speed_steps" --warmup 5 \
      > "$out/peer_speed.log" 2>&1
    peer_ips=$(sed -n 's/.*"images_per_second": \([0-9.]*\).*/\1/p' "$out/peer_speed.log")
    ratio=$(awk -v g="$garden_ips" -v p="$peer_ips" 'BEGIN {printf "%.2f", g / p}')
    ratios+=("$ratio")
    echo "speed, resnet$model_id at $size, batch $batch, amp $amp, round $round of $rounds: Garden $garden_ips images/s (peak $(( $(peak "$out/garden_speed.log") / 1024 )) MB), peer $peer_ips images/s (peak $(( $(peak "$out/peer_speed.log") / 1024 )) MB, main process), ratio $ratio"
  done
  if [ "$rounds" -gt 1 ]; then
    echo "speed: median ratio $(printf '%s\n' "${ratios[@]}" | sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}') of rounds ${ratios[*]}"
  fi
fi

if [ "$mode" = quality ] || [ "$mode" = both ]; then
  garden_result="not run" peer_result="not run"
  if [ "$sides" != peer ]; then
    rm -rf "$out/garden_quality"
    garden_start=$(date +%s.%N)
    timeout -s TERM "$budget" "$garden" train --experiment=vision/flowers --mode=train \
      --model_dir="$out/garden_quality" --params_override="$common,trainer.train_steps=$garden_steps,\
trainer.optimizer_config.learning_rate.cosine.decay_steps=$garden_steps,\
trainer.checkpoint_interval=100000" > "$out/garden_quality.log" 2>&1 || true
    garden_seconds=$(awk -v s="$garden_start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.0f", e - s}')
    "$garden" train --experiment=vision/flowers --mode=eval --model_dir="$out/garden_quality" \
      --params_override="$common" > "$out/garden_eval.log" 2>&1
    garden_step=$(ls "$out/garden_quality" | sed -n 's/^ckpt-\([0-9]*\)$/\1/p' | sort -n | tail -1)
    garden_acc=$(sed -n 's/^evaluation:  accuracy \([0-9.]*\).*/\1/p' "$out/garden_eval.log")
    garden_result="accuracy $garden_acc (step $garden_step, $garden_seconds s)"
  fi
  if [ "$sides" != garden ]; then
    "${peer[@]}" --mode quality --budget "$budget" > "$out/peer_quality.log" 2>&1
    peer_result=$(tail -1 "$out/peer_quality.log")
  fi
  echo "quality, at most $budget s each, amp $amp, seed $seed: Garden $garden_result, peer $peer_result"
fi
echo "outputs: $out"
