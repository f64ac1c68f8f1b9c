#!/usr/bin/env bash
# The whole test suite: lint, types, then unit, integration and process tests against a
# real server that the tests start themselves. Extra arguments go to pytest.
source "$(dirname "$0")/_venv.sh" test
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
