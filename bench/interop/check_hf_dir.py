#!/usr/bin/env python3
"""Check a Hugging Face model folder against reference outputs.

    check_hf_dir.py MODEL_DIR INPUTS_JSON EXPECTED_SAFETENSORS [--tol 1e-5]
    check_hf_dir.py --print-keys MODEL_DIR

First form: loads MODEL_DIR with transformers (offline, local_files_only),
choosing the Auto class from config.json's `architectures`, runs the inputs
of INPUTS_JSON (input_ids / attention_mask / token_type_ids) in eval mode,
and compares every tensor of EXPECTED_SAFETENSORS (see tests/data/hf/README.md
for the names: last_hidden_state, pooler_output, logits, hidden_states.N)
with the model's output, printing the max abs difference per tensor. Exits 1
if any difference exceeds the tolerance, if a weight is missing from / not
used by the checkpoint, or if a shape differs.

Second form: lists the tensors saved in MODEL_DIR (name, dtype, shape) and
the safetensors metadata, without loading transformers.

Runs where transformers is installed (the peer chroot, see
make_hf_fixtures.sh).
"""
import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def weight_files(model_dir):
    single = os.path.join(model_dir, "model.safetensors")
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(single):
        return [single]
    if os.path.exists(index):
        with open(index) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(model_dir, s) for s in shards]
    sys.exit(f"no model.safetensors (or index) in {model_dir}")


def print_keys(model_dir):
    from safetensors import safe_open

    total = 0
    for path in weight_files(model_dir):
        with safe_open(path, framework="pt") as f:
            print(f"# {os.path.basename(path)} metadata={f.metadata()}")
            for k in sorted(f.keys()):
                sl = f.get_slice(k)
                shape = list(sl.get_shape())
                n = 1
                for s in shape:
                    n *= s
                total += n
                print(f"{k}\t{sl.get_dtype()}\t{shape}")
    print(f"# {total} values")


def auto_class(arch):
    import transformers as tf

    table = [
        ("ForSequenceClassification", tf.AutoModelForSequenceClassification),
        ("ForPreTraining", tf.AutoModelForPreTraining),
        ("ForMaskedLM", tf.AutoModelForMaskedLM),
        ("ForTokenClassification", tf.AutoModelForTokenClassification),
        ("ForQuestionAnswering", tf.AutoModelForQuestionAnswering),
    ]
    for suffix, cls in table:
        if arch.endswith(suffix):
            return cls
    return tf.AutoModel


def check(model_dir, inputs_path, expected_path, tol):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig

    torch.set_num_threads(1)
    config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
    archs = getattr(config, "architectures", None) or []
    if len(archs) != 1:
        sys.exit(f"config.json architectures must name one class, got {archs}")
    cls = auto_class(archs[0])
    model, info = cls.from_pretrained(
        model_dir,
        local_files_only=True,
        attn_implementation="eager",
        dtype=torch.float32,
        output_loading_info=True,
    )
    if type(model).__name__ != archs[0]:
        sys.exit(f"{cls.__name__} built {type(model).__name__}, config says {archs[0]}")
    model.eval()
    print(f"model: {type(model).__name__} via {cls.__name__}")

    failed = False
    for what in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        items = info.get(what) or []
        if items:
            failed = True
            print(f"FAIL {what}: {sorted(map(str, items))}")

    with open(inputs_path) as f:
        raw = json.load(f)
    inputs = {k: torch.tensor(raw[k], dtype=torch.long)
              for k in ("input_ids", "attention_mask", "token_type_ids") if k in raw}

    with torch.no_grad():
        res = model(**inputs, output_hidden_states=True, return_dict=True)
    got = {}
    for i, h in enumerate(res.hidden_states):
        got[f"hidden_states.{i}"] = h
    got["last_hidden_state"] = (res.last_hidden_state
                                if getattr(res, "last_hidden_state", None) is not None
                                else res.hidden_states[-1])
    if getattr(res, "pooler_output", None) is not None:
        got["pooler_output"] = res.pooler_output
    if getattr(res, "logits", None) is not None:
        got["logits"] = res.logits

    expected = load_file(expected_path)
    for name in sorted(expected):
        want = expected[name].to(torch.float32)
        if name not in got:
            failed = True
            print(f"FAIL {name}: not produced by {type(model).__name__}")
            continue
        have = got[name].to(torch.float32)
        if list(have.shape) != list(want.shape):
            failed = True
            print(f"FAIL {name}: shape {list(have.shape)} != expected {list(want.shape)}")
            continue
        diff = (have - want).abs().max().item()
        bad = not (diff <= tol)  # also catches NaN
        failed |= bad
        print(f"{'FAIL' if bad else 'ok  '} {name:20s} {str(list(want.shape)):12s} max_abs_diff={diff:.3e}")
    print("FAILED" if failed else f"PASSED (tol {tol:g})")
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--print-keys", action="store_true", help="list the saved tensors of MODEL_DIR and exit")
    ap.add_argument("--tol", type=float, default=1e-5, help="max abs difference allowed (default 1e-5)")
    ap.add_argument("model_dir")
    ap.add_argument("inputs_json", nargs="?")
    ap.add_argument("expected", nargs="?")
    a = ap.parse_args()
    if a.print_keys:
        print_keys(a.model_dir)
        return 0
    if not a.inputs_json or not a.expected:
        ap.error("INPUTS_JSON and EXPECTED_SAFETENSORS are required (or use --print-keys)")
    return check(a.model_dir, a.inputs_json, a.expected, a.tol)


if __name__ == "__main__":
    sys.exit(main())
