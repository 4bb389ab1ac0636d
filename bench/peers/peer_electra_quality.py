#!/usr/bin/env python3
"""Quality-per-time peer for ELECTRA pretraining, in Python PyTorch.

Trains the tiny ELECTRA of peer_electra.py (vocab 8000, embeddings 128,
discriminator 128 wide x 4 layers x 2 heads, ffn 512; generator 32 wide x 4
layers x 1 head, ffn 128; shared word embeddings; loss MLM + 50 * RTD) on
DATA/train.txt for BUDGET seconds of wall time, and every EVAL seconds scores
the first 1,024 sequences of DATA/valid.txt (or --valid FILE):

  masked_lm_accuracy     generator's top-1 on the masked positions
  discriminator_accuracy replaced-token detection over all real tokens
  rtd_precision / rtd_recall   of the "replaced" class

DATA (--data DIR, required) is the man-en set (train.txt, valid.txt);
bench/electra_quality.sh passes it.

Data: a SentencePiece unigram model (vocab 8000, trained on the first 200,000
lines); each document's sentences packed into sequences of at most 128 pieces,
[CLS] ... [SEP]; 15% of the pieces masked (at most 20 a sequence; 80% [MASK],
10% a random piece, 10% kept). The validation masking and the validation
sampling use fixed seeds, so every evaluation scores the same inputs.
Batch 32 x 128, AdamW (lr 5e-4, weight decay 0.01), 500 linear warm-up steps,
weights initialised as BERT's (normal, stddev 0.02; zero biases).

Usage: /usr/bin/python3 peer_electra_quality.py BUDGET_SECONDS [--eval 300] [--threads 1] [--data DIR]
Needs: apt-get install -y python3-torch python3-sentencepiece
Prints one JSON line per evaluation.
"""
import argparse, json, os, random, time
import torch
import torch.nn.functional as F
import sentencepiece as spm
from peer_electra import Electra, PRESETS

ap = argparse.ArgumentParser()
ap.add_argument("budget", type=float)
ap.add_argument("--eval", type=float, default=300.0)
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--valid", default=None)
ap.add_argument("--data", required=True, help="directory holding man-en's train.txt and valid.txt")
ap.add_argument("--batch", type=int, default=32)
a = ap.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0); random.seed(0)
D = os.path.join(a.data, "")
T, P, B = 128, 20, a.batch
PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4

with open(D + "train.txt", encoding="utf-8") as f, open("/tmp/peer_electra_spm.txt", "w") as o:
    for i, line in enumerate(f):
        if i >= 200000: break
        if line.strip(): o.write(line)
spm.SentencePieceTrainer.train(input="/tmp/peer_electra_spm.txt", model_prefix="/tmp/peer_electra_sp",
                               vocab_size=8000, model_type="unigram", pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
                               user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"], minloglevel=2)
sp = spm.SentencePieceProcessor(model_file="/tmp/peer_electra_sp.model")
V = sp.get_piece_size()

def documents(path):
    doc = []
    for line in open(path, encoding="utf-8"):
        if line.strip(): doc.append(line.strip())
        elif doc: yield doc; doc = []
    if doc: yield doc

def sequences(path):
    out = []
    for doc in documents(path):
        cur = []
        for ids in sp.encode(doc):
            ids = ids[: T - 2]
            if cur and len(cur) + len(ids) > T - 2:
                out.append([CLS] + cur + [SEP]); cur = []
            cur += ids
        if cur: out.append([CLS] + cur + [SEP])
    return out

def mask(seqs, rng):
    ids = torch.zeros(len(seqs), T, dtype=torch.long); inmask = torch.zeros(len(seqs), T)
    pos = torch.zeros(len(seqs), P, dtype=torch.long); orig = torch.zeros(len(seqs), P, dtype=torch.long)
    w = torch.zeros(len(seqs), P)
    for r, s in enumerate(seqs):
        ids[r, : len(s)] = torch.tensor(s); inmask[r, : len(s)] = 1
        cand = list(range(1, len(s) - 1)); rng.shuffle(cand)
        k = min(P, max(1, round(0.15 * len(cand))))
        for j, p in enumerate(sorted(cand[:k])):
            pos[r, j] = p; orig[r, j] = s[p]; w[r, j] = 1
            u = rng.random()
            ids[r, p] = MASK if u < 0.8 else (rng.randrange(5, V) if u < 0.9 else s[p])
    return ids, inmask, pos, orig, w

train = sequences(D + "train.txt")
valid = sequences(a.valid or D + "valid.txt")[:1024]
vbatches = [mask(valid[i:i + B], random.Random(1234 + i)) for i in range(0, len(valid), B)]
V_, E, disc, gen = PRESETS["tiny"]
m = Electra(V, E, disc, gen)
for mod in m.modules():  # BERT's initializer: truncated-normal-like N(0, 0.02), zero biases
    if isinstance(mod, (torch.nn.Linear, torch.nn.Embedding)):
        torch.nn.init.normal_(mod.weight, 0.0, 0.02)
    if isinstance(mod, torch.nn.Linear) and mod.bias is not None:
        torch.nn.init.zeros_(mod.bias)
opt = torch.optim.AdamW(m.parameters(), lr=5e-4, weight_decay=0.01)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 500))

def forward(ids, inmask, pos, orig, w, gen_seed=None):
    """Returns (loss, mlm logits, discriminator logits, rtd labels), as peer_electra.Electra.forward does."""
    types = torch.zeros_like(ids); pad = inmask == 0
    g = m.gen(ids, types, pad)
    h = m.mlm_ln(F.gelu(m.mlm_dense(torch.gather(g, 1, pos.unsqueeze(-1).expand(-1, -1, g.shape[-1])))))
    lm = h @ m.word.weight.t() + m.mlm_bias
    mlm = (F.cross_entropy(lm.transpose(1, 2), orig, reduction="none") * w).sum() / w.sum().clamp(min=1e-9)
    with torch.no_grad():
        gen_ = torch.Generator().manual_seed(gen_seed) if gen_seed is not None else None
        u = torch.rand(lm.shape, generator=gen_).clamp(1e-9, 1.0)
        sampled = (lm - torch.log(-torch.log(u))).argmax(-1)
        keep = ids.gather(1, pos)  # unused prediction slots point at position 0: leave it as it is
        original = ids.scatter(1, pos, torch.where(w > 0, orig, keep))
        fake = original.scatter(1, pos, torch.where(w > 0, sampled, original.gather(1, pos)))
        labels = (fake != original).float()
    d = m.disc(fake, types, pad)
    logits = m.disc_out(F.gelu(m.disc_dense(d))).squeeze(-1)
    rtd = (F.binary_cross_entropy_with_logits(logits, labels, reduction="none") * inmask).sum() / inmask.sum()
    return mlm + 50.0 * rtd, lm, logits, labels, mlm, rtd

def evaluate():
    m.eval(); c = n = dc = dn = tp = fp = fn = 0; ml = rl = 0.0
    with torch.no_grad():
        for k, (ids, inmask, pos, orig, w) in enumerate(vbatches):
            _, lm, logits, labels, mlm, rtd = forward(ids, inmask, pos, orig, w, gen_seed=k)
            c += int(((lm.argmax(-1) == orig).float() * w).sum()); n += int(w.sum())
            pred = (logits > 0).float()
            dc += int(((pred == labels).float() * inmask).sum()); dn += int(inmask.sum())
            tp += int((pred * labels * inmask).sum()); fp += int((pred * (1 - labels) * inmask).sum())
            fn += int(((1 - pred) * labels * inmask).sum()); ml += float(mlm); rl += float(rtd)
    m.train()
    return {"masked_lm_accuracy": round(c / max(n, 1), 4), "discriminator_accuracy": round(dc / max(dn, 1), 4),
            "rtd_precision": round(tp / max(tp + fp, 1), 4), "rtd_recall": round(tp / max(tp + fn, 1), 4),
            "lm_example_loss": round(ml / len(vbatches), 4), "discriminator_loss": round(rl / len(vbatches), 4)}

rng = random.Random(0); t0 = time.time(); step = 0; ntok = 0; next_eval = a.eval
print(json.dumps({"train_sequences": len(train), "valid_sequences": len(valid), "vocab": V,
                  "params": sum(p.numel() for p in m.parameters())}), flush=True)
while time.time() - t0 < a.budget:
    order = list(range(len(train))); rng.shuffle(order)
    for i in range(0, len(order) - B + 1, B):
        ids, inmask, pos, orig, w = mask([train[j] for j in order[i:i + B]], rng)
        loss = forward(ids, inmask, pos, orig, w)[0]
        opt.zero_grad(set_to_none=True); loss.backward(); opt.step(); sched.step(); step += 1
        ntok += int(inmask.sum())
        el = time.time() - t0
        if el >= next_eval or el >= a.budget:
            print(json.dumps({"seconds": round(el), "step": step, "tokens_per_s": round(ntok / el),
                              "loss": round(float(loss), 4), **evaluate()}), flush=True)
            next_eval += a.eval
        if el >= a.budget: break
