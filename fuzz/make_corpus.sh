#!/usr/bin/env bash
# Writes the seed corpora fuzz/corpus/<target>/ from the bundled data and
# from files Garden's own writers make (TFRecords in each compression, a
# checkpoint and its index, an export's safetensors, event files, a
# SentencePiece model), each cut small. The seeds are kept in the repository;
# run this again (after scripts/build.sh) only to remake them.
#
# usage: fuzz/make_corpus.sh [GARDEN_BINARY]   (default build/garden)
set -euo pipefail
cd "$(dirname "$0")/.."
garden=$(realpath "${1:-build/garden}")
out=fuzz/corpus
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$out"
for t in tfrecord tfrecord_gzip tfrecord_zlib example parse_spec config_yaml params_override csv \
  text_readers wordpiece_vocab wordpiece_text sentencepiece_model sentencepiece_text checkpoint \
  checkpoint_index safetensors event_file bleu fx_schema fx_metadata fx_features fx_instances \
  serving_request; do
  mkdir -p "$out/$t"
done
seed() { cat > "$out/$1/$2"; }  # seed TARGET NAME < bytes

# ---- TFRecords and tf.Examples, written by `garden tfrecord write`
cat > "$work/examples.jsonl" <<'JSON'
{"inputs": [3, 17, 42, 2], "targets": [5, 9, 2]}
{"x": [0.5], "y": [1.0, 2.5, -3.0], "label": ["Iris-setosa"], "words": ["a", "b"], "m": [1.0, 2.0, 3.0, 4.0]}
{"input_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16], "input_mask": [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0], "segment_ids": [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]}
{"empty": {"float": []}, "raw": {"base64": ["/wD+"]}, "nan": {"float": ["nan", "-inf"]}}
{"species": ["Iris-versicolor"], "sepal_length": [6.1], "sepal_width": [2.8], "petal_length": [4.7], "petal_width": [1.2]}
JSON
"$garden" tfrecord write --from "$work/examples.jsonl" --to "$work/plain.tfrecord" >/dev/null
"$garden" tfrecord write --from "$work/examples.jsonl" --to "$work/gzip.tfrecord" --compression_type GZIP >/dev/null
"$garden" tfrecord write --from "$work/examples.jsonl" --to "$work/zlib.tfrecord" --compression_type ZLIB >/dev/null
cp "$work/plain.tfrecord" "$out/tfrecord/examples"
head -c 600 data/fx/iris/eval.tfrecord | seed tfrecord iris_eval_prefix
: | seed tfrecord empty
cp "$work/gzip.tfrecord" "$out/tfrecord_gzip/examples"
cp "$work/zlib.tfrecord" "$out/tfrecord_zlib/examples"
# Each record on its own: the tf.Example seeds.
python3 - "$work/plain.tfrecord" data/fx/iris/eval.tfrecord "$out" <<'PY'
import struct, sys
def records(path, limit):
    data = open(path, 'rb').read()
    pos, out = 0, []
    while pos + 12 <= len(data) and len(out) < limit:
        (n,) = struct.unpack_from('<Q', data, pos)
        out.append(data[pos + 12:pos + 12 + n])
        pos += 12 + n + 4
    return out
ours, iris, root = records(sys.argv[1], 100), records(sys.argv[2], 2), sys.argv[3]
for i, r in enumerate(ours + iris):
    for target in ('example', 'parse_spec'):
        open(f'{root}/{target}/record{i}', 'wb').write(r)
    if i >= len(ours):
        open(f'{root}/fx_instances/record{i}', 'wb').write(r)
PY

# ---- configs and overrides
for e in wmt_transformer/demo tabular/iris electra/small; do
  "$garden" config --experiment "$e" | seed config_yaml "$(echo "$e" | tr / _).yaml"
done
printf 'task:\n  model:\n    beam_size: 2\ntrainer:\n  train_steps: 10\n  optimizer_config:\n    learning_rate:\n      type: cosine\n      cosine:\n        initial_learning_rate: 0.1\n' |
  seed config_yaml nested.yaml
printf '{"trainer": {"train_steps": 5, "checkpoint_interval": null}}\n' | seed config_yaml json.yaml
printf "trainer.train_steps=10,task.train_data.input_path='a.tsv',runtime.seed=3" | seed params_override dotted
printf "trainer.optimizer_config.learning_rate.type=cosine,task.model.beam_size=4" | seed params_override oneof
printf "{trainer: {train_steps: 7}, runtime: {distribution_strategy: one_device}}" | seed params_override mapping
printf "task.train_data.input_path=[a.tsv,b.tsv],trainer.validation_steps=-1" | seed params_override list

# ---- tables and text
head -5 data/iris/iris.csv | seed csv iris.csv
printf 'a,"b ""quoted""",c\r\n1,"multi\nline",3\r\n' | seed csv quoted.csv
printf 'x\ty\n1.5\t-2e3\n' | seed csv tabs.csv
head -5 data/testdata/en_de_sample.tsv | seed text_readers pairs.tsv
printf 'Hello.\nWorld.\n\n\nSecond document.\n\0Hallo.\nWelt.\n\n\nZweites Dokument.\n' | seed text_readers aligned
head -12 data/pretraining/man_en_valid.txt | seed text_readers documents.txt

# ---- tokenizers
printf '[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nman\npage\n##s\nfile\n,\n.\nun\n##aff\n##able\n' | seed wordpiece_vocab vocab.txt
printf '[UNK]\r\n  hello  \r\nworld\r\n' | seed wordpiece_vocab crlf.txt
head -3 data/pretraining/man_en_valid.txt | seed wordpiece_text man.txt
printf 'Ünïcödé CAFÉ 日本語 e\xcc\x81 \x01\x7f tabs\tand\u00a0nbsp' | seed wordpiece_text unicode.txt
head -3 data/pretraining/man_en_valid.txt | seed sentencepiece_text man.txt
head -3 data/testdata/en_de_sample.tsv | cut -f2 | seed sentencepiece_text german.txt
"$garden" spm train --input data/testdata/en_de_sample.tsv --tsv_columns 0,1 \
  --model_prefix "$work/spm" --vocab_size 200 --extra normalization_rule_name=identity >/dev/null 2>&1
cp "$work/spm.model" "$out/sentencepiece_model/vocab200.model"

# ---- a tiny iris run: checkpoint, index, event files, export
"$garden" train --experiment tabular/iris --mode train --model_dir "$work/iris" \
  --params_override "trainer.train_steps=2,trainer.steps_per_loop=1,trainer.checkpoint_interval=1,trainer.summary_interval=1,runtime.seed=1" >/dev/null 2>&1
latest=$(ls "$work/iris"/ckpt-* | sort -V | tail -1)
cp "$latest" "$out/checkpoint/iris_ckpt"
cp "$work/iris/checkpoint" "$out/checkpoint_index/checkpoint"
printf 'model_checkpoint_path: "ckpt-20"\nall_model_checkpoint_paths: "/nonexistent/ckpt-7"\n' | seed checkpoint_index other
i=0
for f in $(find "$work/iris" -name 'events.out.tfevents.*' | sort); do
  head -c 4096 "$f" | seed event_file "events$i"
  i=$((i + 1))
done
"$garden" export --experiment tabular/iris --model_dir "$work/iris" --export_dir "$work/export" >/dev/null 2>&1
cp "$(ls -d "$work"/export/*/ | tail -1)weights.safetensors" "$out/safetensors/iris.safetensors"

# ---- BLEU: hypotheses, NUL, references
printf 'The cat sat on the mat.\nIt is 3.5%% "quoted" &amp; done\0The cat is on the mat.\nIt is 3.5 %% quoted & done\n' | seed bleu english
printf 'Öffne die Datei „test.txt“ — jetzt!\n日本語のテキスト。\0Öffne die Datei "test.txt" jetzt!\n日本語 テキスト\n' | seed bleu unicode

# ---- TensorFX files
cp data/fx/iris/schema.yaml "$out/fx_schema/"
cp data/fx/iris/metadata.json "$out/fx_metadata/"
cp data/fx/iris/features.yaml "$out/fx_features/"
printf 'features:\n- name: X\n  type: concat\n  features:\n  - name: b\n    type: bucketize\n    fields: petal_width\n    transform:\n      boundaries: 0.5,1,1.5\n  - name: s\n    type: scale\n    fields: sepal_length\n    transform: {min: -1, max: 1}\n- name: Y\n  type: target\n  fields: species\n' | seed fx_features bucketize.yaml
head -3 data/fx/iris/eval.csv | seed fx_instances eval.csv
printf '6.1,2.8,4.7,1.2\n' | seed fx_instances prediction.csv

# ---- serving requests
printf '{"instances": [{"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}]}' | seed serving_request rows
printf '{"instances": [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]]}' | seed serving_request lists
printf '{"signature_name": "serving_default", "inputs": {"sepal_length": [5.1], "sepal_width": [3.5], "petal_length": [1.4], "petal_width": [0.2]}}' | seed serving_request columns
printf '{"inputs": ["Open the file."]}' | seed serving_request one_input

find "$out" -type f | wc -l | xargs echo "make_corpus: seeds written:"
