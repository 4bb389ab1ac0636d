"""Makes data/squad/ (SQuAD v1.1 JSON) from the English manual-page text.

Input: man-en's text (one sentence a line, a blank line between pages; the
slice bundled as data/pretraining/ or ../shared/data/man-en/train.txt).
Each run of a page's option lines ("-d, --delimiters=LIST reuse characters
from LIST instead of TABs") becomes a paragraph, at most 6 lines. Each
option line with a description of at least 4 words gives a question: the
description's first 10 words after "Which option:", and the answer is the
line's first flag ("-d") at its character offset. Pages are split between
train and dev by a hash of their NAME line, so no page is in both.

  python3 scripts/make_man_squad.py MAN_TEXT data/squad 1500 300
"""
import hashlib
import json
import random
import re
import sys

FLAG = re.compile(r"^--?[A-Za-z0-9][A-Za-z0-9_-]*")
METAVAR = re.compile(r"^([A-Z][A-Z0-9_]*|<[^>]+>|\[[^\]]*\]|[a-z_]+=?\S*=\S*)[,]?$")


def pages(path):
    page = []
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if not line.strip():
            if page:
                yield page
            page = []
        else:
            page.append(line)
    if page:
        yield page


def split_option(line):
    """(flag, description, offset of the description) or None."""
    match = FLAG.match(line)
    if not match:
        return None
    flag = match.group(0)
    words = line.split(" ")
    i, position, continued = 0, 0, True
    while i < len(words):
        w = words[i]
        spec = w.startswith("-") or "=" in w or (continued and METAVAR.match(w) and i > 0)
        if not spec:
            break
        continued = w.endswith(",") or "=" in w or w.startswith("-")
        position += len(w) + 1
        i += 1
    # A capitalized word within the first five starts the description when
    # the spec holds "or" and metavars ("-q or -quiet Doesn't show ...").
    for j, w in enumerate(words[1:6], start=1):
        if re.match(r"^[A-Z][a-z']+$", w):
            i = j
            break
    description = " ".join(words[i:])
    if len(description.split()) < 4 or not description[0].isalpha():
        return None
    return flag, description, position


def main():
    source, out, train_size, dev_size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    splits = {"train": [], "dev": []}
    for page in pages(source):
        name = page[0][len("NAME "):].split(" - ")[0].strip() if page[0].startswith("NAME ") else ""
        if not name:
            continue
        split = "dev" if int(hashlib.md5(name.encode()).hexdigest(), 16) % 6 == 0 else "train"
        run = []
        for line in page + [""]:
            option = split_option(line) if line else None
            if option and len(run) < 6 and len(line) < 400:
                run.append((line, option))
                continue
            if len(run) >= 2:
                splits[split].append((name, run))
            run = [(line, option)] if option else []
    rng = random.Random(20261129)
    for split, size in (("train", train_size), ("dev", dev_size)):
        paragraphs = splits[split]
        rng.shuffle(paragraphs)
        data, count, seen = [], 0, set()
        for name, run in paragraphs:
            if count >= size:
                break
            context = " ".join(line for line, _ in run)
            qas, offset = [], 0
            for line, (flag, description, _) in run:
                question = "Which option: " + " ".join(description.split()[:10]).rstrip(".,;:") + "?"
                if question in seen or count >= size:
                    offset += len(line) + 1
                    continue
                seen.add(question)
                assert context[offset:offset + len(flag)] == flag
                qid = hashlib.md5((name + "\0" + question).encode()).hexdigest()[:16]
                qas.append({"id": qid, "question": question,
                            "answers": [{"text": flag, "answer_start": offset}]})
                count += 1
                offset += len(line) + 1
            if qas:
                data.append({"title": name, "paragraphs": [{"context": context, "qas": qas}]})
        with open(f"{out}/{split}.json", "w", encoding="utf-8") as f:
            json.dump({"version": "1.1", "data": data}, f, ensure_ascii=False, indent=0)
            f.write("\n")
        print(split, len(data), "paragraphs", count, "questions")


if __name__ == "__main__":
    main()
