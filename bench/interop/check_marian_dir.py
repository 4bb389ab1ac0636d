#!/usr/bin/env python3
"""Load a `garden export --format=huggingface` translation directory with
transformers (MarianMTModel, MarianTokenizer) and translate with it.

    python3 check_marian_dir.py EXPORT_DIR SOURCES [GREEDY BEAM4]

SOURCES is one sentence a line; GREEDY and BEAM4 are what `garden translate
--beam_size=1` and `--beam_size=4` printed for them (a run trained with
task.model.beam_search=transformers, task.model.alpha=0 and
task.model.decode_max_length=MAX_NEW_TOKENS).
Prints the load report (missing / unexpected tensors must be empty) and, for
each line, transformers' translation; with GREEDY and BEAM4, counts the lines
that differ from Garden's and exits non-zero if any does. Decoding is
transformers' generate with num_beams 1 and 4, length_penalty 0 (Garden's
alpha 0) and max_new_tokens MAX_NEW_TOKENS (default 64, as the Garden
side's task.model.decode_max_length).
"""
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from transformers import MarianMTModel, MarianTokenizer  # noqa: E402


def main():
    export_dir, sources_path = sys.argv[1], sys.argv[2]
    expected = sys.argv[3:5]
    torch.set_num_threads(1)
    model, info = MarianMTModel.from_pretrained(export_dir, output_loading_info=True)
    print("missing:", info["missing_keys"], "unexpected:", info["unexpected_keys"])
    if info["unexpected_keys"] or [k for k in info["missing_keys"] if "embed_positions" not in k]:
        sys.exit("the export does not load whole")
    model.eval()
    tok = MarianTokenizer.from_pretrained(export_dir)
    sources = [line.rstrip("\n") for line in open(sources_path, encoding="utf-8")]
    max_new = int(os.environ.get("MAX_NEW_TOKENS", "64"))
    failures = 0
    for beams, garden_file in zip((1, 4), expected or [None, None]):
        garden = ([line.rstrip("\n") for line in open(garden_file, encoding="utf-8")]
                  if garden_file else None)
        for i, source in enumerate(sources):
            enc = tok([source], return_tensors="pt")
            with torch.no_grad():
                out = model.generate(**enc, num_beams=beams, do_sample=False, length_penalty=0.0,
                                     max_new_tokens=max_new)
            text = tok.decode(out[0], skip_special_tokens=True)
            same = garden is None or garden[i] == text
            failures += not same
            print(f"beam {beams} line {i + 1} {'same' if same else 'DIFFERS'}: {text}"
                  + ("" if same else f"\n  garden: {garden[i]}"))
    if expected:
        print(f"{failures} of {2 * len(sources)} translations differ from Garden's")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
