"""Section 9's second half: lockworker beside the worker frameworks (jobs/s, a killed
worker's job) and issue 42's two targets against them.

The targets read lockworker's best ``serve(group=)`` row against the frameworks' rows
that ran every job once: ahead of the fastest of them, and at least
:data:`RERUN_TARGET` x the fastest of those whose killed-worker trial ran the job
again (in either setting). Where a target is not met, the line says what bounds the two
rows: the cores they kept busy, and each one's server and worker CPU and server
commands per job.
"""

from __future__ import annotations

import math

from benchmarks import peer_frameworks as fw
from benchmarks.peer_workers import PROCESSES
from benchmarks.peers import (
    AT_MOST_ONCE,
    LOCKWORKER,
    SETTINGS,
    PeerRate,
    PeersRun,
    Recovery,
)

RERUN_TARGET = 1.5
CORES_BUSY = 0.85
"""Share of the cores busy from which a row counts as bound by the cores."""
SUMMARY_PREFIX = "- beside the worker frameworks"


def _n(value: float, digits: int = 0) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"


def _s(seconds: float | None, cap: float) -> str:
    return f"not within {cap:g} s" if seconds is None else f"{seconds:.2f} s"


def _verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def _fine(r: PeerRate) -> bool:
    return not r.error and r.once and not math.isnan(r.rate)


def best_lockworker(peers: PeersRun) -> PeerRate | None:
    rows = [r for r in peers.rates if r.tool == LOCKWORKER and _fine(r)]
    return max(rows, key=lambda r: r.rate) if rows else None


def rerunning(peers: PeersRun) -> list[str]:
    """The tools whose killed worker's job ran again within the watch, in some setting."""
    tools: list[str] = []
    for r in peers.recoveries:
        if r.tool != LOCKWORKER and r.latency is not None and r.tool not in tools:
            tools.append(r.tool)
    return tools


def fastest(peers: PeersRun, tools: list[str] | None = None) -> PeerRate | None:
    rows = [
        r for r in peers.rates
        if r.tool != LOCKWORKER and _fine(r) and (tools is None or r.tool in tools)
    ]
    return max(rows, key=lambda r: r.rate) if rows else None


def costs(r: PeerRate, cores: int) -> str:
    """A row's cost per job and how busy the cores were, the bound when they were."""
    busy = r.busy_cores
    where = (
        f"the cores bound it ({busy:.1f} of {cores} busy)" if busy >= CORES_BUSY * cores
        else f"not the cores ({busy:.1f} of {cores} busy: the rest is waiting, on replies "
        "or on its own polling)"
    )
    return (
        f"{_n(r.per_job(r.server_cpu) * 1e6)} µs server CPU, "
        f"{_n(r.per_job(r.workers_cpu) * 1e6)} µs workers' CPU and "
        f"{r.per_job(r.commands):.1f} server commands per job, {where}"
    )


def _bound(ours: PeerRate, theirs: PeerRate, cores: int) -> str:
    return f" (bound: {ours.label}: {costs(ours, cores)}; {theirs.tool}: {costs(theirs, cores)})"


def targets(peers: PeersRun, cores: int) -> list[str]:
    ours = best_lockworker(peers)
    ahead, again = fastest(peers), rerunning(peers)
    rerun = fastest(peers, again)
    if ours is None:
        return ["beside the worker frameworks, targets: no lockworker row ran every job once"]
    lines = []
    if ahead is not None:
        ratio = ours.rate / ahead.rate
        lines.append(
            f"beside the worker frameworks, lockworker in a group ahead of every "
            f"framework's jobs/s: {ours.label} {_n(ours.rate)} / the fastest, {ahead.tool} "
            f"{_n(ahead.rate)} = {ratio:.2f}x: {_verdict(ratio > 1)}"
            + ("" if ratio > 1 else _bound(ours, ahead, cores))
        )
    else:
        lines.append(
            "beside the worker frameworks, lockworker in a group ahead of every "
            "framework's jobs/s: no framework ran every job once in this run (not "
            "installed: `pip install -e '.[bench]'`), so none to compare with"
        )
    if rerun is not None:
        ratio = ours.rate / rerun.rate
        lines.append(
            f"beside the worker frameworks, lockworker in a group >= {RERUN_TARGET:g}x the "
            f"fastest framework that reruns a crashed worker's job ({', '.join(again)} did "
            f"in their trials): {ours.label} {_n(ours.rate)} / {rerun.tool} {_n(rerun.rate)} "
            f"= {ratio:.2f}x: {_verdict(ratio >= RERUN_TARGET)}"
            + ("" if ratio >= RERUN_TARGET else _bound(ours, rerun, cores))
        )
    elif peers.recoveries:
        lines.append(
            f"beside the worker frameworks, lockworker in a group >= {RERUN_TARGET:g}x the "
            "fastest framework that reruns a crashed worker's job: no framework's job ran "
            f"again within {peers.bound:g} s in this run, so none to compare with"
        )
    return lines


def summary(peers: PeersRun | None, cores: int) -> list[str]:
    if peers is None or not peers.rates:
        return []
    rates = ", ".join(
        f"{r.label.replace('`', '')} {r.error.split(':')[0] if r.error else _n(r.rate)}"
        for r in peers.rates
    )
    again = ", ".join(
        f"{r.tool} {r.setting} {_s(r.latency, r.bound) if not r.error else 'not available'}"
        for r in peers.recoveries
    )
    return [
        f"beside the worker frameworks, {PROCESSES} worker processes: jobs/s {rates}; a "
        f"SIGKILLed worker's job ran again after: {again}",
        *targets(peers, cores),
    ]


def _why(error: str) -> str:
    return error if error.startswith("not available") else f"error: {error}"


def _rates(peers: PeersRun, cores: int) -> list[str]:
    out = [
        "| tool | jobs | seconds | jobs/s | each ran once | server CPU µs / job "
        "| workers' CPU µs / job | server commands / job | cores busy |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in peers.rates:
        if r.error.startswith(("not available", "error: ")):
            out.append(f"| {r.label} | {_n(r.jobs)} | - | - | {r.error} | - | - | - | - |")
            continue
        once = "yes" if r.once else f"**no** ({r.runs} runs of {r.distinct} jobs)"
        out.append(
            f"| {r.label} | {_n(r.jobs)} | {r.seconds:.2f} | {_n(r.rate)} "
            f"| {once}{f'; {r.error}' if r.error else ''} "
            f"| {_n(r.per_job(r.server_cpu) * 1e6)} | {_n(r.per_job(r.workers_cpu) * 1e6)} "
            f"| {r.per_job(r.commands):.1f} | {r.busy_cores:.2f} of {cores} |"
        )
    return out


def _recovery_row(r: Recovery) -> str:
    head = f"| {r.tool} | {r.setting} | {SETTINGS[(r.tool, r.setting)]} "
    if r.error:
        return head + f"| {_why(r.error)} | - | - | - |"
    once = "-" if not r.runs_after else ("yes" if r.runs_after == 1 else "**no**")
    return head + (
        f"| {_s(r.latency, r.bound)} | {r.runs_after} (watched {r.watched:.0f} s) "
        f"| {r.at_once} | {once} |"
    )


PROMISES = (
    "- **lockworker**: a job is held under a lease that the holder's heartbeat renews; "
    "when the holder dies, the lease runs out and a waiting process takes the job "
    "(a new attempt, with a larger fencing token) within the lease. While the holder "
    "lives, nobody else runs the job, however long it takes.",
    "- **RQ**: a job whose worker died stays in the queue's `StartedJobRegistry` until "
    "its entry expires (for a `SimpleWorker`, 60 s after the job's timeout, which is "
    "180 s by default and must exceed the job's work, since the timeout ends the job) "
    "and a worker's maintenance finds it (every `maintenance_interval`, 10 minutes "
    "by default, and only between two of an idle worker's waits for a job, "
    "`worker_ttl` - 15 s long): then it is retried if it was enqueued with `Retry`, "
    "else moved to the `FailedJobRegistry`. By default the job never runs again by "
    "itself.",
    "- **Celery** (Redis broker): by default a task is acknowledged when a worker "
    "takes it, so a worker's crash loses it. With `task_acks_late` the message stays "
    "unacknowledged until the task ends, and the Redis transport delivers it again "
    "after the `visibility_timeout` (one hour by default) to any worker, whether or "
    "not the first is still running it: a visibility timeout shorter than the task "
    "gives copies that run at once.",
    "- **Dramatiq** (`RedisBroker`): a worker moves the messages it fetches into a set "
    "of its own and acknowledges each once it ran. A dead worker's messages go back to "
    "the queue once its last command to the broker (its heartbeat) is older than "
    "`heartbeat_timeout` (60 s by default) and a maintenance pass finds it; a command "
    "runs that pass with a chance of `maintenance_chance` per million (1,000 by "
    "default), so with idle workers polling about once a second it comes minutes later.",
    "- **arq**: a job stays queued until it has run; the worker running it holds an "
    "in-progress key that expires `job_timeout` + 10 s after the start (300 + 10 s by "
    "default) and is not renewed. Once it has expired, the next poll of any worker "
    "(every 0.5 s) runs the job again (up to `max_tries`, 5). The timeout also ends a "
    "job that runs longer, so it must exceed the job's work.",
    "- **saq**: a started job has a `timeout` (10 s by default) that ends it; a sweep "
    "(every `timers[\"sweep\"]` s, 60 by default, one per interval among the workers) "
    "finds an active job past its timeout, aborts it and retries it only if `retries` "
    "allows (1 by default: one attempt, no retry).",
    "- **streaq**: jobs are entries of a stream read through a consumer group; a worker "
    "renews the entries it runs every 0.9 x `idle_timeout` (60 s by default), and a "
    "worker's read claims an entry left idle longer (XAUTOCLAIM) and runs it again (up "
    "to `max_tries`, 3).",
    "- **taskiq-redis** (`RedisStreamBroker`): jobs are entries of a stream read through "
    "a consumer group, acknowledged once the job ran; a worker claims entries idle for "
    "`idle_timeout` (10 minutes by default) with XAUTOCLAIM, but only after a read that "
    "brought new entries: while no other job arrives, as in this trial, a dead worker's "
    "job waits.",
    "- **huey** (`RedisHuey`): a worker takes a job with BRPOP and acknowledges nothing, "
    "so a job whose worker dies is gone: at most once, and no setting runs it again.",
)


def section(peers: PeersRun, cores: int) -> list[str]:
    out: list[str] = []
    add = out.append
    add("### Beside the worker frameworks: jobs/s, and a killed worker's job")
    add("")
    add(
        f"The same server and the same one-round-trip handler (one pipeline: the job's "
        f"run counted, the first start kept), {PROCESSES} worker processes per tool. "
        "lockworker: the jobs are submitted to one stream that the 3 processes read "
        "through one consumer group (`StreamSource(..., group=...)`), each "
        f"`serve(source, concurrency=c)`, a row for each `c`. RQ: `SimpleWorker`s (one "
        "job at a time each; RQ's default `Worker` forks a child per job). Celery: the "
        f"`threads` pool with {fw.CONCURRENCY} threads, or the `solo` pool, no result "
        f"backend. Dramatiq: `RedisBroker`, `Worker(worker_threads={fw.CONCURRENCY})`. "
        f"arq: `Worker(max_jobs={fw.CONCURRENCY})`. saq: "
        f"`Worker(concurrency={fw.CONCURRENCY})`. streaq: "
        f"`Worker(concurrency={fw.CONCURRENCY})`. taskiq-redis: `RedisStreamBroker` "
        f"(a consumer group), `max_async_tasks={fw.CONCURRENCY}`. huey: `RedisHuey`, "
        f"{fw.CONCURRENCY} worker threads. Each with its defaults otherwise; the asyncio "
        "ones (arq, saq, streaq, taskiq) run the handler's asyncio twin (the same "
        f"commands through `redis.asyncio`). {_n(peers.jobs)} jobs are queued before the "
        "workers are released together (processes that are ready are sent a go; Celery: "
        "running workers are told to consume the queue); time runs from the first job's "
        "start until every job has run. **each ran once** checks the runs counted in "
        "Redis. The CPU columns and **cores busy** cover the release to the last job "
        "(server: `INFO cpu`; workers: the 3 processes' `/proc` times); **server "
        "commands** counts those inside scripts too."
    )
    add("")
    out.extend(_rates(peers, cores))
    add("")
    lines = targets(peers, cores)
    if lines:
        add(
            "**Targets** (lockworker's best group row against the frameworks' rows that "
            "ran every job once; a framework reruns a crashed worker's job when its "
            "killed-worker trial below, in either setting, ran the job again; its "
            "jobs/s row runs its defaults): "
            + "; ".join(line.split(", ", 1)[1] for line in lines) + "."
        )
        add("")
    add(
        f"**A killed worker's job.** One job that works for {peers.hold:g} s; once it "
        "started, the worker process running it gets SIGKILL (a crash: no handler runs, "
        "no acknowledgement is sent). **runs again after**: from the kill to the job's "
        f"next start, watched for at most {peers.bound:g} s. The run then watches the "
        "rerun to its end (within the same limit): **runs after the kill** counts the "
        "job's starts after the kill and **at once** the most that ran at the same "
        "time; once means one run after the kill. Each tool runs with its defaults and, "
        "where a setting makes it rerun a dead worker's job sooner, tuned ("
        + ", ".join(sorted(AT_MOST_ONCE)) + " has none: at most once). The trials of all "
        "tools and settings run side by side, each with its own queue (or namespace) "
        "and workers"
        + (", here during the jobs/s rows (a quick run)." if peers.side_by_side else ".")
    )
    add("")
    add("| tool | setting | configured as | runs again after | runs after the kill "
        "| at once | ran once |")
    add("|---|---|---|---:|---:|---:|---|")
    out.extend(_recovery_row(r) for r in peers.recoveries)
    add("")
    add("What each promises about a job whose worker dies:")
    add("")
    out.extend(PROMISES)
    add("")
    return out
