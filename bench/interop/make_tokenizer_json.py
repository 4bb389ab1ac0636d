#!/usr/bin/env python3
"""Add tokenizer.json (Hugging Face tokenizers' WordPiece) to tests/data/hf/bert.

BertTokenizer (transformers 5: backed by tokenizers) over the fixture's vocab.txt writes tokenizer.json; its ids
for a few sentences go to tokenizer_ids.json, which Garden's WordPiece
reader of tokenizer.json must reproduce.

    python3 make_tokenizer_json.py BERT_DIR     (in the peer chroot)
"""
import json
import os
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from transformers import BertTokenizer  # noqa: E402

SENTENCES = [
    "The cat sat on the mat.",
    "A dog's days: playing, running!",
    "Good dogs, bad cats",
    "THE DOG ran at the Cat",
]


def main():
    bert_dir = sys.argv[1]
    with open(os.path.join(bert_dir, "vocab.txt"), encoding="utf-8") as f:
        vocab = {line.rstrip("\n"): i for i, line in enumerate(f)}
    # transformers 5's BertTokenizer is the tokenizers-backed one.
    tok = BertTokenizer(vocab=vocab, do_lower_case=True)
    with tempfile.TemporaryDirectory() as tmp:
        tok.save_pretrained(tmp)
        with open(os.path.join(tmp, "tokenizer.json"), encoding="utf-8") as f:
            data = json.load(f)
    with open(os.path.join(bert_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")
    ids = [tok(s, add_special_tokens=False)["input_ids"] for s in SENTENCES]
    with open(os.path.join(bert_dir, "tokenizer_ids.json"), "w", encoding="utf-8") as f:
        json.dump({"sentences": SENTENCES, "ids": ids}, f, indent=1)
        f.write("\n")
    print(ids)


if __name__ == "__main__":
    main()
