#!/usr/bin/env bash
# From raw text to served models, on the bundled data, in a few minutes on
# two cores: pretrain electra/tiny on the man-page slice, fine-tune
# bert/sentence_prediction_tiny on the SpamAssassin subjects and
# bert/squad_tiny on the man-page questions from its discriminator, export
# both, answer with `garden predict`, then serve each and ask TF Serving's
# REST API with raw text. Run after scripts/demo.sh (or any
# build of build/garden). Each training sets runtime.seed=1 (the experiments
# draw a seed per run, as Model Garden's do), so two runs on one machine
# print the same.
#
#   bash scripts/finetune_demo.sh [OUT]     (default runs/finetune-demo)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
garden=${GARDEN:-$here/build/garden}
out=${1:-$here/runs/finetune-demo}
port=${PORT:-8511}
rm -rf "$out"
mkdir -p "$out"
cd "$out"
set -x
# 1. A vocabulary with BERT's special pieces, pretraining records, ELECTRA.
"$garden" spm train --input="$here/data/pretraining/man_en_train.txt" --model_prefix=sp \
  --vocab_size=2000 --pad_id=0 --unk_id=1 --bos_id=-1 --eos_id=-1 \
  --user_defined_symbols='[CLS],[SEP],[MASK]'
"$garden" create_pretraining_data --input_file="$here/data/pretraining/man_en_train.txt" \
  --output_file=pretrain.tfrecord --sp_model_file=sp.model --max_seq_length=128 \
  --max_predictions_per_seq=20 --dupe_factor=5
"$garden" train --experiment=electra/tiny --mode=train --model_dir=electra --params_override="\
task.model.generator_encoder.bert.vocab_size=2000,task.model.discriminator_encoder.bert.vocab_size=2000,\
task.train_data.input_path=pretrain.tfrecord,trainer.train_steps=600,runtime.seed=1"
# 2. Fine-tuning records in GLUE's SST-2 layout, then the classifier,
#    starting from the discriminator (init_checkpoint).
"$garden" create_finetuning_data --classification_task_name=SST-2 \
  --input_data_dir="$here/data/sentence_prediction" --train_data_output_path=train.tfrecord \
  --eval_data_output_path=eval.tfrecord --meta_data_file_path=meta.json \
  --sp_model_file=sp.model --nodo_lower_case --max_seq_length=64
"$garden" train --experiment=bert/sentence_prediction_tiny --model_dir=classifier --params_override="\
task.model.encoder.bert.vocab_size=2000,task.init_checkpoint=electra,\
task.train_data.input_path=train.tfrecord,task.validation_data.input_path=eval.tfrecord,\
task.train_data.vocab_file=sp.model,task.class_names=[ham,spam],runtime.seed=1"
# 3. Question answering on the bundled man-page SQuAD set, from the same
#    discriminator: records, the span labeler, evaluated on dev.json (its
#    answers in qa/predictions.json).
"$garden" create_finetuning_data --fine_tuning_task_type=squad \
  --squad_data_file="$here/data/squad/train.json" --train_data_output_path=squad.tfrecord \
  --meta_data_file_path=squad_meta.json --sp_model_file=sp.model --nodo_lower_case \
  --max_seq_length=128 --max_query_length=32 --doc_stride=64
"$garden" train --experiment=bert/squad_tiny --model_dir=qa --params_override="\
task.model.encoder.bert.vocab_size=2000,task.init_checkpoint=electra,\
task.train_data.input_path=squad.tfrecord,task.validation_data.input_path=$here/data/squad/dev.json,\
task.train_data.vocab_file=sp.model,runtime.seed=1"
# 4. Export both (the SentencePiece model travels in assets/), predict, serve.
"$garden" export --experiment=bert/sentence_prediction_tiny --model_dir=classifier --export_dir=export
printf '%s\n' '{"sentence": "Re: patch for the build scripts"}' \
  '{"sentence": "FREE money!!! Act now, limited offer"}' | "$garden" predict --export_dir=export
"$garden" export --experiment=bert/squad_tiny --model_dir=qa --export_dir=qa_export
question='Which option: Print a short version string and exit?'
context='-h, --help Print a short help text and exit. --version Print a short version string and exit.'
printf '{"question": "%s", "context": "%s"}\n' "$question" "$context" > question.jsonl
"$garden" predict --export_dir=qa_export --input=question.jsonl
# Ready means AVAILABLE: the status route answers while the model is still
# LOADING too (as TF Serving's does). A busy machine can take a while.
wait_available() {  # MODEL_NAME
  for _ in $(seq 1200); do
    curl -sf "localhost:$port/v1/models/$1" | grep -q '"AVAILABLE"' && return 0
    sleep 0.1
  done
  echo "finetune_demo: the server of '$1' did not report AVAILABLE within 120 s" >&2
  exit 1
}
"$garden" serve --export_dir=export --port="$port" --grpc_port=-1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
wait_available default
curl -s "localhost:$port/v1/models/default:predict" \
  -d '{"instances": [{"sentence": "Meeting notes for Tuesday"}, {"sentence": "Lose 30 pounds in 30 days"}]}'
echo
kill -TERM $server
wait $server
"$garden" serve --export_dir=qa_export --model_name=qa --port="$port" --grpc_port=-1 &
server=$!
wait_available qa
curl -s "localhost:$port/v1/models/qa:predict" \
  -d "{\"instances\": [{\"question\": \"$question\", \"context\": \"$context\"}]}"
echo
kill -TERM $server
wait $server
