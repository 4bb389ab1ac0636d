#!/usr/bin/env bash
# Regenerate the Hugging Face interop fixtures (see tests/data/hf/README.md).
# Runs make_hf_fixtures.py (BERT, ELECTRA), make_tokenizer_json.py (bert's
# tokenizer.json) and make_marian_fixture.py (MarianMT, trained on the
# bundled gettext pairs) with the peer chroot's Python (transformers, torch,
# safetensors, sentencepiece; no network) and copies the output to $1
# (default tests/data/hf, relative to the repo root). Needs root (mount +
# chroot).
#   bench/interop/make_hf_fixtures.sh [DEST]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
sid="${PEER_SID:-/var/tmp/peer-sid}"
dest="${1:-$root/tests/data/hf}"

mountpoint -q "$sid/proc" || mount -t proc proc "$sid/proc"
work="$(mktemp -d "$sid/tmp/hf_fixtures.XXXXXX")"
trap 'rm -rf "$work"' EXIT
inner="/tmp/$(basename "$work")"
cp "$here/make_hf_fixtures.py" "$here/make_tokenizer_json.py" "$here/make_marian_fixture.py" \
   "$root/data/translation/en_de_train.tsv" "$work/"
run() { chroot "$sid" /usr/bin/env HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 /usr/bin/python3 "$@"; }
run "$inner/make_hf_fixtures.py" "$inner/out"
run "$inner/make_tokenizer_json.py" "$inner/out/bert"
run "$inner/make_marian_fixture.py" "$inner/en_de_train.tsv" "$inner/out/marian"
mkdir -p "$dest"
chmod -R u+rwX,go+rX "$work/out"
cp -r "$work/out/." "$dest/"
echo "fixtures written to $dest"
