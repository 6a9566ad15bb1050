#!/usr/bin/env bash
# Create .venv (if missing) and install transduce into it; used by the other scripts.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${TRANSDUCE_VENV:-.venv}
python=${PYTHON:-python3}
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || { echo "transduce needs Python >= 3.10 ($python is $("$python" --version))" >&2; exit 1; }
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
# torch first, pinned, so pip takes the local CPU wheel and not a multi-GB CUDA build. (Not
# --no-compile: where PYTHONDONTWRITEBYTECODE is set, as on CI's machines, no bytecode would
# ever be written, and every process would compile torch's modules again: the suite took 45
# minutes instead of 31.)
"$venv/bin/pip" install --quiet torch==2.13.0
"$venv/bin/pip" install --quiet -e ".${TRANSDUCE_EXTRAS:-}"
