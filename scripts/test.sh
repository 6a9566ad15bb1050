#!/usr/bin/env bash
# From a fresh clone to a test run in one command: virtual environment, install, pytest.
# Extra arguments go to pytest (e.g. scripts/test.sh -k attention).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${TRANSDUCE_VENV:-.venv}
python=${PYTHON:-python3}
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || { echo "transduce needs Python >= 3.10 ($python is $("$python" --version))" >&2; exit 1; }
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
# torch first, pinned, so pip takes the local CPU wheel and not a multi-GB CUDA build
"$venv/bin/pip" install --quiet torch==2.13.0
"$venv/bin/pip" install --quiet -e ".[test]"
exec "$venv/bin/python" -m pytest "$@"
