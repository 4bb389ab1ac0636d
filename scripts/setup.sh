#!/usr/bin/env bash
# Installs every Debian package Garden needs to build, test and run (gRPC's
# Python packages: the serving tests call garden serve with grpcio; iproute2
# and ping: the multi-host tests make hosts of network namespaces).
# Idempotent: packages already present are left as they are.
# --bench also installs Debian's PyTorch and SentencePiece for Python, which the peer
# benchmarks in bench/peers need (run them with /usr/bin/python3), and
# the HTTP load generators hey and wrk (bench/serving_load.sh).
# --fuzz also installs clang and its libFuzzer / sanitizer runtimes
# (scripts/fuzz.sh, scripts/sanitize.sh).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libtorch-dev libgloo-dev libopenblas0-pthread libdnnl-dev
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
  libprotobuf-dev protobuf-compiler zlib1g-dev libjpeg62-turbo-dev libpng-dev
  libgtest-dev libgmock-dev
  libsentencepiece-dev sentencepiece
  libcpp-httplib-dev
  libgrpc++-dev protobuf-compiler-grpc
  python3-grpcio python3-grpc-tools
  iproute2 iputils-ping
)
for option in "$@"; do
  case "$option" in
    --bench) packages+=(python3-torch python3-torchvision python3-sentencepiece wrk hey) ;;
    --fuzz) packages+=(clang libclang-rt-dev) ;;
    *) echo "setup: unknown option $option (--bench, --fuzz)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: need root to install: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y --no-install-recommends "${missing[@]}"
fi

# Debian's libtorch links against the generic libblas.so.3; make sure the
# alternative points at OpenBLAS (the reference BLAS is ~25x slower).
for alt in libblas.so.3-x86_64-linux-gnu liblapack.so.3-x86_64-linux-gnu; do
  if update-alternatives --query "$alt" >/dev/null 2>&1; then
    best=$(update-alternatives --query "$alt" | awk '/^Alternative: .*openblas-pthread/{print $2; exit}')
    if [ -n "$best" ] && [ "$(id -u)" -eq 0 ]; then
      update-alternatives --set "$alt" "$best" >/dev/null
    fi
  fi
done
echo "setup: all packages present"
