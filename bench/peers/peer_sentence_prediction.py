#!/usr/bin/env python3
"""Reference sentence-prediction fine-tuning step, in Python PyTorch.

The peer of Garden's bert/sentence_prediction_tiny: the encoder of
peer_electra.py's tiny discriminator (vocabulary 8000, embeddings 128,
128 wide x 4 layers x 2 heads, feed-forward 512, post-layer-norm, GELU,
dropout 0.1), Model Garden's classification head on [CLS] (dense 128 +
tanh, dropout 0.1, dense to 2 classes), softmax cross-entropy, AdamW
(lr 3e-4, weight decay 0.01). Batches of 32 x 64 ids. Needs Debian's
python3-torch; run it with /usr/bin/python3.

Prints one JSON line: step time and examples per second.
"""
import argparse, json, os, sys, time
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_electra import Encoder  # noqa: E402


class Classifier(torch.nn.Module):
    def __init__(self, V=8000, E=128, H=128, L=4, A=2, FF=512, classes=2):
        super().__init__()
        self.word = torch.nn.Embedding(V, E)
        self.encoder = Encoder(E, H, L, A, FF, self.word)
        self.dense = torch.nn.Linear(H, H)
        self.out = torch.nn.Linear(H, classes)

    def forward(self, ids, types, mask):
        x = self.encoder(ids, types, mask == 0)[:, 0]
        x = F.dropout(torch.tanh(self.dense(x)), 0.1, self.training)
        return self.out(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=64)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="0: leave PyTorch's default")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (PyTorch 2.x)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    m = Classifier()
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4, weight_decay=0.01)
    fwd = torch.compile(m) if a.compile else m
    B, T = a.batch, a.length
    ids = torch.randint(5, 8000, (B, T))
    types = torch.zeros(B, T, dtype=torch.long)
    mask = torch.ones(B, T)
    labels = torch.randint(0, 2, (B,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(fwd(ids, types, mask), labels)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(a.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    dt = (time.perf_counter() - t0) / a.steps
    print(json.dumps({"peer": "pytorch-python", "task": "sentence_prediction", "torch": torch.__version__,
                      "compile": a.compile, "threads": torch.get_num_threads(),
                      "params": sum(p.numel() for p in m.parameters()), "batch": B, "length": T,
                      "step_ms": round(dt * 1000, 2), "steps_per_s": round(1 / dt, 2),
                      "examples_per_s": round(B / dt, 1)}))


if __name__ == "__main__":
    main()
