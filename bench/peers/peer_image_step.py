#!/usr/bin/env python3
"""The training step alone of the PyTorch script a user would write for
Garden's image classification (bench/peers/peer_image_classification.py):
torchvision's resnet18 / resnet50 on one fixed synthetic batch, no data
loading. SGD with momentum 0.9 and weight decay 1e-4 on the tensors of 2+
dimensions (Model Garden's L2 on the kernels), cross-entropy with label
smoothing 0.1, 5 classes, NCHW tensors as torchvision's models take them.
bench/vision_step_bench.cpp runs it in rounds beside Garden's step.

Usage: /usr/bin/python3 peer_image_step.py [--preset resnet18|resnet50] [--threads 2]
         [--steps 5] [--warmup 2] [--batch 64] [--length 112 (the image side)]
         [--amp none|bf16 (forward and loss under bfloat16 autocast)]
Needs: apt-get install -y python3-torch python3-torchvision
Prints one JSON line: step time, images per second, parameter count.
"""
import argparse, json, time
import torch
import torch.nn.functional as F
import torchvision

ap = argparse.ArgumentParser()
ap.add_argument("--preset", default="resnet18", choices=["resnet18", "resnet50"])
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--steps", type=int, default=5)
ap.add_argument("--warmup", type=int, default=2)
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--length", type=int, default=112)
ap.add_argument("--amp", default="none", choices=["none", "bf16"])
a = ap.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)
model = getattr(torchvision.models, a.preset)(num_classes=5)
model.train()
decay = [p for p in model.parameters() if p.dim() >= 2]
other = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.SGD([{"params": decay, "weight_decay": 1e-4}, {"params": other, "weight_decay": 0}],
                      lr=0.01, momentum=0.9)
images = torch.randn(a.batch, 3, a.length, a.length)
labels = torch.randint(0, 5, (a.batch,))


def step():
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp == "bf16"):
        loss = F.cross_entropy(model(images), labels, label_smoothing=0.1)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


for _ in range(a.warmup):
    step()
start = time.perf_counter()
for _ in range(a.steps):
    step()
dt = (time.perf_counter() - start) / a.steps
print(json.dumps({"peer": "pytorch-python", "task": "image_classification", "preset": a.preset,
                  "threads": a.threads, "batch": a.batch, "length": a.length, "amp": a.amp,
                  "step_ms": round(dt * 1000, 1), "images_per_s": round(a.batch / dt, 1),
                  "params": sum(p.numel() for p in model.parameters()), "torch": torch.__version__}),
      flush=True)
