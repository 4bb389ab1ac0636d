#!/usr/bin/env bash
# ELECTRA quality per wall-clock time against the PyTorch peer (issue 11):
# bench/peers/peer_electra_quality.py trains the tiny ELECTRA for BUDGET
# seconds on the man-en corpus (MAN_EN=DIR holding train.txt and valid.txt),
# then Garden's electra/tiny trains for the
# same BUDGET on the same data, one after the other on this machine.
# bench/electra_peer_data.py writes the peer's own sequences as TFRecords
# for Garden: its training stream (its SentencePiece model, packing and
# 15 % masking, four passes) and its 1,024 masked validation sequences, so
# both train on the same sequences and are scored on the same inputs.
# Garden's run has no attention biases, as the peer (electra/tiny ships
# alibi_slope 1.0).
#
#   bash bench/electra_quality.sh [BUDGET_SECONDS=1800] [OUT=runs/electra_quality] [EVAL_STEPS=600] [PART=all]
#
# PART: all, or peer (the peer's run alone) or garden (the rest, after a
# peer run into the same OUT).
#
# Writes OUT/peer.jsonl, OUT/garden/train.log and, via
# bench/electra_curve.py, OUT/curve.md and OUT/curve.svg. Needs
# python3-torch and python3-sentencepiece, and a built Garden (build/garden).
set -euo pipefail
cd "$(dirname "$0")/.."
budget=${1:-1800}
out=${2:-runs/electra_quality}
eval_steps=${3:-600}
part=${4:-all}
data=${MAN_EN:?set MAN_EN to the directory holding man-en's train.txt and valid.txt}
[ -f "$data/train.txt" ] || { echo "electra_quality.sh: no train.txt in MAN_EN=$data" >&2; exit 2; }
mkdir -p "$out"
# The peer runs with the OpenMP and OpenBLAS settings garden starts with.
eval "$(./build/garden env)"

if [ "$part" = all ] || [ "$part" = peer ]; then
  echo "== peer: $budget s"
  /usr/bin/python3 bench/peers/peer_electra_quality.py "$budget" --eval 300 --threads 1 --data "$data" \
    | tee "$out/peer.jsonl"
  cp /tmp/peer_electra_sp.model "$out/sp.model"
fi
[ "$part" = peer ] && exit 0

echo "== Garden's data: the peer's sequences"
/usr/bin/python3 bench/electra_peer_data.py --train 4 "$out/sp.model" "$data/train.txt" "$out/train.tfrecord"
/usr/bin/python3 bench/electra_peer_data.py "$out/sp.model" "$data/valid.txt" "$out/valid.tfrecord"

echo "== Garden: $budget s"
rm -rf "$out/garden"
set +e
timeout --signal=INT "$budget" build/garden train --experiment=electra/tiny --model_dir="$out/garden" \
  --params_override="task.model.generator_encoder.bert.alibi_slope=0,task.model.discriminator_encoder.bert.alibi_slope=0,task.train_data.input_path=$out/train.tfrecord,task.train_data.use_v2_feature_names=true,task.validation_data.input_path=$out/valid.tfrecord,task.validation_data.use_v2_feature_names=true,trainer.train_steps=1000000,trainer.validation_interval=$eval_steps,trainer.checkpoint_interval=$eval_steps,trainer.validation_steps=-1,runtime.seed=1"
set -e
# The checkpoint saved when the budget ran out, scored as the peer's last
# evaluation is (the peer's clock includes its evaluations; so does Garden's).
build/garden train --mode=eval --experiment=electra/tiny --model_dir="$out/garden" \
  --config_file="$out/garden/params.yaml" 2>&1 | tee "$out/final_eval.log"
/usr/bin/python3 bench/electra_curve.py "$out/peer.jsonl" "$out/garden/train.log" "$out/curve.svg" \
  "$out/final_eval.log" "$budget" \
  | tee "$out/curve.md"
