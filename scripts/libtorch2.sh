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
  libprotobuf-dev protobuf-compiler zlib1g-dev libjpeg62-turbo-dev libpng-dev libdnnl-dev
  libgtest-dev libgmock-dev
  libsentencepiece-dev sentencepiece libabsl-dev
  libcpp-httplib-dev
  libgrpc++-dev protobuf-compiler-grpc python3-grpcio python3-grpc-tools
)
# The mirror mmdebstrap downloads from: the Debian archive this machine's apt
# already uses, the first "deb" entry of /etc/apt/sources.list,
# sources.list.d/*.list or sources.list.d/*.sources (deb822) with the main
# component and a Debian suite (this release's codename, stable, testing,
# unstable or sid, also with -updates or -backports), not the security archive.
debian_mirror() {
  local codename="" files=() f
  if [ -r /etc/os-release ]; then
    codename=$(. /etc/os-release && if [ "${ID:-}" = debian ]; then echo "${VERSION_CODENAME:-}"; fi)
  fi
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    if [ -f "$f" ]; then files+=("$f"); fi
  done
  if [ ${#files[@]} -eq 0 ]; then return 0; fi
  awk -v codename="$codename" '
    function has(list, word,   n, w, i) {
      n = split(list, w)
      for (i = 1; i <= n; i++) if (w[i] == word) return 1
      return 0
    }
    function debian_suite(suite) {
      if (suite ~ /security/) return 0
      sub(/-(updates|backports)$/, "", suite)
      return suite == "stable" || suite == "testing" || suite == "unstable" || suite == "sid" ||
             (codename != "" && suite == codename)
    }
    function offer(types, uris, suites, components,   n, s, i, u) {
      if (found || !has(types, "deb") || !has(components, "main")) return
      n = split(suites, s)
      for (i = 1; i <= n; i++) if (debian_suite(s[i])) break
      if (i > n) return
      n = split(uris, u)
      for (i = 1; i <= n; i++) {
        if (u[i] !~ /security/) { print u[i]; found = 1; exit }
      }
    }
    function stanza() {
      if (tolower(field["enabled"]) !~ /^[ \t]*no[ \t]*$/)
        offer(field["types"], field["uris"], field["suites"], field["components"])
      delete field; key = ""
    }
    FNR == 1 { stanza() }
    FILENAME ~ /\.sources$/ {
      if ($0 ~ /^[ \t]*$/) { stanza(); next }
      if ($0 ~ /^#/) next
      if ($0 ~ /^[ \t]/) { if (key != "") field[key] = field[key] " " $0; next }
      i = index($0, ":")
      if (i == 0) next
      key = tolower(substr($0, 1, i - 1))
      field[key] = substr($0, i + 1)
      next
    }
    {
      line = $0
      sub(/#.*/, "", line)
      n = split(line, w)
      if (n < 3) next
      i = 2
      if (w[i] ~ /^\[/) {
        while (i <= n && w[i] !~ /\]$/) i++
        i++
      }
      if (i + 1 > n) next
      components = ""
      for (j = i + 2; j <= n; j++) components = components " " w[j]
      offer(w[1], w[i], w[i + 1], components)
    }
    END { if (!found) stanza() }
  ' "${files[@]}"
}

# ROOT is this script's own: made here (marked by .garden-libtorch2) or
# absent or empty. Anything else is left alone.
marker="$root/.garden-libtorch2"
if [ ! -f "$marker" ]; then
  if [ -e "$root" ] && [ -n "$(ls -A "$root" 2>/dev/null)" ]; then
    echo "libtorch2: $root exists and was not made by this script; give another ROOT" >&2
    exit 1
  fi
  mirror=$(debian_mirror || true)
  if [ -z "$mirror" ]; then
    echo "libtorch2: no Debian archive (a deb entry with main and a Debian suite) in /etc/apt/sources.list or /etc/apt/sources.list.d/ to take the mirror from" >&2
    exit 1
  fi
  command -v mmdebstrap >/dev/null ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends mmdebstrap
  # Debian's mirrors may serve a snapshot whose Release file has expired.
  mmdebstrap --mode=root --variant=apt --aptopt='Acquire::Check-Valid-Until "false"' \
    --include="$(IFS=,; echo "${packages[*]}")" sid "$root" "$mirror"
  touch "$marker"
fi

# A ROOT made before a package joined the list gets it now.
missing=()
for p in "${packages[@]}"; do
  chroot "$root" dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
  chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Check-Valid-Until=false update -qq
  chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
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
