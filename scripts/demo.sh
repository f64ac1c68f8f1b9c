#!/usr/bin/env bash
# The main example: a primary and backups share jobs on an embedded real server.
source "$(dirname "$0")/_venv.sh" server
exec .venv/bin/python examples/cluster.py "$@"
