#!/usr/bin/env bash
# From a fresh clone to a test run in one command: virtual environment, install, pytest.
# Extra arguments go to pytest (e.g. scripts/test.sh -k attention).
set -euo pipefail
cd "$(dirname "$0")/.."
TRANSDUCE_EXTRAS="[test]" scripts/setup.sh
exec "${TRANSDUCE_VENV:-.venv}/bin/python" -m pytest "$@"
