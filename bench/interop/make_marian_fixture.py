#!/usr/bin/env python3
"""Make the MarianMT interop fixture under tests/data/hf/marian.

A tiny MarianMTModel as OPUS-MT ships them: two SentencePiece models
(source.spm for English, target.spm for German) and one vocab.json over the
union of their pieces ("</s>" 0, "<unk>" 1, "<pad>" last), scale_embedding,
swish, shared and tied embeddings, a final_logits_bias. It is trained for a
few hundred steps on the first pairs of data/translation/en_de_train.tsv, so
that it emits EOS and its decoding decisions are not coin flips; then it is
saved with save_pretrained and its outputs on held-out sentences are written
to expected.safetensors and expected.json:

  input_ids [N, S] (MarianTokenizer, padded with <pad>), attention_mask,
  decoder_input_ids [N, T] (<pad> then the reference's ids, shifted),
  encoder_last_hidden_state [N, S, 32], logits [N, T, V] (eval, no_grad),
  greedy and beam-4 generations (ids and text; beam search with
  length_penalty 0, i.e. Garden's alpha 0). expected.json also holds
  MarianTokenizer's ids of the sources and references. state_dict.bin and
  ordered_state_dict.bin hold three of its tensors as torch.save writes a dict
  and an OrderedDict (pytorch_model.bin's shapes).

Usage (inside an environment with torch + transformers + sentencepiece):
    python3 make_marian_fixture.py EN_DE_TSV OUT_DIR
Normally run through make_hf_fixtures.sh --marian, in the peer chroot.
Seeded and single-threaded: a rerun gives the same files.
"""
import json
import os
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import sentencepiece as spm  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
import transformers  # noqa: E402
from transformers import MarianConfig, MarianMTModel, MarianTokenizer  # noqa: E402

TRAIN_PAIRS = 3000
TEST_PAIRS = 6
STEPS = 800
MAX_NEW_TOKENS = 48


def read_pairs(path):
    pairs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            src, tgt = line.rstrip("\n").split("\t")[:2]
            if 0 < len(src) < 60 and 0 < len(tgt) < 70:
                pairs.append((src, tgt))
    return pairs


def train_spm(lines, prefix, vocab_size):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
        text = f.name
    spm.SentencePieceTrainer.train(
        input=text, model_prefix=prefix, vocab_size=vocab_size, model_type="unigram",
        character_coverage=1.0, unk_id=1, eos_id=0, bos_id=-1, pad_id=-1,
        num_threads=1, seed_sentencepiece_size=100000, shuffle_input_sentence=False,
        minloglevel=2)
    os.unlink(text)


def main():
    tsv, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(1)
    torch.manual_seed(2001)
    pairs = read_pairs(tsv)
    train, test = pairs[:TRAIN_PAIRS], pairs[-TEST_PAIRS:]

    work = tempfile.mkdtemp()
    train_spm([s for s, _ in train], os.path.join(work, "source"), 160)
    train_spm([t for _, t in train], os.path.join(work, "target"), 200)
    pieces = []
    for side in ("source", "target"):
        sp = spm.SentencePieceProcessor(model_file=os.path.join(work, side + ".model"))
        for i in range(sp.get_piece_size()):
            p = sp.id_to_piece(i)
            if not (sp.is_control(i) or sp.is_unknown(i)) and p not in pieces:
                pieces.append(p)
    vocab = {"</s>": 0, "<unk>": 1}
    for p in pieces:
        vocab[p] = len(vocab)
    vocab["<pad>"] = len(vocab)
    pad = vocab["<pad>"]
    with open(os.path.join(work, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, indent=2)
    for side in ("source", "target"):
        os.rename(os.path.join(work, side + ".model"), os.path.join(work, side + ".spm"))

    tok = MarianTokenizer(os.path.join(work, "source.spm"), os.path.join(work, "target.spm"),
                          os.path.join(work, "vocab.json"), source_lang="en", target_lang="de")
    config = MarianConfig(
        vocab_size=len(vocab), decoder_vocab_size=len(vocab), d_model=32,
        encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
        activation_function="swish", max_position_embeddings=128, dropout=0.1,
        attention_dropout=0.0, activation_dropout=0.0, scale_embedding=True,
        pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=0,
        forced_eos_token_id=0, share_encoder_decoder_embeddings=True,
        architectures=["MarianMTModel"])
    model = MarianMTModel(config)
    with torch.no_grad():
        g = torch.Generator().manual_seed(2002)
        model.final_logits_bias.copy_(0.1 * torch.randn(model.final_logits_bias.shape, generator=g))
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    batch = 32
    for step in range(STEPS):
        chunk = [train[(step * batch + i) % len(train)] for i in range(batch)]
        enc = tok([s for s, _ in chunk], text_target=[t for _, t in chunk], padding=True,
                  return_tensors="pt")
        labels = enc["labels"].masked_fill(enc["labels"] == pad, -100)
        loss = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                     labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0 or step == STEPS - 1:
            print(f"step {step} loss {loss.item():.3f}", file=sys.stderr)
    model.eval()
    # The tied lm_head trains the <pad> row (its logit), so it is not zero, as
    # in any fine-tuned MarianMT: the decoder starts from it.
    print("pad row max |w|:", float(model.model.shared.weight[pad].detach().abs().max()),
          file=sys.stderr)

    model.save_pretrained(out_dir, safe_serialization=True)
    tok.save_pretrained(out_dir)

    sources = [s for s, _ in test]
    references = [t for _, t in test]
    enc = tok(sources, text_target=references, padding=True, return_tensors="pt")
    labels = enc["labels"]
    decoder_input_ids = torch.cat(
        [torch.full((labels.shape[0], 1), pad, dtype=labels.dtype), labels[:, :-1]], 1)
    with torch.no_grad():
        out = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                    decoder_input_ids=decoder_input_ids, return_dict=True)
        greedy = model.generate(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                                num_beams=1, do_sample=False, max_new_tokens=MAX_NEW_TOKENS)
        beam = model.generate(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                              num_beams=4, do_sample=False, length_penalty=0.0,
                              early_stopping=False, max_new_tokens=MAX_NEW_TOKENS)

    def rows(generated):
        result = []
        for row in generated.tolist():
            ids = row[1:]  # without the decoder start
            if 0 in ids:
                ids = ids[: ids.index(0)]
            else:
                raise SystemExit("a generation reached max_new_tokens: raise it")
            result.append([i for i in ids if i != pad])
        return result

    tensors = {
        "input_ids": enc["input_ids"].to(torch.int64).contiguous(),
        "attention_mask": enc["attention_mask"].to(torch.int64).contiguous(),
        "decoder_input_ids": decoder_input_ids.to(torch.int64).contiguous(),
        "encoder_last_hidden_state": out.encoder_last_hidden_state.float().contiguous(),
        "logits": out.logits.float().contiguous(),
    }
    save_file(tensors, os.path.join(out_dir, "expected.safetensors"))
    expected = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "sources": sources,
        "references": references,
        "max_new_tokens": MAX_NEW_TOKENS,
        "greedy_ids": rows(greedy),
        "greedy_text": tok.batch_decode(greedy, skip_special_tokens=True),
        "beam4_ids": rows(beam),
        "beam4_text": tok.batch_decode(beam, skip_special_tokens=True),
        "source_ids": [tok(s)["input_ids"] for s in sources],
        "target_ids": [tok(text_target=t)["input_ids"] for t in references],
    }
    with open(os.path.join(out_dir, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(json.dumps(expected, ensure_ascii=False, indent=1), file=sys.stderr)
    write_pickles(out_dir)


def write_pickles(out_dir):
    """pytorch_model.bin's two shapes, for Garden's reader: a plain dict of three
    of the model's tensors (LibTorch unpickles it) and the same as the
    OrderedDict that torch.save(model.state_dict()) writes (it does not)."""
    from collections import OrderedDict
    from safetensors.torch import load_file
    tensors = load_file(os.path.join(out_dir, "model.safetensors"))
    names = ["final_logits_bias", "model.encoder.layers.0.fc1.bias", "model.shared.weight"]
    torch.save({n: tensors[n] for n in names}, os.path.join(out_dir, "state_dict.bin"))
    torch.save(OrderedDict((n, tensors[n]) for n in names),
               os.path.join(out_dir, "ordered_state_dict.bin"))


if __name__ == "__main__":
    main()
