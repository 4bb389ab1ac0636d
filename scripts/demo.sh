#!/usr/bin/env bash
# Installs what Garden needs, builds it, and trains the default experiment on
# the data bundled in data/. Ends by printing where the results are.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh garden_cli
model_dir="runs/iris-$(date +%Y%m%d-%H%M%S)"
./build/garden train --experiment=tabular/iris --mode=train_and_eval --model_dir="$model_dir"
