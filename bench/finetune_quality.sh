#!/usr/bin/env bash
# Fine-tuning quality: bert/sentence_prediction_tiny from a Garden ELECTRA
# pretraining run's discriminator against the same model from random
# initialization, same budget, over several seeds. Prints each run's final
# evaluation (the task's metric and f1), then mean and standard deviation
# per arm, and how many seeds the pretrained arm won.
#
#   bash bench/finetune_quality.sh ELECTRA_MODEL_DIR SP_MODEL [SEEDS] [OUT]
#
# ELECTRA_MODEL_DIR: a `garden train --experiment=electra/tiny` run
# (vocabulary 8000) whose SentencePiece model is SP_MODEL
# (docs/tasks/sentence_prediction.md shows the whole path;
# bench/pretraining_pays.sh makes one from a GLUE task's own text).
# SEEDS: "1 2 3" by default.
#
# Environment:
#   GLUE_DIR  a GLUE task's directory as distributed (train.tsv, dev.tsv);
#             the bundled SpamAssassin subjects (SST-2's layout) by default
#   TASK      its --classification_task_name: SST-2 (default), COLA, MRPC,
#             QQP, MNLI, QNLI, RTE, WNLI, STS-B; COLA reports
#             matthews_corrcoef, STS-B (a regression) pearson_spearman_corr
#   EPOCHS    fine-tune both arms for this many passes over train.tsv, with
#             a tenth of the steps as warmup, as ELECTRA's authors fine-tune
#             GLUE (3 epochs); the experiment's 300 steps by default. Sets
#             trainer.train_steps and the warmup: not also in
#             FINETUNE_OVERRIDES
#   FINETUNE_OVERRIDES  more --params_override keys for both arms, e.g.
#             trainer.train_steps=2000
#   PRETRAINED_OVERRIDES  keys for the pretrained arm alone, e.g.
#             task.layerwise_lr_decay=0.8 (ELECTRA's fine-tuning of a
#             pretrained encoder; after 30 minutes of electra/tiny it cost
#             SST-2 7.8 points in one run, docs/tasks/sentence_prediction.md)
#   SEQ_LENGTH  --max_seq_length of the records (64; 128 for pairs)
#   ALIBI_SLOPE  task.model.encoder.bert.alibi_slope of both arms; unset,
#             the pretrained arm takes its checkpoint's (electra/tiny's 1.0)
#             and the random arm the experiment's (1.0)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
garden=${GARDEN:-$here/build/garden}
pretrained=$1
sp_model=$2
seeds=${3:-1 2 3}
out=${4:-$(mktemp -d /tmp/finetune_quality.XXXXXX)}
glue_dir=${GLUE_DIR:-$here/data/sentence_prediction}
task=${TASK:-SST-2}
seq_length=${SEQ_LENGTH:-64}
case "${EPOCHS:-1}" in
  *[!0-9]* | 0*) echo "finetune_quality: EPOCHS must be a whole number of epochs, 1 or more, not '$EPOCHS'" >&2; exit 2 ;;
esac
metric=cls_accuracy
metric_type=accuracy
task_type=classification
label_types=""
if [ "${task^^}" = COLA ]; then
  metric=matthews_corrcoef
  metric_type=matthews_corrcoef
elif [ "${task^^}" = STS-B ]; then
  metric=pearson_spearman_corr
  metric_type=pearson_spearman_corr
  task_type=regression
  label_types="task.train_data.label_type=float,task.validation_data.label_type=float,"
fi
mkdir -p "$out"
rm -f "$out/results.txt"
"$garden" create_finetuning_data --classification_task_name="$task" \
  --fine_tuning_task_type="$task_type" --input_data_dir="$glue_dir" \
  --train_data_output_path="$out/train.tfrecord" --eval_data_output_path="$out/eval.tfrecord" \
  --meta_data_file_path="$out/meta.json" --sp_model_file="$sp_model" --nodo_lower_case \
  --max_seq_length="$seq_length" > /dev/null
classes=$(tr -d ' \n' < "$out/meta.json" | sed -n 's/.*"num_labels":\([0-9]*\).*/\1/p')
echo "$task from $glue_dir: $classes classes, sequences of $seq_length; metric $metric"
steps=""
if [ -n "${EPOCHS:-}" ]; then
  examples=$(tr -d ' \n' < "$out/meta.json" | sed -n 's/.*"train_data_size":\([0-9]*\).*/\1/p')
  # Batches of 32 (bert/sentence_prediction_tiny), the last one rounded up.
  train_steps=$(( (EPOCHS * examples + 31) / 32 ))
  steps="trainer.train_steps=$train_steps,trainer.optimizer_config.warmup.polynomial.warmup_steps=$(( (train_steps + 9) / 10 ))"
  echo "$EPOCHS epochs of $examples examples: $train_steps steps"
fi
printf '%-11s %4s %12s %8s %8s\n' arm seed "$metric" f1 seconds
for seed in $seeds; do
  for arm in pretrained random; do
    init=""
    extra=${ALIBI_SLOPE:+task.model.encoder.bert.alibi_slope=$ALIBI_SLOPE}
    for more in "$steps" "${FINETUNE_OVERRIDES:-}"; do
      [ -z "$more" ] || extra=${extra:+$extra,}$more
    done
    if [ "$arm" = pretrained ]; then
      init=$pretrained
      extra=$extra${PRETRAINED_OVERRIDES:+,$PRETRAINED_OVERRIDES}
    fi
    dir=$out/$arm-$seed
    rm -rf "$dir"
    start=$(date +%s)
    "$garden" train --experiment=bert/sentence_prediction_tiny --mode=train_and_eval \
      --model_dir="$dir" --params_override="task.train_data.input_path=$out/train.tfrecord,\
task.validation_data.input_path=$out/eval.tfrecord,task.train_data.vocab_file=$sp_model,\
task.train_data.seq_length=$seq_length,task.validation_data.seq_length=$seq_length,\
task.model.num_classes=$classes,task.metric_type=$metric_type,${label_types}\
task.init_checkpoint=$init,runtime.seed=$seed${extra:+,$extra}" \
      > "$dir.log" 2>&1 || {
      echo "finetune_quality: the $arm run of seed $seed failed ($dir.log):" >&2
      tail -1 "$dir.log" >&2
      exit 1
    }
    seconds=$(( $(date +%s) - start ))
    line=$(grep 'evaluation:' "$dir.log" | tail -1 || true)
    value=$(sed -n "s/.*$metric \([-0-9.e]*\).*/\1/p" <<< "$line")
    f1=$(sed -n 's/.* f1 \([0-9.e-]*\).*/\1/p' <<< "$line")
    printf '%-11s %4s %12s %8s %8s\n' "$arm" "$seed" "${value:--}" "${f1:--}" "$seconds" |
      tee -a "$out/results.txt"
  done
done
/usr/bin/python3 - "$out/results.txt" "$metric" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
metric = sys.argv[2]
def column(arm, i):
    return [float(r[i]) for r in rows if r[0] == arm and r[i] != "-"]
sd = lambda v: statistics.stdev(v) if len(v) > 1 else 0.0
for arm in ("pretrained", "random"):
    v, f1 = column(arm, 2), column(arm, 3)
    if not v:
        print(f"{arm:<11} no evaluation (see the logs)")
        continue
    text = f"{arm:<11} {metric} {statistics.mean(v):.4f} ± {sd(v):.4f}"
    if f1:
        text += f"   f1 {statistics.mean(f1):.4f} ± {sd(f1):.4f}"
    print(text + f"   ({len(v)} seeds)")
pre = {r[1]: float(r[2]) for r in rows if r[0] == "pretrained" and r[2] != "-"}
ran = {r[1]: float(r[2]) for r in rows if r[0] == "random" and r[2] != "-"}
seeds = sorted(set(pre) & set(ran))
if seeds:
    wins = sum(pre[s] > ran[s] for s in seeds)
    gain = statistics.mean(pre[s] - ran[s] for s in seeds)
    print(f"pretrained - random: {gain:+.4f} on average; "
          f"pretrained better on {wins} of {len(seeds)} seeds")
PY
echo "runs and logs: $out"
