#!/usr/bin/env bash
# Multi30k from raw text to an evaluated model in one command (issue 7's recipe):
#   scripts/multi30k.sh [de|fr] [RUN_DIR]
# trains configs/multi30k_en_$TGT.yaml (60 minutes at most on a 2-core CPU), averages the last
# five checkpoints, then prints sacreBLEU BLEU (lowercased and cased) and chrF on val and on
# test2016. Data: MULTI30K_DIR=/path/with/train.en,... or else the download into
# ~/.cache/transduce. Extra `section.key=value` overrides can follow in TRANSDUCE_OVERRIDES.
set -euo pipefail
cd "$(dirname "$0")/.."
TGT="${1:-de}"
RUN="${2:-runs/m30k-en-$TGT}"
BIN="${TRANSDUCE_VENV:-.venv}/bin"
scripts/setup.sh
overrides=()
[[ -n "${MULTI30K_DIR:-}" ]] && overrides+=("data.dir=$MULTI30K_DIR")
# shellcheck disable=SC2206
overrides+=(${TRANSDUCE_OVERRIDES:-})
if [[ -f "$RUN/config.yaml" ]]; then
  "$BIN/transduce" train --resume "$RUN"
else
  "$BIN/transduce" train "configs/multi30k_en_$TGT.yaml" --run-dir "$RUN" "${overrides[@]}"
fi
"$BIN/transduce" average "$RUN" --last 5
for split in val test_2016_flickr; do
  read -r src ref < <("$BIN/python" - "$split" "$TGT" <<'EOF'
import os, sys
from transduce.data.datasets import multi30k
files = multi30k(sys.argv[1], "en", sys.argv[2], data_dir=os.environ.get("MULTI30K_DIR") or None)
print(files.src, files.tgt)
EOF
)
  echo "== $split (en -> $TGT)"
  "$BIN/transduce" evaluate --model "$RUN" --src "$src" --ref "$ref" --lowercase \
    -o "$RUN/$split.$TGT"
  "$BIN/sacrebleu" "$ref" -i "$RUN/$split.$TGT" -m bleu chrf
done
