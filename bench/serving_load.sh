#!/usr/bin/env bash
# Load test of `garden serve` on loopback:
# 1. one client on one kept-alive connection (Python's http.client,
#    bench/keepalive_latency.py): p50 / p99 of the iris status and predict;
# 2. hey (Debian's HTTP load generator, Go's kept-alive client; `bash
#    scripts/setup.sh --bench` installs it), CLIENTS concurrent clients for
#    SECONDS seconds, one instance per request: the iris status route (the
#    HTTP layer alone), iris and a translation export with dynamic batching
#    off (one request per forward pass) and on. Prints requests/s, p50 / p99
#    latency and the non-200 answers of each run;
# 3. `garden translate` on the served sentence 2048 times, sentences/s, beside
#    the batched server's.
#
#   [TRANSLATION_MODEL_DIR=runs/translation-demo-...] \
#     bash bench/serving_load.sh [CLIENTS=16] [SECONDS=20] [DEMO_STEPS=400]
#
# Without TRANSLATION_MODEL_DIR it trains wmt_transformer/demo (the demo's
# model and data) for DEMO_STEPS steps first.
set -euo pipefail
cd "$(dirname "$0")/.."
garden=${GARDEN:-build/garden}
clients=${1:-16}
seconds=${2:-20}
demo_steps=${3:-400}
command -v hey >/dev/null || { echo "hey is not installed: bash scripts/setup.sh --bench" >&2; exit 1; }
scratch=$(mktemp -d)
server=""
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$scratch"' EXIT

"$garden" train --experiment=tabular/iris --mode=train --model_dir="$scratch/iris" \
  --params_override=runtime.seed=1 >"$scratch/iris.log" 2>&1
"$garden" export --experiment=tabular/iris --model_dir="$scratch/iris" --export_dir="$scratch/iris_export" >/dev/null
translation_dir=${TRANSLATION_MODEL_DIR:-}
if [ -z "$translation_dir" ]; then
  translation_dir="$scratch/translation"
  echo "training wmt_transformer/demo for $demo_steps steps (set TRANSLATION_MODEL_DIR to use a demo run)" >&2
  "$garden" train --experiment=wmt_transformer/demo --mode=train --model_dir="$translation_dir" \
    --params_override="trainer.train_steps=$demo_steps,runtime.seed=1" >"$scratch/translation.log" 2>&1
fi
"$garden" export --experiment=wmt_transformer/demo --model_dir="$translation_dir" \
  --export_dir="$scratch/translation_export" >/dev/null

echo '{"instances": [{"sepal_length": 6.1, "sepal_width": 2.8, "petal_length": 4.7, "petal_width": 1.2}]}' >"$scratch/iris.json"
sentence=$(sed -n '35p' data/translation/en_de_valid.tsv | cut -f1 | sed 's/\\/\\\\/g; s/"/\\"/g')
echo "{\"instances\": [\"$sentence\"]}" >"$scratch/translation.json"

ready() {  # the model answers its status as AVAILABLE
  { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
  printf 'GET /v1/models/m HTTP/1.0\r\n\r\n' >&3
  local status=1
  grep -q AVAILABLE <&3 && status=0
  exec 3>&-
  return $status
}

port=18501
serve() {  # EXPORT FLAGS...: starts garden serve on the next port, waits until it answers
  port=$((port + 1))
  "$garden" serve --export_dir="$scratch/$1_export" --port=$port --grpc_port=-1 --model_name=m \
    "${@:2}" 2>"$scratch/serve.log" &
  server=$!
  for _ in $(seq 600); do ready $port && break; sleep 0.1; done
}

echo "== one client, one kept-alive connection (bench/keepalive_latency.py)"
serve iris
/usr/bin/python3 bench/keepalive_latency.py $port m 2000 "$scratch/iris.json"
kill -TERM "$server"; wait "$server" || true; server=""

echo
echo "== $clients clients (hey), ${seconds} s each"
printf '%-12s %-9s %10s %10s %10s %8s %s\n' export batching "req/s" "p50 ms" "p99 ms" errors "mean batch"
for name in iris-status iris translation; do
  for batching in off on; do
    [ "$name" = iris-status ] && [ "$batching" = on ] && continue
    flags=()
    [ "$batching" = on ] && flags=(--enable_batching --max_batch_size=32 --batch_timeout_micros=2000)
    if [ "$name" = iris-status ]; then
      serve iris
      hey -z "${seconds}s" -c "$clients" "http://127.0.0.1:$port/v1/models/m" >"$scratch/hey.txt"
    else
      serve "$name" "${flags[@]}"
      hey -z "${seconds}s" -c "$clients" -m POST -T application/json -D "$scratch/$name.json" \
        "http://127.0.0.1:$port/v1/models/m:predict" >"$scratch/hey.txt"
    fi
    metrics=$(exec 3<>"/dev/tcp/127.0.0.1/$port"; printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3; cat <&3)
    kill -TERM "$server"; wait "$server" || true; server=""
    rps=$(awk '/Requests\/sec/ {print $2}' "$scratch/hey.txt")
    p50=$(awk '/ 50% in/ {printf "%.1f", $3 * 1000}' "$scratch/hey.txt")
    p99=$(awk '/ 99% in/ {printf "%.1f", $3 * 1000}' "$scratch/hey.txt")
    errors=$(awk '/Status code distribution/ {s = 1; e = 0; next}
      /Error distribution/ {s = 0; e = 1; next}
      match($0, /\[[0-9]+\]/) {
        v = substr($0, RSTART + 1, RLENGTH - 2)
        if (s && v != 200) n += $2
        if (e) n += v
      }
      END {print n + 0}' "$scratch/hey.txt")
    batch=$(awk '/^garden_serving_batch_size_sum/ {s=$2} /^garden_serving_batch_size_count/ {c=$2} END {if (c) printf "%.2f", s / c}' <<<"$metrics")
    printf '%-12s %-9s %10s %10s %10s %8s %s\n' "$name" "$batching" "$rps" "$p50" "$p99" "$errors" "$batch"
  done
done

echo
echo "== garden translate, the same model and sentence, 2048 times (beam 4)"
for _ in $(seq 2048); do sed -n '35p' data/translation/en_de_valid.tsv | cut -f1; done >"$scratch/sentences.txt"
start=$(date +%s.%N)
"$garden" translate --model_dir="$translation_dir" <"$scratch/sentences.txt" >/dev/null 2>&1
end=$(date +%s.%N)
awk -v s="$start" -v e="$end" 'BEGIN {printf "garden translate: %.1f sentences/s (start-up included)\n", 2048 / (e - s)}'
