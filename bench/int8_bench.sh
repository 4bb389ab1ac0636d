#!/usr/bin/env bash
# int8 decoding benchmark (issue 17): `garden translate --int8` against the
# same run's float32 decoding, alternately in one run, and the BLEU of each.
#
#   bash bench/int8_bench.sh MODEL_DIR PAIRS_TSV [ROUNDS] [BEAMS]
#   bash bench/int8_bench.sh --smoke     # CI: a 30-step demo model, 20 lines
#   TRANSLATE_FLAGS="--parallel_batches=1" bash bench/int8_bench.sh ...   # flags for every run
#
# PAIRS_TSV holds "source<TAB>reference" lines (data/translation/en_de_valid.tsv).
# Each round translates the sources in float32 and then with --int8 for each
# beam size in BEAMS (default "1 4"), with the run's thread settings. Prints
# one JSON line per run and, per beam size, a summary: the median sentences/s
# of each, the median of the per-round speed-ups, sacreBLEU (13a) of each
# against the references, and the share of lines both translate identically.
set -euo pipefail
cd "$(dirname "$0")/.."
garden=${GARDEN:-./build/garden}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ "${1:-}" = "--smoke" ]; then
  "$garden" train --experiment=wmt_transformer/demo --mode=train --model_dir="$work/model" \
    --params_override="trainer.train_steps=30,trainer.steps_per_loop=30,trainer.summary_interval=30,trainer.checkpoint_interval=30,task.sentencepiece_vocab_size=500" \
    >"$work/train.log" 2>&1 || { tail -n 5 "$work/train.log"; exit 1; }
  head -n 20 data/translation/en_de_valid.tsv >"$work/pairs.tsv"
  set -- "$work/model" "$work/pairs.tsv" 1 "1 4"
fi
model_dir=${1:?usage: int8_bench.sh MODEL_DIR PAIRS_TSV [ROUNDS] [BEAMS] | --smoke}
pairs=${2:?usage: int8_bench.sh MODEL_DIR PAIRS_TSV [ROUNDS] [BEAMS] | --smoke}
rounds=${3:-3}
beams=${4:-1 4}
cut -f 1 "$pairs" >"$work/source.txt"
cut -f 2 "$pairs" >"$work/reference.txt"

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# Runs garden translate; prints its sentences/s.
translate() {
  local line
  line=$("$garden" translate --model_dir="$model_dir" --beam_size="$1" --input="$work/source.txt" \
    --output="$work/$2.txt" ${3:-} ${TRANSLATE_FLAGS:-} 2>&1 >/dev/null | tail -n 1)
  sed 's/.* s, \([0-9.]*\) sentences\/s.*/\1/' <<<"$line"
}
bleu() {
  "$garden" bleu --hypothesis="$work/$1.txt" --reference="$work/reference.txt" |
    sed -n 's/^BLEU = \([0-9.]*\).*/\1/p'
}

for beam in $beams; do
  float_rates=() int8_rates=() speedups=()
  for round in $(seq 1 "$rounds"); do
    float_rate=$(translate "$beam" float)
    int8_rate=$(translate "$beam" int8 --int8)
    echo "{\"bench\":\"int8_round\",\"beam_size\":$beam,\"round\":$round,\"float32_sentences_per_s\":$float_rate,\"int8_sentences_per_s\":$int8_rate}"
    float_rates+=("$float_rate") int8_rates+=("$int8_rate")
    speedups+=("$(awk -v q="$int8_rate" -v f="$float_rate" 'BEGIN { printf "%.3f", q / f }')")
  done
  float_bleu=$(bleu float)
  int8_bleu=$(bleu int8)
  identical=$(paste "$work/float.txt" "$work/int8.txt" |
    awk -F '\t' '$1 == $2 { same++ } END { printf "%.4f", NR ? same / NR : 0 }')
  echo "{\"bench\":\"int8\",\"beam_size\":$beam,\"rounds\":$rounds,\"sentences\":$(wc -l <"$work/source.txt")," \
    "\"float32_sentences_per_s_median\":$(median "${float_rates[@]}")," \
    "\"int8_sentences_per_s_median\":$(median "${int8_rates[@]}")," \
    "\"speedup_median\":$(median "${speedups[@]}"),\"speedups\":[$(IFS=,; echo "${speedups[*]}")]," \
    "\"float32_bleu\":$float_bleu,\"int8_bleu\":$int8_bleu," \
    "\"bleu_drop\":$(awk -v f="$float_bleu" -v q="$int8_bleu" 'BEGIN { printf "%.2f", f - q }')," \
    "\"identical_lines\":$identical}" | tr -d '\n' | sed 's/, "/,"/g'
  echo
done
