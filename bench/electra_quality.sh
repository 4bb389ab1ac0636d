#!/usr/bin/env bash
# ELECTRA quality per wall-clock time against the PyTorch peer (issue 11):
# ../shared/bench/peer_electra_quality.py trains the tiny ELECTRA for BUDGET
# seconds on ../shared/data/man-en, then Garden's electra/tiny trains for the
# same BUDGET on the same text with the same SentencePiece model (the peer's),
# one after the other on this machine. Both are scored on the same 1,024
# validation sequences (bench/electra_peer_valid.py writes the peer's masked
# validation batches as TFRecords for Garden).
#
#   bash bench/electra_quality.sh [BUDGET_SECONDS=1800] [OUT=runs/electra_quality] [EVAL_STEPS=600]
#
# Writes OUT/peer.jsonl, OUT/garden/train.log and, via
# bench/electra_curve.py, OUT/curve.md and OUT/curve.svg. Needs
# python3-torch and python3-sentencepiece, and a built Garden (build/garden).
set -euo pipefail
cd "$(dirname "$0")/.."
budget=${1:-1800}
out=${2:-runs/electra_quality}
eval_steps=${3:-600}
shared=$(cd .. && pwd)/shared
data=$shared/data/man-en
mkdir -p "$out"

echo "== peer: $budget s"
/usr/bin/python3 "$shared/bench/peer_electra_quality.py" "$budget" --eval 300 --threads 1 \
  | tee "$out/peer.jsonl"
cp /tmp/peer_electra_sp.model "$out/sp.model"

echo "== Garden's data (the peer's SentencePiece model)"
build/garden create_pretraining_data --input_file="$data/train.txt" \
  --output_file="$out/train-0.tfrecord,$out/train-1.tfrecord" --sp_model_file="$out/sp.model" \
  --max_seq_length=128 --max_predictions_per_seq=20 --masked_lm_prob=0.15 --dupe_factor=5 \
  --short_seq_prob=0.1 --random_seed=12345
/usr/bin/python3 bench/electra_peer_valid.py "$out/sp.model" "$data/valid.txt" "$out/valid.tfrecord"

echo "== Garden: $budget s"
rm -rf "$out/garden"
set +e
timeout --signal=INT "$budget" build/garden train --experiment=electra/tiny --model_dir="$out/garden" \
  --params_override="task.train_data.input_path=$out/train-*.tfrecord,task.validation_data.input_path=$out/valid.tfrecord,task.validation_data.use_v2_feature_names=true,trainer.train_steps=1000000,trainer.validation_interval=$eval_steps,trainer.checkpoint_interval=$eval_steps,trainer.validation_steps=-1,runtime.seed=1"
set -e
# The checkpoint saved when the budget ran out, scored as the peer's last
# evaluation is (the peer's clock includes its evaluations; so does Garden's).
build/garden train --mode=eval --experiment=electra/tiny --model_dir="$out/garden" \
  --config_file="$out/garden/params.yaml" 2>&1 | tee "$out/final_eval.log"
/usr/bin/python3 bench/electra_curve.py "$out/peer.jsonl" "$out/garden/train.log" "$out/curve.svg" \
  "$out/final_eval.log" "$budget" \
  | tee "$out/curve.md"
