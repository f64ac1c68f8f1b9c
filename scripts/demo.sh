#!/usr/bin/env bash
# The main example: a primary and two backups share a stream of jobs on an embedded
# real server; the primary is killed part way, and nothing is lost or done twice.
source "$(dirname "$0")/_venv.sh" server
exec .venv/bin/lockworker demo "$@"
