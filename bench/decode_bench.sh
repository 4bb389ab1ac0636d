#!/usr/bin/env bash
# Decoding benchmark (issue 17): `garden translate` against the PyTorch peer
# bench/peer_decode.py (torch.nn Transformer layers, the standard decoder that
# reruns the prefix each step) on the same weights, exported from the run.
#
#   bash bench/decode_bench.sh MODEL_DIR INPUT [ROUNDS] [BEAMS]
#
# MODEL_DIR is a translation run (its latest checkpoint is exported to a
# temporary directory, removed at the end); INPUT has a source sentence a line. Each
# round runs the peer and then Garden for each beam size in BEAMS (default
# "1 4"), one LibTorch thread each. Prints one JSON line per run and, per beam
# size, a summary: median sentences/s of each, the median of the per-round
# ratios, and the share of lines both translate identically.
# Garden decodes one batch at a time (--parallel_batches=1), as the peer
# does; TRANSLATE_FLAGS replaces that (TRANSLATE_FLAGS= for translate's
# default of one batch per core).
# Needs Debian's python3-torch and python3-sentencepiece (setup.sh --bench).
set -euo pipefail
cd "$(dirname "$0")/.."
model_dir=${1:?usage: decode_bench.sh MODEL_DIR INPUT [ROUNDS] [BEAMS]}
input=${2:?usage: decode_bench.sh MODEL_DIR INPUT [ROUNDS] [BEAMS]}
rounds=${3:-3}
beams=${4:-1 4}
garden=./build/garden
# The run's params.yaml sets the whole model, so any wmt_transformer preset exports it.
experiment=${EXPERIMENT:-wmt_transformer/demo}
work=$(mktemp -d)
# The peer runs with the OpenMP and OpenBLAS settings garden starts with.
eval "$("$garden" env)"
trap 'rm -rf "$work"' EXIT
"$garden" export --experiment="$experiment" --model_dir="$model_dir" \
  --export_dir="$work/export" >/dev/null
export_dir=$(ls -d "$work"/export/*/ | tail -n 1)

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

for beam in $beams; do
  peer_rates=() garden_rates=() ratios=()
  for round in $(seq 1 "$rounds"); do
    peer_line=$(/usr/bin/python3 bench/peer_decode.py "$export_dir" --input "$input" \
      --output "$work/peer.txt" --beam_size "$beam" --threads 1)
    echo "$peer_line"
    peer_rate=$(sed 's/.*"sentences_per_s": \([0-9.]*\).*/\1/' <<<"$peer_line")
    garden_line=$("$garden" translate --model_dir="$model_dir" --beam_size="$beam" \
      --input="$input" --output="$work/garden.txt" ${TRANSLATE_FLAGS---parallel_batches=1} \
      2>&1 >/dev/null | tail -n 1)
    garden_rate=$(sed 's/.* s, \([0-9.]*\) sentences\/s.*/\1/' <<<"$garden_line")
    echo "{\"bench\":\"decode_garden\",\"beam_size\":$beam,\"round\":$round,\"sentences_per_s\":$garden_rate}"
    peer_rates+=("$peer_rate") garden_rates+=("$garden_rate")
    ratios+=("$(awk -v g="$garden_rate" -v p="$peer_rate" 'BEGIN { printf "%.3f", g / p }')")
  done
  identical=$(paste -d '\n' "$work/peer.txt" "$work/garden.txt" | paste - - |
    awk -F '\t' '$1 == $2 { same++ } END { printf "%.4f", NR ? same / NR : 0 }')
  echo "{\"bench\":\"decode\",\"beam_size\":$beam,\"rounds\":$rounds," \
    "\"garden_flags\":\"${TRANSLATE_FLAGS---parallel_batches=1}\"," \
    "\"peer_sentences_per_s_median\":$(median "${peer_rates[@]}")," \
    "\"garden_sentences_per_s_median\":$(median "${garden_rates[@]}")," \
    "\"ratio_median\":$(median "${ratios[@]}"),\"ratios\":[$(IFS=,; echo "${ratios[*]}")]," \
    "\"identical_lines\":$identical}" | tr -d '\n' | sed 's/, "/,"/g'
  echo
done
