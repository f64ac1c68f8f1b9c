#!/usr/bin/env bash
# The compatibility pass: the tests that touch redis-py's API (and structlog's, and
# tenacity's), twice: on the oldest Python that pyproject.toml claims with exactly the
# minimum dependencies it declares, and on the newest Python it claims with the newest
# dependencies. Each leg has a virtualenv of its own under .venv-compat/, made again
# when pyproject.toml changes (the newest leg also once a day, to meet new releases).
# Extra arguments go to pytest. A missing Python is replaced by the one at hand, with a
# warning: the dependencies are still proven, the Python release is not.
set -euo pipefail
cd "$(dirname "$0")/.."

# The part of the suite that calls redis-py: its clients (single server, Sentinel,
# cluster; sync and asyncio), pipelines, transactions, scripts, pub/sub, retries and
# connection pools, and the command line on top of them.
TESTS=(
    tests/unit/test_redispy.py tests/unit/test_health.py tests/unit/test_pools.py
    tests/unit/test_protocol_fakeredis.py tests/integration/test_wire.py
    tests/unit/test_cli_metrics_options.py tests/unit/test_events_logging.py
    tests/integration/test_job_protocol.py tests/integration/test_protocol.py
    tests/integration/test_failover_worker.py tests/integration/test_leader.py
    tests/integration/test_lock.py tests/integration/test_batch.py
    tests/integration/test_probes_live.py tests/integration/test_cli.py
    tests/aio/test_aio_api.py tests/aio/test_aio_batch.py
    tests/aio/test_aio_leader.py tests/aio/test_aio_primitives.py
    tests/aio/test_aio_wake_cancel.py
    tests/topologies/test_cluster_products.py tests/topologies/test_cluster_aio.py
    tests/topologies/test_sentinel_aio.py tests/topologies/test_cli_topologies.py
)

oldest=$(sed -n 's/^requires-python = ">=\([0-9.]*\)".*/\1/p' pyproject.toml)
newest=$(grep -o 'Programming Language :: Python :: 3\.[0-9]*' pyproject.toml \
    | sed 's/.*:: //' | sort -V | tail -n 1)
# The declared minimums, pinned: "redis>=5.0.1" becomes "redis==5.0.1".
mapfile -t minimums < <(sed -n '/^dependencies = \[/,/^\]/s/^ *"\([^"]*\)>=\([^",]*\)",*$/\1==\2/p' \
    pyproject.toml)
if [ -z "$oldest" ] || [ -z "$newest" ] || [ "${#minimums[@]}" -eq 0 ]; then
    echo "compat: cannot read the Pythons or the minimums from pyproject.toml" >&2
    exit 1
fi

find_python() {  # the newest interpreter of release $1 (3.10): on PATH, else pyenv's
    local want=$1 candidate
    for candidate in "python$want" \
        $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$want".*/bin/python \
              /root/.pyenv/versions/"$want".*/bin/python 2>/dev/null | sort -V -r); do
        if [ "$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' \
                2>/dev/null)" = "$want" ]; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

quiet_pip() {  # pip, without the lines a local index prints for every package it lacks
    "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}

leg() {  # leg NAME PYTHON_RELEASE PINS...: make the venv if stale, run the tests
    local name=$1 release=$2 python venv stamp
    shift 2
    if ! python=$(find_python "$release"); then
        # Without that Python the leg still proves its dependencies, on the Python at
        # hand, and says so loudly: the Python half of the claim is then unchecked.
        python=$(command -v "${PYTHON:-python3}")
        echo "compat: WARNING: no Python $release (python$release on PATH, or pyenv's" \
             "versions/$release.*): the $name leg runs on $("$python" -V) instead" >&2
        release=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    fi
    venv=.venv-compat/$name
    stamp=$venv/.installed
    if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] \
        || { [ "$name" = newest ] && [ -n "$(find "$stamp" -mmin +1440)" ]; } \
        || [ "$(cat "$stamp")" != "$python $*" ]; then
        echo "compat: installing the $name leg ($python; ${*:-newest dependencies})" >&2
        rm -rf "$venv"
        "$python" -m venv "$venv"
        quiet_pip "$venv/bin/python" -m pip install -q --disable-pip-version-check \
            -e '.[server,test]' "$@"
        echo "$python $*" > "$stamp"
    fi
    echo "compat: the $name leg: Python $release, $("$venv/bin/python" -c \
        'from importlib.metadata import version as v
print(*(f"{p} {v(p)}" for p in ("redis", "structlog", "tenacity")), sep=", ")')" >&2
    "$venv/bin/python" -m pytest -q "${TESTS[@]}" "${PYTEST_ARGS[@]}"
}

PYTEST_ARGS=("$@")
leg minimum "$oldest" "${minimums[@]}"
leg newest "$newest"
