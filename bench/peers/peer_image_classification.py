#!/usr/bin/env python3
"""The PyTorch script a user would write for Garden's image classification.

torchvision's resnet18 / resnet50 trained on an ImageFolder tree with a
DataLoader (worker processes), the augmentation torchvision users write for
Model Garden's (RandomResizedCrop with scale (0.08, 1) and ratio (3/4, 4/3),
RandomHorizontalFlip, ImageNet normalization), SGD with momentum 0.9,
label smoothing, L2 on the kernels as Model Garden's (weight decay on
tensors of 2+ dimensions), a linear warmup then a cosine decay.

  --mode speed    STEPS training steps; prints images/s over the steps after
                  the first WARMUP ones (decoding, augmentation and the step)
  --mode quality  trains for BUDGET seconds of wall time (the schedule spans
                  STEPS steps), then scores the held-out files (center crop of
                  0.875 of the short side, resized), prints accuracy

The split is Garden's: --split DIR holds create_image_records' manifests
(train_files.txt, validation_files.txt: path within --data, a tab, label).

Usage: /usr/bin/python3 peer_image_classification.py --data DIR --split DIR
         [--model resnet18] [--size 112] [--batch 64] [--threads 2] [--workers 2]
         [--mode speed|quality] [--steps 2000] [--warmup_steps 100] [--lr 0.05]
         [--budget 600] [--label_smoothing 0.1] [--l2 1e-4] [--amp none|bf16]
Needs: apt-get install -y python3-torch python3-torchvision
Prints one JSON line.
"""
import argparse, json, math, os, time
import torch
import torch.nn.functional as F
import torchvision
from torchvision import transforms
from PIL import Image

ap = argparse.ArgumentParser()
ap.add_argument("--data", required=True)
ap.add_argument("--split", required=True)
ap.add_argument("--model", default="resnet18", choices=["resnet18", "resnet50"])
ap.add_argument("--size", type=int, default=112)
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--workers", type=int, default=2)
ap.add_argument("--mode", default="speed", choices=["speed", "quality"])
ap.add_argument("--steps", type=int, default=2000)
ap.add_argument("--warmup", type=int, default=5, help="speed: steps not timed")
ap.add_argument("--warmup_steps", type=int, default=100)
ap.add_argument("--lr", type=float, default=0.05)
ap.add_argument("--budget", type=float, default=600.0)
ap.add_argument("--label_smoothing", type=float, default=0.1)
ap.add_argument("--l2", type=float, default=1e-4)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--amp", default="none", choices=["none", "bf16"],
                help="bf16: forward and loss under torch.autocast('cpu', torch.bfloat16)")
a = ap.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(a.seed)
mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


class Listed(torch.utils.data.Dataset):
    def __init__(self, manifest, transform):
        self.items = []
        with open(manifest) as f:
            for line in f:
                path, label = line.rstrip("\n").split("\t")
                self.items.append((os.path.join(a.data, path), int(label)))
        self.transform = transform

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        path, label = self.items[i]
        return self.transform(Image.open(path).convert("RGB")), label


train_tf = transforms.Compose([
    transforms.RandomResizedCrop(a.size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)),
    transforms.RandomHorizontalFlip(), transforms.ToTensor(), transforms.Normalize(mean, std)])
eval_tf = transforms.Compose([
    transforms.Resize(round(a.size / 0.875)), transforms.CenterCrop(a.size),
    transforms.ToTensor(), transforms.Normalize(mean, std)])
train_set = Listed(os.path.join(a.split, "train_files.txt"), train_tf)
classes = 1 + max(label for _, label in train_set.items)
loader = torch.utils.data.DataLoader(train_set, batch_size=a.batch, shuffle=True, drop_last=True,
                                     num_workers=a.workers, persistent_workers=a.workers > 0)
model = getattr(torchvision.models, a.model)(num_classes=classes)
decay = [p for p in model.parameters() if p.dim() >= 2]
other = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.SGD([{"params": decay, "weight_decay": a.l2}, {"params": other, "weight_decay": 0}],
                      lr=a.lr, momentum=0.9)


def autocast():
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp == "bf16")


def rate(step):
    if step < a.warmup_steps:
        return a.lr * step / a.warmup_steps
    return a.lr * 0.5 * (1 + math.cos(math.pi * min(step, a.steps) / a.steps))


def batches():
    while True:
        for batch in loader:
            yield batch


model.train()
start = time.time()
timed_start, timed_images, step = None, 0, 0
for images, labels in batches():
    if step == a.warmup:
        timed_start, timed_images = time.time(), 0
    for group in opt.param_groups:
        group["lr"] = rate(step)
    with autocast():
        loss = F.cross_entropy(model(images), labels, label_smoothing=a.label_smoothing)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    step += 1
    timed_images += images.shape[0]
    if a.mode == "speed" and step >= a.steps:
        break
    if a.mode == "quality" and (time.time() - start >= a.budget or step >= a.steps):
        break
elapsed = time.time() - start
out = {"model": a.model, "size": a.size, "batch": a.batch, "threads": a.threads, "amp": a.amp,
       "workers": a.workers, "steps": step, "seconds": round(elapsed, 2)}
if a.mode == "speed":
    out["images_per_second"] = round(timed_images / (time.time() - timed_start), 2)
else:
    model.eval()
    held = Listed(os.path.join(a.split, "validation_files.txt"), eval_tf)
    correct = total = 0
    with torch.no_grad():
        for images, labels in torch.utils.data.DataLoader(held, batch_size=128, num_workers=a.workers):
            with autocast():
                correct += (model(images).argmax(-1) == labels).sum().item()
            total += labels.shape[0]
    out.update({"accuracy": round(correct / total, 4), "held_out": total})
print(json.dumps(out), flush=True)
