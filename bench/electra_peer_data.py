#!/usr/bin/env python3
"""Writes the sequences of bench/peers/peer_electra_quality.py as BERT
pretraining TFRecords, so that Garden's electra/tiny trains on the data the
peer trains on and is scored on exactly the inputs the peer is scored on.

The peer packs each document into sequences of at most 128 SentencePiece
pieces ([CLS] ... [SEP], one segment) and masks 15 % of the pieces (at least
1, at most 20): 80 % [MASK], 10 % a random piece, 10 % kept.

  valid: the first 1,024 sequences of VALID_TXT, masked in batches of 32 with
         random.Random(1234 + first index of the batch), as the peer scores.
  --train EPOCHS: the peer's training stream for EPOCHS passes over TRAIN_TXT:
         random.Random(0) shuffles the sequences each pass and masks each
         batch of 32 in turn, as the peer's loop does (the trailing partial
         batch of a pass is dropped, as there).

Each sequence becomes a tf.Example with Model Garden's v2 feature names
(input_word_ids, input_mask, input_type_ids, masked_lm_positions,
masked_lm_ids, masked_lm_weights).

Usage: /usr/bin/python3 electra_peer_data.py SP_MODEL VALID_TXT OUT.tfrecord
       /usr/bin/python3 electra_peer_data.py --train EPOCHS SP_MODEL TRAIN_TXT OUT.tfrecord
Needs python3-sentencepiece; writes TFRecord and tf.Example bytes itself
(no TensorFlow).
"""
import random
import struct
import sys

import sentencepiece as spm

T, P, B = 128, 20, 32
CLS, SEP, MASK = 2, 3, 4


def documents(path):
    doc = []
    for line in open(path, encoding="utf-8"):
        if line.strip():
            doc.append(line.strip())
        elif doc:
            yield doc
            doc = []
    if doc:
        yield doc


def sequences(sp, path):
    out = []
    for doc in documents(path):
        cur = []
        for ids in sp.encode(doc):
            ids = ids[: T - 2]
            if cur and len(cur) + len(ids) > T - 2:
                out.append([CLS] + cur + [SEP])
                cur = []
            cur += ids
        if cur:
            out.append([CLS] + cur + [SEP])
    return out


def mask(seqs, rng, vocab):
    rows = []
    for s in seqs:
        ids = list(s) + [0] * (T - len(s))
        inmask = [1] * len(s) + [0] * (T - len(s))
        pos, orig, w = [0] * P, [0] * P, [0.0] * P
        cand = list(range(1, len(s) - 1))
        rng.shuffle(cand)
        k = min(P, max(1, round(0.15 * len(cand))))
        for j, p in enumerate(sorted(cand[:k])):
            pos[j], orig[j], w[j] = p, s[p], 1.0
            u = rng.random()
            ids[p] = MASK if u < 0.8 else (rng.randrange(5, vocab) if u < 0.9 else s[p])
        rows.append((ids, inmask, pos, orig, w))
    return rows


# ---- tf.Example and TFRecord, by hand -------------------------------------
def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(number, wire, payload):
    return varint((number << 3) | wire) + (varint(len(payload)) + payload if wire == 2 else payload)


def int64_feature(values):
    packed = b"".join(varint(v & 0xFFFFFFFFFFFFFFFF) for v in values)
    return field(3, 2, field(1, 2, packed))  # Feature.int64_list.value (packed)


def float_feature(values):
    packed = b"".join(struct.pack("<f", v) for v in values)
    return field(2, 2, field(1, 2, packed))  # Feature.float_list.value (packed)


def example(features):
    entries = b"".join(field(1, 2, field(1, 2, k.encode()) + field(2, 2, v))
                       for k, v in sorted(features.items()))
    return field(1, 2, entries)  # Example.features


_TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    _TABLE.append(c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def write_record(out, data):
    length = struct.pack("<Q", len(data))
    out.write(length + struct.pack("<I", masked_crc(length)) + data +
              struct.pack("<I", masked_crc(data)))


def write_rows(out, rows):
    for ids, inmask, pos, orig, w in rows:
        write_record(out, example({
            "input_word_ids": int64_feature(ids), "input_mask": int64_feature(inmask),
            "input_type_ids": int64_feature([0] * T),
            "masked_lm_positions": int64_feature(pos), "masked_lm_ids": int64_feature(orig),
            "masked_lm_weights": float_feature(w)}))


def main():
    args = sys.argv[1:]
    epochs = 0
    if args[:1] == ["--train"] and len(args) == 5:
        epochs, args = int(args[1]), args[2:]
    if len(args) != 3:
        sys.exit(__doc__)
    sp = spm.SentencePieceProcessor(model_file=args[0])
    vocab = sp.get_piece_size()
    seqs = sequences(sp, args[1])
    written = 0
    with open(args[2], "wb") as out:
        if epochs:
            rng = random.Random(0)
            for _ in range(epochs):
                order = list(range(len(seqs)))
                rng.shuffle(order)
                for i in range(0, len(order) - B + 1, B):
                    rows = mask([seqs[j] for j in order[i:i + B]], rng, vocab)
                    write_rows(out, rows)
                    written += len(rows)
        else:
            seqs = seqs[:1024]
            for i in range(0, len(seqs), B):
                write_rows(out, mask(seqs[i:i + B], random.Random(1234 + i), vocab))
            written = len(seqs)
    print(f"{written} sequences -> {args[2]}")


if __name__ == "__main__":
    main()
