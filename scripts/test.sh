#!/usr/bin/env bash
# From a fresh clone to a test run in one command: virtual environment, install, pytest.
# Extra arguments go to pytest (e.g. scripts/test.sh -k attention).
set -euo pipefail
cd "$(dirname "$0")/.."
# the server's page is tested in a real browser (Debian's Chromium), its workers' shared rate
# limit in a real Redis (Debian's redis-server): installed when missing, while pip installs
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v redis-server >/dev/null || missing+=(redis-server)
apt=
if [ ${#missing[@]} -gt 0 ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  { { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } \
      >/dev/null 2>&1 || echo "could not install ${missing[*]}: their tests will be skipped" >&2; } &
  apt=$!
fi
TRANSDUCE_EXTRAS="[test]" scripts/setup.sh
[ -z "$apt" ] || wait "$apt"
# lint first: a style error fails in seconds, before a half-hour suite
"${TRANSDUCE_VENV:-.venv}/bin/ruff" check transduce tests benchmarks docs
# one worker per CPU (at most 4), a test module to a worker: its module-scoped fixtures (trained
# runs, the docs' workspace) are made once; the suite waits on subprocesses, servers, signals and
# compilers, and two workers on 2 CPUs take it in ~0.7 of the time of one; the 25 slowest tests
# are listed at the end, to keep the suite within CI's 30 minutes
exec "${TRANSDUCE_VENV:-.venv}/bin/python" -m pytest -n logical --maxprocesses 4 --dist loadscope \
  --durations 25 "$@"
