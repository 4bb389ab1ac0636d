#!/usr/bin/env bash
# The learning curve of a translation run, from its train.log: a markdown
# table (time, step, training loss, validation loss, BLEU) on stdout and, with
# a second argument, an SVG chart of sacreBLEU and training loss against time.
#
#   bench/translation_curve.sh MODEL_DIR/train.log [curve.svg]
set -euo pipefail
log=$1
svg=${2:-}
rows=$(awk '
  function seconds(d, t,   a, b) {
    split(d, a, "-"); split(t, b, ":")
    return mktime(a[1] " " a[2] " " a[3] " " b[1] " " b[2] " " b[3])
  }
  NR == 1 { start = seconds($1, $2) }
  / I train \| step / {
    split($7, s, "/"); loss = $NF
    print seconds($1, $2) - start, s[1], "train", loss
  }
  / I eval \| step / {
    bleu = ""; sacre = ""; vloss = ""
    for (i = 1; i <= NF; ++i) {
      if ($i == "bleu_score:") bleu = $(i + 1)
      if ($i == "sacrebleu_score:") sacre = $(i + 1)
      if ($i == "validation_loss:") vloss = $(i + 1)
    }
    print seconds($1, $2) - start, $7, "eval", vloss, bleu, sacre
  }' "$log")

echo "| minutes (step reached) | step | training loss | validation loss | BLEU (Model Garden) | sacreBLEU |"
echo "|---:|---:|---:|---:|---:|---:|"
awk '
  $3 == "train" { loss[$2] = $4; t[$2] = $1; steps[$2] = 1 }
  $3 == "eval" { vl[$2] = $4; b[$2] = $5; sb[$2] = $6; if (!($2 in t)) t[$2] = $1; steps[$2] = 1 }
  END {
    n = 0; for (s in steps) order[++n] = s + 0
    for (i = 2; i <= n; ++i) { v = order[i]; j = i - 1; while (j > 0 && order[j] > v) { order[j + 1] = order[j]; --j } order[j + 1] = v }
    for (i = 1; i <= n; ++i) {
      s = order[i]
      if (!(s in vl) && s % 500 != 0) continue
      printf "| %.1f | %d | %s | %s | %s | %s |\n", t[s] / 60, s, (s in loss) ? loss[s] : "", \
        (s in vl) ? vl[s] : "", (s in b) ? b[s] : "", (s in sb) ? sb[s] : ""
    }
  }' <<<"$rows"

[ -n "$svg" ] || exit 0
awk -v out="$svg" '
  $3 == "train" { tn++; tt[tn] = $1 / 60; tl[tn] = $4; if ($1 / 60 > tmax) tmax = $1 / 60 }
  $3 == "eval" { en++; et[en] = $1 / 60; eb[en] = $6; if ($1 / 60 > tmax) tmax = $1 / 60 }
  END {
    W = 640; H = 360; L = 60; R = 60; T = 20; B = 40
    xmax = tmax > 30 ? tmax : 30; lmax = 0
    for (i = 1; i <= tn; ++i) if (tl[i] > lmax) lmax = tl[i]
    lmax = int(lmax) + 1; bmax = 40
    for (i = 1; i <= en; ++i) if (eb[i] > bmax) bmax = eb[i]
    print "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" W "\" height=\"" H "\" font-family=\"sans-serif\" font-size=\"12\">" > out
    print "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>" > out
    x0 = L; x1 = W - R; y0 = H - B; y1 = T
    printf "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", x0, y0, x1, y0 > out
    printf "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", x0, y0, x0, y1 > out
    printf "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", x1, y0, x1, y1 > out
    for (m = 0; m <= xmax; m += 5) {
      x = x0 + (x1 - x0) * m / xmax
      printf "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%d</text>\n", x, y0 + 16, m > out
    }
    printf "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">minutes since the start (SentencePiece training included)</text>\n", (x0 + x1) / 2, H - 6 > out
    for (v = 0; v <= lmax; v += 1) {
      y = y0 - (y0 - y1) * v / lmax
      printf "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" fill=\"#c0392b\">%d</text>\n", x0 - 6, y + 4, v > out
    }
    for (v = 0; v <= bmax; v += 10) {
      y = y0 - (y0 - y1) * v / bmax
      printf "<text x=\"%d\" y=\"%.1f\" fill=\"#2471a3\">%d</text>\n", x1 + 6, y + 4, v > out
    }
    printf "<text x=\"%d\" y=\"%d\" fill=\"#c0392b\">training loss</text>\n", x0 + 10, y1 + 12 > out
    printf "<text x=\"%d\" y=\"%d\" fill=\"#2471a3\" text-anchor=\"end\">sacreBLEU (valid, beam 4)</text>\n", x1 - 10, y1 + 12 > out
    printf "<polyline fill=\"none\" stroke=\"#c0392b\" stroke-width=\"2\" points=\"" > out
    for (i = 1; i <= tn; ++i) printf "%.1f,%.1f ", x0 + (x1 - x0) * tt[i] / xmax, y0 - (y0 - y1) * tl[i] / lmax > out
    print "\"/>" > out
    printf "<polyline fill=\"none\" stroke=\"#2471a3\" stroke-width=\"2\" points=\"" > out
    for (i = 1; i <= en; ++i) printf "%.1f,%.1f ", x0 + (x1 - x0) * et[i] / xmax, y0 - (y0 - y1) * eb[i] / bmax > out
    print "\"/>" > out
    for (i = 1; i <= en; ++i) printf "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#2471a3\"/>\n", x0 + (x1 - x0) * et[i] / xmax, y0 - (y0 - y1) * eb[i] / bmax > out
    print "</svg>" > out
  }' <<<"$rows"
