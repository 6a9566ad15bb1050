#!/usr/bin/env bash
# Create .venv (if missing) and install transduce into it; used by the other scripts.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${TRANSDUCE_VENV:-.venv}
python=${PYTHON:-python3}
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || { echo "transduce needs Python >= 3.10 ($python is $("$python" --version))" >&2; exit 1; }
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
# torch first, pinned, so pip takes the local CPU wheel and not a multi-GB CUDA build;
# --no-compile: a module is compiled to bytecode when first imported, not every file of every
# package at install (torch alone: 28 s against 46 s)
"$venv/bin/pip" install --quiet --no-compile torch==2.13.0
"$venv/bin/pip" install --quiet --no-compile -e ".${TRANSDUCE_EXTRAS:-}"
