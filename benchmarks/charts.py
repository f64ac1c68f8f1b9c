"""PNG charts for the page (matplotlib, from the ``bench`` extra): optional."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.common import installed
from benchmarks.contended import Contended
from benchmarks.failover import Takeover

HANDOVERS = "benchmarks-handovers.png"
TAKEOVER = "benchmarks-takeover.png"
STREAM = "benchmarks-stream.png"


def _pyplot() -> Any:
    if not installed("matplotlib"):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def handovers(results: list[Contended], folder: Path) -> str | None:
    """Bar chart of handovers/s and sections/s per contended lock; the file's name."""
    plt = _pyplot()
    rows = [r for r in results if not r.kind.semaphore]
    if plt is None or not rows:
        return None
    names = [r.kind.name.replace(" (", "\n(") for r in rows]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    positions = range(len(rows))
    ax.barh([p + 0.2 for p in positions], [r.rate for r in rows], height=0.4,
            label="sections/s", color="#c9d6e8")
    ax.barh([p - 0.2 for p in positions], [r.handover_rate for r in rows], height=0.4,
            label="handovers/s (owner changed)", color="#2b6cb0")
    ax.set_yticks(list(positions), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("per second")
    ax.set_title(f"4 holders on one lock (processes or asyncio tasks), {rows[0].seconds:g} s")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / HANDOVERS, dpi=100)
    plt.close(fig)
    return HANDOVERS


def takeover(results: list[Takeover], folder: Path) -> str | None:
    """Each trial's delay beyond the lease after SIGKILL, per library; the file's name."""
    plt = _pyplot()
    rows = [r for r in results if r.beyond]
    if plt is None or not rows:
        return None
    fig, ax = plt.subplots(figsize=(9, 3.5))
    for index, r in enumerate(rows):
        values = [max(b * 1000, 0.1) for b in r.beyond]
        ax.scatter(values, [index] * len(values), alpha=0.7, s=30)
        ordered = sorted(values)
        ax.plot([ordered[len(ordered) // 2]] * 2, [index - 0.3, index + 0.3], color="black")
    ax.set_xscale("log")
    ax.set_yticks(range(len(rows)), [r.kind for r in rows], fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel("takeover latency beyond the lease's end, ms (log scale; bar = median)")
    ax.set_title("Takeover after SIGKILL of the holder")
    fig.tight_layout()
    fig.savefig(folder / TAKEOVER, dpi=100)
    plt.close(fig)
    return TAKEOVER


def stream_rates(section: Any, folder: Path) -> str | None:
    """Bar chart of jobs/s per stream contender (median over the rounds); the file's name."""
    plt = _pyplot()
    if plt is None or section is None:
        return None
    bars = [(r.contender.name, r.rate, r.contender.kind) for r in section.rows if r.outcomes]
    cluster = getattr(section, "cluster", None)
    for t in cluster.topologies if cluster is not None else []:
        if t.outcome is not None:
            bars.append((f"3 streams, shared groups, {t.name}", t.outcome.rate, "cluster"))
    if not bars:
        return None
    colours = {
        "serve": "#2b6cb0", "aio": "#4c9f70", "pool": "#718096", "aiopool": "#a0aec0",
        "cg": "#c05621", "keys": "#d69e2e",
        "cluster": "#805ad5",
    }
    fig, ax = plt.subplots(figsize=(9, 0.4 * len(bars) + 1.2))
    ax.barh(range(len(bars)), [b[1] for b in bars], color=[colours[b[2]] for b in bars])
    ax.set_yticks(range(len(bars)), [b[0] for b in bars], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("jobs/s (median over the rounds)")
    ax.set_title("A stream of jobs: lockworker serve() beside plain consumer groups")
    fig.tight_layout()
    fig.savefig(folder / STREAM, dpi=100)
    plt.close(fig)
    return STREAM
