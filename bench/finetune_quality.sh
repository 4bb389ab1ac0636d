#!/usr/bin/env bash
# Fine-tuning quality: bert/sentence_prediction_tiny on the bundled
# SpamAssassin subjects (data/sentence_prediction, SST-2's layout), from a
# Garden ELECTRA pretraining run's discriminator against the same model from
# random initialization, same budget, over several seeds. Prints each run's
# final dev cls_accuracy and f1, then mean and standard deviation per arm.
#
#   bash bench/finetune_quality.sh ELECTRA_MODEL_DIR SP_MODEL [SEEDS] [OUT]
#
# ELECTRA_MODEL_DIR: a finished `garden train --experiment=electra/tiny` run
# (vocabulary 8000) whose SentencePiece model is SP_MODEL (docs/tasks/
# sentence_prediction.md shows the whole path). SEEDS: "1 2 3" by default.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
garden=${GARDEN:-$here/build/garden}
pretrained=$1
sp_model=$2
seeds=${3:-1 2 3}
out=${4:-$(mktemp -d /tmp/finetune_quality.XXXXXX)}
mkdir -p "$out"
"$garden" create_finetuning_data --classification_task_name=SST-2 \
  --input_data_dir="$here/data/sentence_prediction" --train_data_output_path="$out/train.tfrecord" \
  --eval_data_output_path="$out/eval.tfrecord" --meta_data_file_path="$out/meta.json" \
  --sp_model_file="$sp_model" --nodo_lower_case --max_seq_length=64 > /dev/null
printf '%-11s %4s %12s %8s\n' arm seed cls_accuracy f1
for seed in $seeds; do
  for arm in pretrained random; do
    init=""
    [ "$arm" = pretrained ] && init=$pretrained
    dir=$out/$arm-$seed
    rm -rf "$dir"
    "$garden" train --experiment=bert/sentence_prediction_tiny --mode=train_and_eval \
      --model_dir="$dir" --params_override="task.train_data.input_path=$out/train.tfrecord,\
task.validation_data.input_path=$out/eval.tfrecord,task.train_data.vocab_file=$sp_model,\
task.init_checkpoint=$init,runtime.seed=$seed" > "$dir.log" 2>&1
    line=$(grep 'evaluation:' "$dir.log" | tail -1)
    accuracy=$(sed -n 's/.*cls_accuracy \([0-9.]*\).*/\1/p' <<< "$line")
    f1=$(sed -n 's/.* f1 \([0-9.]*\).*/\1/p' <<< "$line")
    printf '%-11s %4s %12s %8s\n' "$arm" "$seed" "$accuracy" "$f1" | tee -a "$out/results.txt"
  done
done
/usr/bin/python3 - "$out/results.txt" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
for arm in ("pretrained", "random"):
    acc = [float(r[2]) for r in rows if r[0] == arm]
    f1 = [float(r[3]) for r in rows if r[0] == arm]
    sd = lambda v: statistics.stdev(v) if len(v) > 1 else 0.0
    print(f"{arm:<11} cls_accuracy {statistics.mean(acc):.4f} ± {sd(acc):.4f}   "
          f"f1 {statistics.mean(f1):.4f} ± {sd(f1):.4f}   ({len(acc)} seeds)")
PY
echo "runs and logs: $out"
