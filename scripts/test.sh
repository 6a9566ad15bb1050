#!/usr/bin/env bash
# From a fresh clone to a test run in one command: virtual environment, install, pytest.
# Extra arguments go to pytest (e.g. scripts/test.sh -k attention).
set -euo pipefail
cd "$(dirname "$0")/.."
TRANSDUCE_EXTRAS="[test]" scripts/setup.sh
# the server's page is tested in a real browser: Debian's Chromium, installed when missing
if ! command -v chromium >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
    >/dev/null || echo "could not install chromium: the browser test will be skipped" >&2
fi
# lint first: a style error fails in seconds, before a half-hour suite
"${TRANSDUCE_VENV:-.venv}/bin/ruff" check transduce tests benchmarks docs
exec "${TRANSDUCE_VENV:-.venv}/bin/python" -m pytest "$@"
