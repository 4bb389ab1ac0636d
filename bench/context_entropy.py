#!/usr/bin/env python3
"""How much a piece's neighbours tell about it: the cross-entropy (nats per
piece) of three count models on held-out lines of a tokenized text, the
yardstick for a masked-LM loss (docs/tasks/sentence_prediction.md, "Why").

  unigram          the piece's frequency (add-one smoothed)
  left neighbour   a bigram on the piece before, interpolated with the unigram
  both neighbours  the pieces before and after, interpolated with the bigram

Input: one line of piece ids a line (`garden spm encode --model=SP.model`).
The lines are shuffled with a fixed seed; the last tenth is held out. A
masked-LM generator whose loss sits near the unigram figure has learned no
context; the left-neighbour figure is what a model of one neighbour reaches.

Usage: garden spm encode --model=sp.model < text.txt | context_entropy.py [VOCAB]
"""
import collections
import math
import random
import sys


def main():
    vocab = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
    lines = [[int(t) for t in line.split()] for line in sys.stdin if line.strip()]
    if len(lines) < 10:
        sys.exit("context_entropy: fewer than 10 non-empty lines on stdin")
    random.Random(0).shuffle(lines)
    cut = len(lines) * 9 // 10
    train, held = lines[:cut], lines[cut:]
    start, end = -1, -2
    uni, left, left_n = collections.Counter(), collections.Counter(), collections.Counter()
    both, both_n = collections.Counter(), collections.Counter()
    for line in train:
        s = [start] + line + [end]
        for i in range(1, len(s) - 1):
            uni[s[i]] += 1
            left[s[i - 1], s[i]] += 1
            left_n[s[i - 1]] += 1
            both[s[i - 1], s[i + 1], s[i]] += 1
            both_n[s[i - 1], s[i + 1]] += 1
    total = sum(uni.values())
    h_uni = h_left = h_both = 0.0
    count = 0
    for line in held:
        s = [start] + line + [end]
        for i in range(1, len(s) - 1):
            w = s[i]
            p_uni = (uni[w] + 1) / (total + vocab)
            n = left_n[s[i - 1]]
            lam = n / (n + 5)
            p_left = lam * (left[s[i - 1], w] / n if n else 0.0) + (1 - lam) * p_uni
            n2 = both_n[s[i - 1], s[i + 1]]
            lam2 = n2 / (n2 + 5)
            p_both = lam2 * (both[s[i - 1], s[i + 1], w] / n2 if n2 else 0.0) + (1 - lam2) * p_left
            h_uni -= math.log(p_uni)
            h_left -= math.log(p_left)
            h_both -= math.log(p_both)
            count += 1
    print(f"pieces: {total} counted, {count} held out ({len(held)} lines)")
    print(f"unigram:         {h_uni / count:.3f} nats")
    print(f"left neighbour:  {h_left / count:.3f} nats")
    print(f"both neighbours: {h_both / count:.3f} nats")


if __name__ == "__main__":
    main()
