#!/usr/bin/env bash
# Installs what Garden needs, builds it, trains the default experiment
# (English -> German on the slice of gettext catalogs bundled in data/), then
# translates a few sentences it has not seen. Ends by printing where the
# results are.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh garden_cli
model_dir="runs/translation-demo-$(date +%Y%m%d-%H%M%S)"
./build/garden train --experiment=wmt_transformer/demo --mode=train_and_eval --model_dir="$model_dir"
echo
echo "Translating five validation sentences with $model_dir (beam 4):"
sentences=$(sed -n '21p;39p;62p;84p;89p' data/translation/en_de_valid.tsv)
cut -f1 <<<"$sentences" | ./build/garden translate --model_dir="$model_dir" >"$model_dir/demo_translations.txt"
paste <(cut -f1 <<<"$sentences") "$model_dir/demo_translations.txt" <(cut -f2 <<<"$sentences") |
  while IFS=$'\t' read -r source output reference; do
    printf '  English:   %s\n  Garden:    %s\n  Reference: %s\n\n' "$source" "$output" "$reference"
  done
