#!/usr/bin/env bash
# Fine-tuning step speed: Garden's bert/sentence_prediction_tiny training on
# the bundled SpamAssassin records against bench/peers/
# peer_sentence_prediction.py (the same model, batch and optimizer in Python
# PyTorch), alternating, ROUNDS rounds. Garden's rate is what `garden train`
# logs per loop of 50 steps (its input pipeline and checkpoint writes
# included), the median over the loops after the first; the peer's is its
# timed loop on one fixed batch, with Garden's process settings (`garden
# env`: OpenBLAS's kernels for this CPU, OpenMP's wait policy; not
# GOMP_SPINCOUNT, as bench/peer.h runs the peers) and as many threads as
# Garden uses (every core) unless PEER_FLAGS says otherwise. Garden's run
# is the peer's model: the [CLS] head and no attention biases (the
# experiment ships the tokens' mean and biases of slope 1.0).
#
#   bash bench/finetune_speed.sh [ROUNDS] [PEER_FLAGS]   e.g. "--threads 1"
#   PYTHON=bench/peers/peer-sid-python PEER_COMPILE=1 bash bench/finetune_speed.sh
#     (PyTorch 2.x with torch.compile, in the chroot bench/peers/README.md makes)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
garden=${GARDEN:-$here/build/garden}
python=${PYTHON:-/usr/bin/python3}
rounds=${1:-3}
peer_flags=${2:---threads $(nproc)}
out=$(mktemp -d /tmp/finetune_speed.XXXXXX)
trap 'rm -rf "$out"' EXIT
# A SentencePiece model of the bundled man pages (2,000 pieces: the slice
# holds no more; the model keeps electra/tiny's 8,000 rows, which costs the
# same whatever ids the records use).
"$garden" spm train --input="$here/data/pretraining/man_en_train.txt" --model_prefix="$out/sp" \
  --vocab_size=2000 --pad_id=0 --unk_id=1 --bos_id=-1 --eos_id=-1 \
  --user_defined_symbols='[CLS],[SEP],[MASK]' > /dev/null 2>&1
"$garden" create_finetuning_data --classification_task_name=SST-2 \
  --input_data_dir="$here/data/sentence_prediction" --train_data_output_path="$out/train.tfrecord" \
  --meta_data_file_path="$out/meta.json" --sp_model_file="$out/sp.model" --nodo_lower_case \
  --max_seq_length=64 > /dev/null
for round in $(seq "$rounds"); do
  rm -rf "$out/run"
  "$garden" train --experiment=bert/sentence_prediction_tiny --mode=train --model_dir="$out/run" \
    --params_override="task.model.pooling=cls,task.model.encoder.bert.alibi_slope=0,task.train_data.input_path=$out/train.tfrecord,trainer.train_steps=300" > "$out/garden.log" 2>&1
  garden_rate=$(grep -o 'steps_per_second: [0-9.]*' "$out/garden.log" | awk 'NR>1{print $2}' | sort -n |
    awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
  peer=$(eval "$("$garden" env 2>/dev/null | grep '^export')"; unset GOMP_SPINCOUNT
    "$python" "$here/bench/peers/peer_sentence_prediction.py" $peer_flags)
  peer_rate=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["steps_per_s"])' "$peer")
  echo "round $round: garden $garden_rate steps/s, peer $peer_rate steps/s ($peer), garden/peer $(
    /usr/bin/python3 -c "print(round($garden_rate / $peer_rate, 2))")"
done
