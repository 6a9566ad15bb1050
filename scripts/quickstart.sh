#!/usr/bin/env bash
# From a fresh clone to a trained English -> German number-words model in one command:
# virtual environment, install, `transduce quickstart` (arguments are passed on to it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec "${TRANSDUCE_VENV:-.venv}/bin/transduce" quickstart "$@"
