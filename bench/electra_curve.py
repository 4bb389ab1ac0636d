#!/usr/bin/env python3
"""The learning curves of bench/electra_quality.sh: the peer's JSON lines and
Garden's train.log (its `eval | step` lines, timed from the log's first line)
as a markdown table on stdout and an SVG of masked_lm_accuracy and
replaced-token recall against minutes.

Usage: electra_curve.py PEER.jsonl GARDEN_TRAIN.log OUT.svg [FINAL_EVAL.log BUDGET]
FINAL_EVAL.log: the evaluation of the checkpoint saved when the budget ran
out, placed at BUDGET seconds.
"""
import datetime
import json
import re
import sys


def peer_points(path):
    points = []
    for line in open(path):
        if not line.startswith("{"):
            continue
        row = json.loads(line)
        if "seconds" in row:
            points.append((row["seconds"], row["step"], row["masked_lm_accuracy"],
                           row["discriminator_accuracy"], row["rtd_precision"], row["rtd_recall"]))
    return points


def garden_points(path, at=None):
    points, start = [], None
    stamp = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
    for line in open(path, encoding="utf-8", errors="replace"):
        m = stamp.match(line)
        if not m:
            continue
        t = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
        start = start or t
        if "eval | step" not in line:
            continue
        values = dict(re.findall(r"(\w+): ([-0-9.eE+]+)", line))
        step = int(re.search(r"eval \| step (\d+)", line).group(1))
        points.append((at if at is not None else (t - start).total_seconds(), step, float(values["masked_lm_accuracy"]),
                       float(values["discriminator_accuracy"]), float(values["rtd_precision"]),
                       float(values["rtd_recall"])))
    return points


def table(name, points):
    print(f"\n{name}\n")
    print("| minutes | step | masked_lm_accuracy | discriminator_accuracy | rtd_precision | rtd_recall |")
    print("|---:|---:|---:|---:|---:|---:|")
    for s, step, mlm, disc, p, r in points:
        print(f"| {s / 60:.1f} | {step} | {mlm:.4f} | {disc:.4f} | {p:.4f} | {r:.4f} |")


def svg(path, series):
    W, H, L, R, T, B = 640, 360, 60, 20, 20, 40
    xmax = max(max(p[0] for p in pts) for _, pts, _, _ in series) / 60 or 1
    x = lambda m: L + (W - L - R) * m / xmax
    y = lambda v: H - B - (H - T - B) * v
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
           f'<line x1="{L}" y1="{H - B}" x2="{L}" y2="{T}" stroke="black"/>']
    for v in (0, 0.2, 0.4, 0.6, 0.8, 1.0):
        out.append(f'<text x="{L - 8}" y="{y(v) + 4}" text-anchor="end">{v:.1f}</text>')
    for m in range(0, int(xmax) + 1, 5):
        out.append(f'<text x="{x(m)}" y="{H - B + 16}" text-anchor="middle">{m}</text>')
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 6}" text-anchor="middle">minutes</text>')
    for i, (label, pts, col, dash) in enumerate(series):
        d = " ".join(f"{x(p[0] / 60):.1f},{y(p[col]):.1f}" for p in pts)
        out.append(f'<polyline fill="none" stroke="{"#c33" if "Garden" in label else "#36c"}" '
                   f'stroke-width="2" stroke-dasharray="{dash}" points="{d}"/>')
        out.append(f'<text x="{L + 10}" y="{T + 14 + 14 * i}" fill="{"#c33" if "Garden" in label else "#36c"}">{label}</text>')
    out.append("</svg>")
    open(path, "w").write("\n".join(out) + "\n")


def main():
    peer, garden = peer_points(sys.argv[1]), garden_points(sys.argv[2])
    if len(sys.argv) > 5:
        garden += garden_points(sys.argv[4], at=float(sys.argv[5]))[-1:]
    table("PyTorch peer (peer_electra_quality.py)", peer)
    table("Garden (electra/tiny)", garden)
    svg(sys.argv[3], [("Garden masked_lm_accuracy", garden, 2, ""), ("peer masked_lm_accuracy", peer, 2, ""),
                      ("Garden rtd_recall", garden, 5, "6,4"), ("peer rtd_recall", peer, 5, "6,4")])


if __name__ == "__main__":
    main()
