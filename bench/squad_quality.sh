#!/usr/bin/env bash
# Question answering quality: bert/squad_tiny on the bundled man-page SQuAD
# set (data/squad: questions "Which option: <description>?" over runs of
# option lines, answered by the option's flag), from a Garden ELECTRA
# pretraining run's discriminator against the same model from random
# initialization, same budget, over several seeds. Prints each run's final
# exact_match and final_f1 (official SQuAD rules, in [0, 1]), then mean and
# standard deviation per arm.
#
#   bash bench/squad_quality.sh ELECTRA_MODEL_DIR SP_MODEL [SEEDS] [OUT]
#
# ELECTRA_MODEL_DIR: a finished `garden train --experiment=electra/tiny` run
# (vocabulary 8000) whose SentencePiece model is SP_MODEL
# (docs/tasks/sentence_prediction.md shows the whole path). SEEDS: "1 2 3".
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
garden=${GARDEN:-$here/build/garden}
pretrained=$1
sp_model=$2
seeds=${3:-1 2 3}
out=${4:-$(mktemp -d /tmp/squad_quality.XXXXXX)}
mkdir -p "$out"
"$garden" create_finetuning_data --fine_tuning_task_type=squad \
  --squad_data_file="$here/data/squad/train.json" --train_data_output_path="$out/train.tfrecord" \
  --meta_data_file_path="$out/meta.json" --sp_model_file="$sp_model" --nodo_lower_case \
  --max_seq_length=128 --max_query_length=32 --doc_stride=64 > /dev/null
printf '%-11s %4s %12s %9s\n' arm seed exact_match final_f1
for seed in $seeds; do
  for arm in pretrained random; do
    init=""
    [ "$arm" = pretrained ] && init=$pretrained
    dir=$out/$arm-$seed
    rm -rf "$dir"
    "$garden" train --experiment=bert/squad_tiny --mode=train_and_eval --model_dir="$dir" \
      --params_override="task.train_data.input_path=$out/train.tfrecord,\
task.validation_data.input_path=$here/data/squad/dev.json,task.train_data.vocab_file=$sp_model,\
task.init_checkpoint=$init,runtime.seed=$seed" > "$dir.log" 2>&1
    line=$(grep 'evaluation:' "$dir.log" | tail -1)
    em=$(sed -n 's/.*exact_match \([0-9.]*\).*/\1/p' <<< "$line")
    f1=$(sed -n 's/.*final_f1 \([0-9.]*\).*/\1/p' <<< "$line")
    printf '%-11s %4s %12s %9s\n' "$arm" "$seed" "$em" "$f1" | tee -a "$out/results.txt"
  done
done
/usr/bin/python3 - "$out/results.txt" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
for arm in ("pretrained", "random"):
    em = [float(r[2]) for r in rows if r[0] == arm]
    f1 = [float(r[3]) for r in rows if r[0] == arm]
    sd = lambda v: statistics.stdev(v) if len(v) > 1 else 0.0
    print(f"{arm:<11} exact_match {statistics.mean(em):.4f} ± {sd(em):.4f}   "
          f"final_f1 {statistics.mean(f1):.4f} ± {sd(f1):.4f}   ({len(em)} seeds)")
PY
echo "runs and logs: $out"
