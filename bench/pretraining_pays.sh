#!/usr/bin/env bash
# Does pretraining pay on a GLUE task? An electra/tiny pretrained for a time
# budget on the task's own unlabelled training text (its sentences, labels
# dropped), then bench/finetune_quality.sh: fine-tuning from its
# discriminator against random initialization over several seeds.
#
#   bash bench/pretraining_pays.sh GLUE_TASK_DIR TASK [BUDGET_S] [SEEDS] [OUT]
#
# GLUE_TASK_DIR holds train.tsv and dev.tsv as GLUE distributes them; TASK is
# their --classification_task_name (SST-2, COLA, MRPC, RTE, QNLI, STS-B, ...).
# BUDGET_S: seconds of pretraining (1800; the run stops on SIGTERM and
# keeps its checkpoint). SEEDS: "1 2 3". PRETRAIN_OVERRIDES adds
# --params_override keys to the pretraining (e.g. task.train_data.
# global_batch_size=64); FINETUNE_OVERRIDES, PRETRAINED_OVERRIDES, SEQ_LENGTH and EPOCHS go
# to finetune_quality.sh. TEXT=FILE pretrains on that text instead (one
# sentence a line, documents separated by blank lines: the bundled man pages
# are data/pretraining/man_en_train.txt). ALIBI_SLOPE=S sets the attention
# biases of both encoders of the pretraining and of both fine-tuning arms
# (`alibi_slope`; the experiments ship 1.0, 0 turns them off;
# docs/tasks/sentence_prediction.md). PAIR_DOCUMENTS=1
# makes each example's sentences a document of their own (a sentence pair
# is then one record's two segments, as fine-tuning sees it) instead of
# eight examples a document. PRETRAIN_SEQ_LENGTH=N (128) pretrains on
# records of N tokens, N*20/128 of them masked, in batches of 32*128/N
# (the same tokens a batch). DUPE_FACTOR: create_pretraining_data's (5).
# An OUT given again keeps the tokenizer and records made there before
# (delete pretrain.tfrecord there to change PAIR_DOCUMENTS,
# PRETRAIN_SEQ_LENGTH or DUPE_FACTOR).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
garden=${GARDEN:-$here/build/garden}
glue_dir=$1
task=$2
budget=${3:-1800}
seeds=${4:-1 2 3}
out=${5:-$(mktemp -d /tmp/pretraining_pays.XXXXXX)}
pretrain_length=${PRETRAIN_SEQ_LENGTH:-128}
case "$pretrain_length" in
  *[!0-9]* | 0*) echo "pretraining_pays: PRETRAIN_SEQ_LENGTH must be a whole number of tokens, not '$pretrain_length'" >&2; exit 2 ;;
esac
if [ "$pretrain_length" -lt 8 ] || [ $(( 4096 % pretrain_length )) -ne 0 ]; then
  echo "pretraining_pays: PRETRAIN_SEQ_LENGTH must divide 4096 (32 sequences of 128 a batch) and be 8 or more, not $pretrain_length" >&2
  exit 2
fi
masked=$(( pretrain_length * 20 / 128 ))
# Checked here too, so that a bad value fails before the pretraining.
case "${EPOCHS:-1}" in
  *[!0-9]* | 0*) echo "pretraining_pays: EPOCHS must be a whole number of epochs, 1 or more, not '$EPOCHS'" >&2; exit 2 ;;
esac
mkdir -p "$out"

# The text columns of each task's train.tsv (1-based), and whether it has a
# header line.
case "${task^^}" in
  COLA) columns=4 header=0 ;;
  SST-2) columns=1 header=1 ;;
  MRPC) columns=4,5 header=1 ;;
  QQP) columns=4,5 header=1 ;;
  MNLI) columns=9,10 header=1 ;;
  QNLI | RTE | WNLI) columns=2,3 header=1 ;;
  STS-B) columns=8,9 header=1 ;;
  *) echo "pretraining_pays: no text columns known for task '$task'" >&2; exit 2 ;;
esac
text=${TEXT:-}
if [ -z "$text" ]; then
  # Each sentence a line; a blank line after every 8 examples makes
  # documents long enough to fill ELECTRA's 128-token sequences (after
  # every example with PAIR_DOCUMENTS=1).
  text=$out/text.txt
  per_document=8
  if [ "${PAIR_DOCUMENTS:-0}" = 1 ]; then per_document=1; fi
  awk -F'\t' -v cols="$columns" -v header="$header" -v per="$per_document" '
    BEGIN { n = split(cols, c, ",") }
    NR == 1 && header { next }
    { for (i = 1; i <= n; ++i) if ($c[i] != "") print $c[i]; if (++examples % per == 0) print "" }
  ' "$glue_dir/train.tsv" > "$text"
fi
echo "pretraining text: $text ($(grep -c . "$text") sentences)"

# An OUT that already holds them keeps its tokenizer and records.
[ -f "$out/sp.model" ] || "$garden" spm train --input="$text" --model_prefix="$out/sp" \
  --vocab_size=8000 --pad_id=0 --unk_id=1 --bos_id=-1 --eos_id=-1 \
  --user_defined_symbols='[CLS],[SEP],[MASK]' > "$out/spm.log" 2>&1
[ -f "$out/pretrain.tfrecord" ] || "$garden" create_pretraining_data --input_file="$text" \
  --output_file="$out/pretrain.tfrecord" --sp_model_file="$out/sp.model" \
  --dupe_factor="${DUPE_FACTOR:-5}" --max_seq_length="$pretrain_length" --max_predictions_per_seq="$masked" \
  > "$out/pretraining_data.log" 2>&1
rm -rf "$out/electra"
lengths=""
if [ "$pretrain_length" -ne 128 ]; then
  lengths="task.model.sequence_length=$pretrain_length,\
task.model.num_masked_tokens=$masked,task.train_data.seq_length=$pretrain_length,\
task.train_data.max_predictions_per_seq=$masked,task.train_data.global_batch_size=$(( 4096 / pretrain_length )),\
task.validation_data.seq_length=$pretrain_length,task.validation_data.max_predictions_per_seq=$masked"
fi
slopes=""
if [ -n "${ALIBI_SLOPE:-}" ]; then
  slopes="task.model.generator_encoder.bert.alibi_slope=$ALIBI_SLOPE,\
task.model.discriminator_encoder.bert.alibi_slope=$ALIBI_SLOPE"
fi
start=$(date +%s)
status=0
timeout -s TERM "$budget" "$garden" train --experiment=electra/tiny --mode=train \
  --model_dir="$out/electra" --params_override="task.train_data.input_path=$out/pretrain.tfrecord,\
trainer.train_steps=1000000${slopes:+,$slopes}${lengths:+,$lengths}${PRETRAIN_OVERRIDES:+,$PRETRAIN_OVERRIDES}" \
  > "$out/electra.log" 2>&1 || status=$?
# timeout's SIGTERM is the expected end: the run saves a checkpoint and exits.
if [ "$status" -ne 0 ] && ! grep -q "received SIGTERM" "$out/electra.log"; then
  echo "pretraining_pays: the pretraining failed; see $out/electra.log" >&2
  tail -3 "$out/electra.log" >&2
  exit 1
fi
step=$(ls "$out/electra" | sed -n 's/^ckpt-\([0-9]*\)$/\1/p' | sort -n | tail -1)
echo "pretrained electra/tiny for $(( $(date +%s) - start )) s: $step steps ($out/electra)"
GLUE_DIR=$glue_dir TASK=$task bash "$here/bench/finetune_quality.sh" "$out/electra" "$out/sp.model" "$seeds" \
  "$out/finetune"
