#!/usr/bin/env bash
# Installs Garden from a build tree into a scratch prefix, builds the
# out-of-tree examples examples/custom_task (a Task of one's own) and
# examples/custom_fx_model (a TensorFX ModelBuilder of one's own) against
# that installation with find_package(garden), and runs them: what a user
# who copies an example does.
#
# usage: run_install_test.sh <build dir> <source dir> <work dir>
#
# <work dir> is deleted and recreated first, so reruns start clean. Every
# failed check prints one "install test: FAIL: ..." line; the exit status is
# non-zero when any check failed.
set -euo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 <build dir> <source dir> <work dir>" >&2
  exit 2
fi

build_dir=$(realpath -- "$1")
source_dir=$(realpath -- "$2")
work_dir=$3

# Thresholds for the example's final evaluation. With noise_stddev 0.1 a
# perfect fit gives a mean absolute error of about 0.08 and a loss of 0.01.
max_mae=0.2
max_validation_loss=0.05

say() { echo "install test: $*"; }
die() {
  echo "install test: FAIL: $*" >&2
  exit 1
}
failures=0
fail() {
  echo "install test: FAIL: $*" >&2
  failures=$((failures + 1))
}
# Shows a log file's tail after a failed step.
show() {
  echo "---- last lines of $1 ----" >&2
  tail -n 30 -- "$1" >&2 || true
  echo "----" >&2
}

[[ -f "$build_dir/CMakeCache.txt" ]] || die "'$build_dir' is not a CMake build directory"
for example in custom_task custom_fx_model; do
  [[ -f "$source_dir/examples/$example/CMakeLists.txt" ]] ||
    die "'$source_dir' has no examples/$example/CMakeLists.txt"
done

# A clean work dir, whatever an earlier run left there.
case "$work_dir" in
  "" | "/" | "$HOME" | "$source_dir" | "$build_dir") die "refusing to use '$work_dir' as the work dir" ;;
esac
rm -rf -- "$work_dir"
mkdir -p -- "$work_dir"
work_dir=$(realpath -- "$work_dir")
prefix=$work_dir/prefix
example_build=$work_dir/example-build
run_dir=$work_dir/run
logs=$work_dir/logs
mkdir -p -- "$logs"

# ---- install -------------------------------------------------------------------
say "installing $build_dir into $prefix"
cmake --install "$build_dir" --prefix "$prefix" >"$logs/install.log" 2>&1 ||
  { show "$logs/install.log"; die "cmake --install failed"; }
garden_config=$(find "$prefix" -name gardenConfig.cmake -print -quit)
[[ -n "$garden_config" ]] || die "the installation has no gardenConfig.cmake"
[[ -x "$prefix/bin/garden" ]] || die "the installation has no executable bin/garden"

# ---- the installed garden binary -------------------------------------------------
say "running $prefix/bin/garden experiments"
if "$prefix/bin/garden" experiments >"$logs/garden_experiments.out" 2>"$logs/garden_experiments.err"; then
  grep -q '^tabular/iris ' "$logs/garden_experiments.out" ||
    fail "installed 'garden experiments' does not list tabular/iris"
else
  status=$?
  show "$logs/garden_experiments.err"
  fail "installed 'garden experiments' exited with status $status"
fi
# The installed binary finds its bundled data in the installation's
# share/garden/data, not in the source tree.
iris_csv=$("$prefix/bin/garden" config --experiment=tabular/iris 2>/dev/null |
  sed -n 's/^ *input_path: *\(.*iris\.csv\)$/\1/p' | head -n 1 || true)
if [[ "$iris_csv" != "$prefix"/* ]]; then
  fail "installed garden reads tabular/iris data from '$iris_csv', outside $prefix"
fi

demo_tsv=$("$prefix/bin/garden" config --experiment=wmt_transformer/demo 2>/dev/null |
  sed -n 's/^ *input_path: *\(.*en_de_train\.tsv\)$/\1/p' | head -n 1 || true)
if [[ "$demo_tsv" != "$prefix"/* || ! -f "$demo_tsv" ]]; then
  fail "installed garden reads wmt_transformer/demo data from '$demo_tsv', not a file under $prefix"
fi

# The installed library finds its SentencePiece module beside itself.
say "running the installed garden spm train / encode"
spm_dir="$work_dir/spm"
mkdir -p "$spm_dir"
if "$prefix/bin/garden" spm train --input="$prefix/share/garden/data/testdata/en_de_sample.tsv" \
    --tsv_columns=0,1 --model_prefix="$spm_dir/m" --vocab_size=300 \
    >"$logs/spm_train.out" 2>"$logs/spm_train.err"; then
  pieces=$(echo "Delete the file" | "$prefix/bin/garden" spm encode --model="$spm_dir/m.model" --pieces)
  [[ "$pieces" == *"file"* ]] || fail "installed 'garden spm encode' gave '$pieces'"
else
  fail "installed 'garden spm train' failed: $(tail -n 1 "$logs/spm_train.err")"
fi

# ---- build the example against the installation -----------------------------------
launcher=()
if ccache_path=$(command -v ccache); then
  launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=$ccache_path")
fi
say "configuring examples/custom_task against $prefix"
cmake -S "$source_dir/examples/custom_task" -B "$example_build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON \
  "${launcher[@]}" >"$logs/configure.log" 2>&1 ||
  { show "$logs/configure.log"; die "configuring examples/custom_task failed"; }
found_dir=$(sed -n 's/^garden_DIR:PATH=//p' "$example_build/CMakeCache.txt")
[[ "$(realpath -m -- "$found_dir")" == "$prefix"/* ]] ||
  fail "find_package(garden) found '$found_dir', not the installation under $prefix"

say "building my_garden"
cmake --build "$example_build" -- -j2 >"$logs/build.log" 2>&1 ||
  { show "$logs/build.log"; die "building examples/custom_task failed"; }
my_garden=$example_build/my_garden
[[ -x "$my_garden" ]] || die "the build made no $my_garden"
if command -v ldd >/dev/null; then
  ldd_out=$(ldd "$my_garden" 2>&1 || true)
  libgarden=$(awk '/libgarden/ && !found {print $3; found = 1}' <<<"$ldd_out")
  [[ "$(realpath -m -- "${libgarden:-none}")" == "$prefix"/* ]] ||
    fail "my_garden loads libgarden from '${libgarden:-nowhere}', not from $prefix"
fi

# ---- my_garden experiments ----------------------------------------------------------
say "running my_garden experiments"
if "$my_garden" experiments >"$logs/experiments.out" 2>"$logs/experiments.err"; then
  grep -q '^example/linear_regression ' "$logs/experiments.out" ||
    fail "'my_garden experiments' does not list example/linear_regression"
  grep -q '^tabular/iris ' "$logs/experiments.out" ||
    fail "'my_garden experiments' does not list the built-in tabular/iris"
else
  status=$?
  show "$logs/experiments.err"
  fail "'my_garden experiments' exited with status $status"
fi

# ---- my_garden train ----------------------------------------------------------------
say "running my_garden train --experiment=example/linear_regression --mode=train_and_eval"
start=$(date +%s.%N)
if "$my_garden" train --experiment=example/linear_regression --mode=train_and_eval \
  --model_dir="$run_dir" >"$logs/train.out" 2>"$logs/train.err"; then
  end=$(date +%s.%N)
  say "training took $(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.2f", b - a}') s"
  [[ -f "$run_dir/params.yaml" ]] || fail "training wrote no $run_dir/params.yaml"
  compgen -G "$run_dir/ckpt-*" >/dev/null || fail "training wrote no checkpoint $run_dir/ckpt-*"
  evaluation=$(grep '^evaluation:' "$logs/train.out" | tail -n 1 || true)
  if [[ -z "$evaluation" ]]; then
    fail "'my_garden train' printed no 'evaluation:' line"
  else
    say "$evaluation"
    # "evaluation:  mean_absolute_error 0.08, validation_loss 0.01"
    metric() {
      sed -e 's/^evaluation:[[:space:]]*//' <<<"$evaluation" | tr ',' '\n' |
        awk -v key="$1" '$1 == key {print $2}'
    }
    mae=$(metric mean_absolute_error)
    loss=$(metric validation_loss)
    if [[ -z "$mae" ]]; then
      fail "the evaluation has no mean_absolute_error: '$evaluation'"
    elif ! awk -v x="$mae" -v max="$max_mae" 'BEGIN {exit !(x + 0 < max + 0)}'; then
      fail "mean_absolute_error $mae is not below $max_mae: the example did not learn"
    fi
    if [[ -z "$loss" ]]; then
      fail "the evaluation has no validation_loss: '$evaluation'"
    elif ! awk -v x="$loss" -v max="$max_validation_loss" 'BEGIN {exit !(x + 0 < max + 0)}'; then
      fail "validation_loss $loss is not below $max_validation_loss: the example did not learn"
    fi
  fi
else
  status=$?
  show "$logs/train.err"
  fail "'my_garden train' exited with status $status"
fi


# ---- examples/custom_fx_model: a TensorFX model of one's own -------------------------
fx_build=$work_dir/fx-build
say "configuring and building examples/custom_fx_model against $prefix"
cmake -S "$source_dir/examples/custom_fx_model" -B "$fx_build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON \
  "${launcher[@]}" >"$logs/fx_configure.log" 2>&1 ||
  { show "$logs/fx_configure.log"; die "configuring examples/custom_fx_model failed"; }
cmake --build "$fx_build" -- -j2 >"$logs/fx_build.log" 2>&1 ||
  { show "$logs/fx_build.log"; die "building examples/custom_fx_model failed"; }
my_fx=$fx_build/my_fx
[[ -x "$my_fx" ]] || die "the build made no $my_fx"
# TensorFX's iris sample as installed, trained with the example's model and
# its own arguments, then its export predicted.
iris=$prefix/share/garden/data/fx/iris
fx_job=$work_dir/fx-job
min_fx_accuracy=0.9
say "running my_fx fx train --model regularized_classification"
if (cd "$iris" && "$my_fx" fx train --model regularized_classification --output "$fx_job" \
  --data-train train.csv --data-eval eval.csv --data-schema schema.yaml \
  --data-metadata metadata.json --data-features features.yaml --batch-size 10 \
  --max-steps 400 --hidden-units 16 --dropout 0.1 --l2 0.001 --learning-rate 0.05 --seed 1) \
  >"$logs/fx_train.out" 2>"$logs/fx_train.err"; then
  accuracy=$(sed -n 's/.*Evaluation metric: \([0-9.]*\).*/\1/p' "$logs/fx_train.err" | tail -n 1)
  say "regularized_classification eval accuracy ${accuracy:-none}"
  if [[ -z "$accuracy" ]]; then
    fail "'my_fx fx train' logged no evaluation"
  elif ! awk -v x="$accuracy" -v min="$min_fx_accuracy" 'BEGIN {exit !(x + 0 >= min + 0)}'; then
    fail "regularized_classification reached accuracy $accuracy, below $min_fx_accuracy"
  fi
  grep -q '^model: regularized_classification$' "$fx_job/model/model.yaml" 2>/dev/null ||
    fail "the export $fx_job/model does not name regularized_classification"
  if "$my_fx" fx predict --model "$fx_job/model" --input "$iris/eval.csv" \
    >"$logs/fx_predict.out" 2>"$logs/fx_predict.err"; then
    lines=$(grep -c '^{"label": "[a-z]*", "scores": \[' "$logs/fx_predict.out" || true)
    [[ "$lines" == 30 ]] || fail "'my_fx fx predict' printed $lines predictions for 30 lines"
  else
    show "$logs/fx_predict.err"
    fail "'my_fx fx predict' failed"
  fi
else
  status=$?
  show "$logs/fx_train.err"
  fail "'my_fx fx train' exited with status $status"
fi

if ((failures > 0)); then
  echo "install test: $failures check(s) failed; logs in $logs" >&2
  exit 1
fi
say "all checks passed"
