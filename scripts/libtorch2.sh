#!/usr/bin/env bash
# Builds Garden and runs its whole test suite against a LibTorch 2.x on the
# CPU, without a GPU: Debian unstable's libtorch-dev (2.14 in November 2026,
# which needs C++20) and its GCC, inside a chroot that mmdebstrap makes from
# Debian's archive. The default build stays on Debian 12's LibTorch 1.13.
#
#   bash scripts/libtorch2.sh [ROOT]   # as root; ROOT defaults to /var/tmp/garden-sid
#
# The first run downloads about 600 MB of packages into ROOT (1.7 GB on
# disk) and takes 10 minutes before the build; later runs reuse ROOT.
# The checkout's tracked files (with uncommitted changes) are copied to
# ROOT/garden and built in ROOT/garden/build.
set -euo pipefail
cd "$(dirname "$0")/.."
root=${1:-/var/tmp/garden-sid}
if [ "$(id -u)" -ne 0 ]; then
  echo "libtorch2: needs root (mmdebstrap and chroot)" >&2
  exit 1
fi
packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libtorch-dev libgloo-dev libopenblas0-pthread
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
  libprotobuf-dev protobuf-compiler zlib1g-dev
  libgtest-dev libgmock-dev
  libsentencepiece-dev sentencepiece libabsl-dev
  libcpp-httplib-dev
)
# ROOT is this script's own: made here (marked by .garden-libtorch2) or
# absent or empty. Anything else is left alone.
marker="$root/.garden-libtorch2"
if [ ! -f "$marker" ]; then
  if [ -e "$root" ] && [ -n "$(ls -A "$root" 2>/dev/null)" ]; then
    echo "libtorch2: $root exists and was not made by this script; give another ROOT" >&2
    exit 1
  fi
  command -v mmdebstrap >/dev/null ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends mmdebstrap
  # Debian's mirrors may serve a snapshot whose Release file has expired.
  mmdebstrap --mode=root --variant=apt --aptopt='Acquire::Check-Valid-Until "false"' \
    --include="$(IFS=,; echo "${packages[*]}")" sid "$root" http://deb.debian.org/debian
  touch "$marker"
fi

rm -rf "$root/garden"
mkdir -p "$root/garden"
git ls-files -z --cached --others --exclude-standard | tar --null --ignore-failed-read -T - -cf - | tar -xf - -C "$root/garden"

mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
trap 'umount "$root/proc" 2>/dev/null || true' EXIT
chroot "$root" bash -c '
  set -euo pipefail
  cd /garden
  echo "libtorch2: LibTorch $(dpkg-query -W -f="\${Version}" libtorch-dev), $(g++ --version | head -1)"
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
  cmake --build build -j "$(nproc)"
  ctest --test-dir build --output-on-failure -j "$(nproc)"
'
