#!/usr/bin/env python3
"""Make the small Hugging Face interop fixtures under tests/data/hf.

Builds tiny RANDOM BERT / ELECTRA models with transformers (from configs only,
nothing is downloaded), saves each with save_pretrained(safe_serialization=True)
plus a hand-written WordPiece vocab.txt, writes the fixed inputs (inputs.json)
and the reference outputs of each model (expected.safetensors, float32,
eval mode, no_grad, eager attention).

Usage (inside an environment with torch + transformers + safetensors):
    python3 make_hf_fixtures.py OUT_DIR
Normally run through make_hf_fixtures.sh, which runs it in the peer chroot.

Everything is seeded; running it twice gives byte-identical safetensors files.
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import safetensors  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
import transformers  # noqa: E402
from transformers import (  # noqa: E402
    BertConfig,
    BertForSequenceClassification,
    BertModel,
    ElectraConfig,
    ElectraForPreTraining,
    ElectraForSequenceClassification,
)

# 40 tokens. Ids: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4.
VOCAB = [
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    "the", "a", "of", "and", "to", "in", "is", "it", "that", "was",
    "he", "she", "for", "on", "with", "as", "at", "by", "this", "from",
    "cat", "dog", "sat", "mat", "run", "play", "good", "bad", "day",
    "##s", "##ing", "##ed", "##ly", "##er", ".",
]
assert len(VOCAB) == 40 and len(set(VOCAB)) == 40

SEQ = 8
# Row 0: [CLS] the cat sat [SEP] on the [SEP]    (second segment = last 3 tokens)
# Row 1: [CLS] a dog ##s [SEP] [PAD] [PAD] [PAD] (padded after 5 tokens)
INPUT_IDS = [
    [2, 5, 25, 27, 3, 18, 5, 3],
    [2, 6, 26, 34, 3, 0, 0, 0],
]
ATTENTION_MASK = [
    [1, 1, 1, 1, 1, 1, 1, 1],
    [1, 1, 1, 1, 1, 0, 0, 0],
]
TOKEN_TYPE_IDS = [
    [0, 0, 0, 0, 0, 1, 1, 1],
    [0, 0, 0, 0, 0, 0, 0, 0],
]

COMMON = dict(
    vocab_size=40,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
    type_vocab_size=2,
    hidden_act="gelu",
    layer_norm_eps=1e-12,
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
    pad_token_id=0,
)


def bert_config(**kw):
    return BertConfig(**COMMON, **kw)


def electra_config(**kw):
    return ElectraConfig(embedding_size=16, **COMMON, **kw)


# name -> (model class, config factory, seed)
MODELS = [
    ("bert", BertModel, lambda: bert_config(architectures=["BertModel"]), 1001),
    ("bert_classifier", BertForSequenceClassification,
     lambda: bert_config(num_labels=3, architectures=["BertForSequenceClassification"]), 1002),
    ("electra", ElectraForPreTraining,
     lambda: electra_config(architectures=["ElectraForPreTraining"]), 1003),
    ("electra_classifier", ElectraForSequenceClassification,
     lambda: electra_config(num_labels=2, architectures=["ElectraForSequenceClassification"]), 1004),
]


def randomize(model, seed):
    """Overwrite every parameter with seeded random values.

    Matrices/embeddings: N(0, 0.2) (so layers are far from identity:
    32-wide inputs give O(1) activations and non-uniform attention).
    LayerNorm weights: 1 + N(0, 0.2); every bias and LayerNorm bias: N(0, 0.1).
    Parameters are visited in sorted-name order so the result only depends
    on the seed.
    """
    g = torch.Generator().manual_seed(seed)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name in sorted(params):
            p = params[name]
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if "LayerNorm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            else:
                p.copy_(0.2 * noise)


def run_model(name, model, inputs):
    """Reference outputs (float32) of `model` on `inputs`."""
    out = {}
    with torch.no_grad():
        res = model(**inputs, output_hidden_states=True, return_dict=True)
    hs = res.hidden_states
    # hidden_states[0] = embeddings output (after embeddings_project for ELECTRA),
    # hidden_states[i] = output of encoder layer i-1.
    for i, h in enumerate(hs):
        out[f"hidden_states.{i}"] = h
    if name == "bert":
        out["last_hidden_state"] = res.last_hidden_state
        out["pooler_output"] = res.pooler_output
        assert torch.equal(hs[-1], res.last_hidden_state)
    else:
        out["last_hidden_state"] = hs[-1]
        out["logits"] = res.logits
        # Cross-check: hidden_states[-1] is the base model's last hidden state.
        base = model.bert if hasattr(model, "bert") else model.electra
        with torch.no_grad():
            lhs = base(**inputs, return_dict=True).last_hidden_state
        assert torch.equal(lhs, hs[-1]), name
    return {k: v.detach().to(torch.float32).clone().contiguous() for k, v in out.items()}


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "hf"
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    inputs_json = {
        "input_ids": INPUT_IDS,
        "attention_mask": ATTENTION_MASK,
        "token_type_ids": TOKEN_TYPE_IDS,
    }
    with open(os.path.join(out_dir, "inputs.json"), "w") as f:
        json.dump(inputs_json, f, indent=1)
        f.write("\n")
    inputs = {k: torch.tensor(v, dtype=torch.long) for k, v in inputs_json.items()}

    for name, cls, make_cfg, seed in MODELS:
        torch.manual_seed(seed)
        cfg = make_cfg()
        model = cls._from_config(cfg, attn_implementation="eager")
        randomize(model, seed)
        model.eval()
        d = os.path.join(out_dir, name)
        os.makedirs(d, exist_ok=True)
        model.save_pretrained(d, safe_serialization=True)
        with open(os.path.join(d, "vocab.txt"), "w") as f:
            f.write("\n".join(VOCAB) + "\n")
        expected = run_model(name, model, inputs)
        save_file(dict(sorted(expected.items())), os.path.join(d, "expected.safetensors"),
                  metadata={"format": "pt"})
        print(name, {k: list(v.shape) for k, v in sorted(expected.items())})

    write_readme(out_dir)


def write_readme(out_dir):
    text = f"""# Hugging Face interop fixtures

Tiny RANDOM models made with Hugging Face transformers, used to test Garden's
Hugging Face import/export (`export --format=huggingface`). Everything is
float32 and seeded; regenerating gives byte-identical `*.safetensors`.

Made with transformers {transformers.__version__}, torch {torch.__version__},
safetensors {safetensors.__version__} (Debian-unstable peer chroot), by:

    bench/interop/make_hf_fixtures.sh tests/data/hf

(which runs `python3 bench/interop/make_hf_fixtures.py OUT` inside the chroot
at ${{PEER_SID:-/var/tmp/peer-sid}} and copies OUT here).

## Files

- `inputs.json`: fixed batch, shape [2, 8]: `input_ids`, `attention_mask`,
  `token_type_ids`. Row 0 has a second segment (token_type 1) on its last 3
  tokens; row 1 is padded with [PAD]=0 after 5 tokens.
- every model folder has `config.json` + `model.safetensors` (from
  `save_pretrained(dir, safe_serialization=True)`), `vocab.txt` (the same
  hand-written 40-token WordPiece vocab: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3
  [MASK]=4, lowercase words, a few ##pieces), and `expected.safetensors`:
  outputs on inputs.json with model.eval(), torch.no_grad(), eager attention:
  - `last_hidden_state` [2, 8, 32] (the base encoder's last hidden state),
  - `hidden_states.0` (embeddings output, after `embeddings_project` for
    ELECTRA), `hidden_states.1`, `hidden_states.2` (after each layer), all
    [2, 8, 32], for debugging a mapping layer by layer,
  - `pooler_output` [2, 32] (bert only), `logits` (heads only).

| folder | architecture | extra outputs |
|---|---|---|
| `bert/` | `BertModel` (with pooler) | `pooler_output` [2, 32] |
| `bert_classifier/` | `BertForSequenceClassification`, num_labels 3 | `logits` [2, 3] |
| `electra/` | `ElectraForPreTraining` (discriminator) | `logits` [2, 8] |
| `electra_classifier/` | `ElectraForSequenceClassification`, num_labels 2 | `logits` [2, 2] |

Sizes: vocab 40, hidden 32, 2 layers, 4 heads, intermediate 64, max positions
64, type vocab 2, hidden_act "gelu" (erf), layer_norm_eps 1e-12, dropout 0.1
(inactive in eval). ELECTRA: embedding_size 16 (so `embeddings_project`
16 -> 32 exists). All weights are N(0, 0.2), LayerNorm weights 1 + N(0, 0.2),
all biases N(0, 0.1) (including the [PAD] embedding row), so a wrong mapping
cannot pass by luck.

## Checking a model folder against the reference

    python3 bench/interop/check_hf_dir.py MODEL_DIR tests/data/hf/inputs.json \\
        tests/data/hf/<name>/expected.safetensors

(in the chroot; prints the max abs difference per tensor and exits non-zero
if any exceeds 1e-5). `check_hf_dir.py --print-keys MODEL_DIR` lists the
saved tensors.
"""
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
