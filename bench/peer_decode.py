#!/usr/bin/env python3
"""Decoding peer (issue 17): a Garden translation export decoded by PyTorch.

    /usr/bin/python3 bench/peer_decode.py EXPORT_VERSION_DIR --input SRC.txt \
        --output HYP.txt [--beam_size 4] [--batch_size 32] [--threads 1]

The model is built from torch.nn.TransformerEncoder / TransformerDecoder
layers (pre-layer-norm, ReLU, batch_first), loaded with the export's
weights.safetensors (read here by hand: no safetensors package in Debian)
and decoded the standard way for those layers: each step runs the decoder
over the whole prefix with a causal mask and keeps the last position
(torch.nn.Transformer has no key/value cache). What is around the model is
what `garden translate` does, so the outputs can be compared line by line:

- the export's SentencePiece model, source ids + EOS, cut at the
  validation max_seq_length;
- windows of 16 x batch lines sorted by length, batches of --batch_size;
- each sentence's own limit, its length (EOS included) + extra_decode_length;
- greedy (beam 1), or Model Garden's beam search (2 x beam candidates,
  length normalization ((5 + len) / 6) ** alpha, a sentence done when no
  alive hypothesis can beat its worst finished one), scores in float64;
- sentences that are done leave the batch.

The time is from the first line read to the last written, after the model is
loaded, as garden translate reports it. Prints one JSON line.
"""
import argparse
import json
import math
import os
import struct
import time

import sentencepiece
import torch
import yaml
from torch import nn

LARGE_NEGATIVE = -1e7  # Model Garden's finite "infinity" for scores


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise SystemExit(f"{path}: {name} is {info['dtype']}, the peer reads F32 only")
        begin, end = info["data_offsets"]
        raw = bytearray(data[8 + size + begin : 8 + size + end])
        tensors[name] = torch.frombuffer(raw, dtype=torch.float32).view(info["shape"]).clone()
    return tensors


def position_encoding(length, width, start):
    half = width // 2
    log_increment = math.log(1.0e4) / max(half - 1, 1)
    inv = torch.exp(torch.arange(half, dtype=torch.float64) * -log_increment)
    t = torch.arange(start, start + length, dtype=torch.float64).unsqueeze(1) * inv.unsqueeze(0)
    return torch.cat([torch.sin(t), torch.cos(t)], 1).float()


class Translator(nn.Module):
    def __init__(self, model_config, vocab_size):
        super().__init__()
        width = model_config["embedding_width"]
        enc, dec = model_config["encoder"], model_config["decoder"]
        if not (enc["norm_first"] and dec["norm_first"]) or enc["activation"] != "relu":
            raise SystemExit("the peer builds pre-layer-norm ReLU Transformers only")
        self.width = width
        self.embedding = nn.Embedding(vocab_size, width)

        def layer(kind, c):
            return kind(width, c["num_attention_heads"], c["intermediate_size"], dropout=0.0,
                        activation="relu", layer_norm_eps=float(c["norm_epsilon"]), batch_first=True,
                        norm_first=True)

        self.encoder = nn.TransformerEncoder(
            layer(nn.TransformerEncoderLayer, enc), enc["num_layers"],
            norm=nn.LayerNorm(width, eps=float(enc["norm_epsilon"])), enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(
            layer(nn.TransformerDecoderLayer, dec), dec["num_layers"],
            norm=nn.LayerNorm(width, eps=float(dec["norm_epsilon"])))

    def load_garden(self, w):
        """Garden's names onto torch.nn's; Garden's dense layers have no bias."""
        with torch.no_grad():
            for p in self.parameters():
                p.zero_()
            self.embedding.weight.copy_(w["embedding.weight"])

            def norm(module, name):
                module.weight.copy_(w[name + ".weight"])
                module.bias.copy_(w[name + ".bias"])

            def block(layer, prefix, cross):
                layer.self_attn.in_proj_weight.copy_(w[prefix + "self_attention.query_key_value.weight"])
                layer.self_attn.out_proj.weight.copy_(w[prefix + "self_attention.output.weight"])
                norm(layer.norm1, prefix + "self_attention_layer_norm")
                if cross:
                    layer.multihead_attn.in_proj_weight.copy_(torch.cat(
                        [w[prefix + "encdec_attention.query.weight"],
                         w[prefix + "encdec_attention.key_value.weight"]]))
                    layer.multihead_attn.out_proj.weight.copy_(w[prefix + "encdec_attention.output.weight"])
                    norm(layer.norm2, prefix + "encdec_attention_layer_norm")
                    norm(layer.norm3, prefix + "output_layer_norm")
                else:
                    norm(layer.norm2, prefix + "output_layer_norm")
                layer.linear1.weight.copy_(w[prefix + "feed_forward.intermediate.weight"])
                layer.linear2.weight.copy_(w[prefix + "feed_forward.output.weight"])

            for i, layer in enumerate(self.encoder.layers):
                block(layer, f"encoder_layer_{i}.", False)
            for i, layer in enumerate(self.decoder.layers):
                block(layer, f"decoder_layer_{i}.", True)
            norm(self.encoder.norm, "encoder_layer_norm")
            norm(self.decoder.norm, "decoder_layer_norm")

    def embed(self, ids):
        x = self.embedding(ids) * math.sqrt(self.width)
        x = x * (ids != 0).unsqueeze(-1).float()  # pad (and the initial id 0) embed to zero
        return x + position_encoding(ids.size(1), self.width, 0)

    def encode(self, src):
        pad = src == 0
        return self.encoder(self.embed(src), src_key_padding_mask=pad), pad

    def next_logits(self, prefix, memory, memory_pad):
        """Logits of the next token of every row: the decoder over the whole prefix."""
        t = prefix.size(1)
        causal = torch.triu(torch.full((t, t), float("-inf")), 1)
        h = self.decoder(self.embed(prefix), memory, tgt_mask=causal,
                         memory_key_padding_mask=memory_pad)
        return h[:, -1] @ self.embedding.weight.t()


def greedy(model, src, limits, eos):
    memory, pad = model.encode(src)
    rows = torch.arange(src.size(0))
    seq = torch.zeros(src.size(0), 1, dtype=torch.long)
    out = [None] * src.size(0)
    finished = limits.le(0)
    step = 0
    while True:
        if finished.any():
            for i in finished.nonzero().view(-1).tolist():
                out[rows[i]] = seq[i, 1:].tolist()
            keep = (~finished).nonzero().view(-1)
            if keep.numel() == 0:
                return out
            rows, seq, limits, memory, pad = (t.index_select(0, keep) for t in (rows, seq, limits, memory, pad))
        best = model.next_logits(seq, memory, pad).double().log_softmax(-1).argmax(-1)
        seq = torch.cat([seq, best.unsqueeze(1)], 1)
        step += 1
        finished = best.eq(eos) | limits.le(step)


def length_norm(alpha, length):
    return ((5.0 + length) / 6.0) ** alpha


def beam_search(model, src, limits, eos, beams, alpha, vocab):
    memory, pad = model.encode(src)
    n = src.size(0)
    memory = memory.repeat_interleave(beams, 0)
    pad = pad.repeat_interleave(beams, 0)
    examples = torch.arange(n)
    alive_seq = torch.zeros(n, beams, 1, dtype=torch.long)
    alive_lp = torch.full((n, beams), float("-inf"), dtype=torch.float64)
    alive_lp[:, 0] = 0.0
    fin_seq = torch.zeros(n, beams, 1, dtype=torch.long)
    fin_scores = torch.full((n, beams), LARGE_NEGATIVE, dtype=torch.float64)
    fin_flags = torch.zeros(n, beams, dtype=torch.bool)
    max_norm = torch.tensor([length_norm(alpha, int(l)) for l in limits], dtype=torch.float64)
    beam_index = torch.arange(beams).unsqueeze(0)
    out = [None] * n
    step = 0
    while True:
        best_alive = alive_lp[:, 0] / max_norm
        lowest = torch.where(fin_flags, fin_scores, torch.zeros_like(fin_scores)).amin(1)
        lowest = torch.where(fin_flags.any(1), lowest, torch.full_like(lowest, LARGE_NEGATIVE))
        done = limits.le(step) | lowest.gt(best_alive)
        if done.any():
            has = fin_flags.any(1)
            seqs = torch.where(has.view(-1, 1, 1), fin_seq, alive_seq)
            for i in done.nonzero().view(-1).tolist():
                out[examples[i]] = seqs[i, 0, 1:].tolist()
            keep = (~done).nonzero().view(-1)
            if keep.numel() == 0:
                return out
            examples, alive_seq, alive_lp, fin_seq, fin_scores, fin_flags, limits, max_norm = (
                t.index_select(0, keep) for t in
                (examples, alive_seq, alive_lp, fin_seq, fin_scores, fin_flags, limits, max_norm))
            rows = (keep.unsqueeze(1) * beams + beam_index).view(-1)
            memory, pad = memory.index_select(0, rows), pad.index_select(0, rows)
        n = examples.size(0)
        length = step + 1
        logits = model.next_logits(alive_seq.view(n * beams, length), memory, pad)
        lp = logits.double().log_softmax(-1).view(n, beams, vocab) + alive_lp.unsqueeze(2)
        top_lp, top_idx = lp.view(n, beams * vocab).topk(min(2 * beams, beams * vocab), 1)
        top_beams = torch.div(top_idx, vocab, rounding_mode="floor")
        top_ids = top_idx.remainder(vocab)
        gathered = alive_seq.gather(1, top_beams.unsqueeze(2).expand(-1, -1, length))
        top_seq = torch.cat([gathered, top_ids.unsqueeze(2)], 2)
        top_fin = top_ids.eq(eos)
        alive_cand = top_lp + top_fin.double() * LARGE_NEGATIVE
        pick = alive_cand.topk(beams, 1)[1]
        alive_seq = top_seq.gather(1, pick.unsqueeze(2).expand(-1, -1, length + 1))
        alive_lp = alive_cand.gather(1, pick)
        new_scores = top_lp / length_norm(alpha, length) + (~top_fin).double() * LARGE_NEGATIVE
        all_seq = torch.cat([nn.functional.pad(fin_seq, (0, 1)), top_seq], 1)
        all_scores = torch.cat([fin_scores, new_scores], 1)
        all_flags = torch.cat([fin_flags, top_fin], 1)
        pick = all_scores.topk(beams, 1)[1]
        fin_seq = all_seq.gather(1, pick.unsqueeze(2).expand(-1, -1, length + 1))
        fin_scores = all_scores.gather(1, pick)
        fin_flags = all_flags.gather(1, pick)
        step += 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("export_dir")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--beam_size", type=int, default=4)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)

    with open(os.path.join(args.export_dir, "params.yaml")) as f:
        task = yaml.safe_load(f)["task"]
    model_config = task["model"]
    sp = sentencepiece.SentencePieceProcessor(
        model_file=os.path.join(args.export_dir, "assets", "sentencepiece.model"))
    vocab, eos = sp.get_piece_size(), sp.eos_id()
    model = Translator(model_config, vocab)
    model.load_garden(load_safetensors(os.path.join(args.export_dir, "weights.safetensors")))
    model.eval()
    max_length = task["validation_data"]["max_seq_length"]
    extra = model_config["extra_decode_length"]
    fixed = model_config.get("decode_max_length")

    start = time.perf_counter()
    with open(args.input, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    results = [""] * len(lines)
    window = 16 * args.batch_size
    for w in range(0, len(lines), window):
        pending = []
        for i in range(w, min(len(lines), w + window)):
            text = lines[i].rstrip("\r")
            if not text:
                continue
            ids = sp.encode(text)[: max_length - 1] + [eos]
            pending.append((i, ids))
        pending.sort(key=lambda p: len(p[1]))  # stable, as garden's
        for b in range(0, len(pending), args.batch_size):
            batch = pending[b : b + args.batch_size]
            src = torch.zeros(len(batch), max(len(ids) for _, ids in batch), dtype=torch.long)
            for k, (_, ids) in enumerate(batch):
                src[k, : len(ids)] = torch.tensor(ids)
            limits = torch.tensor([fixed if fixed else len(ids) + extra for _, ids in batch])
            if args.beam_size <= 1:
                outs = greedy(model, src, limits, eos)
            else:
                outs = beam_search(model, src, limits, eos, args.beam_size, model_config["alpha"], vocab)
            for (i, _), ids in zip(batch, outs):
                kept = []
                for t in ids:
                    if t == eos or t == 0:
                        break
                    kept.append(t)
                results[i] = sp.decode(kept)
    with open(args.output, "w", encoding="utf-8") as f:
        f.write("".join(r + "\n" for r in results))
    seconds = time.perf_counter() - start
    print(json.dumps({"bench": "decode_peer", "torch": torch.__version__, "beam_size": args.beam_size,
                      "threads": args.threads, "sentences": sum(1 for l in lines if l.rstrip("\r")),
                      "seconds": round(seconds, 3),
                      "sentences_per_s": round(sum(1 for l in lines if l.rstrip("\r")) / seconds, 1)}))


if __name__ == "__main__":
    main()
