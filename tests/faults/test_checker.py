"""The history checker catches every kind of violation it claims to, on synthetic
histories, and stays quiet on histories that keep every promise; the harness reads
threads and asyncio tasks that died from a process's stderr."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from .harness import deaths
from .history import (
    JOB,
    Effect,
    Final,
    History,
    Outcome,
    Recorder,
    Section,
    Violation,
    Window,
    check,
    followed_early,
    handovers,
    load,
    parse_lines,
)

pytestmark = pytest.mark.faults

_sids = itertools.count(1)


def sec(
    key: str, run: str, token: int, start: float, believed: float | None, *,
    kind: str = JOB, end: float | None = None, result: str | None = "returned",
) -> Section:
    return Section(
        kind=kind, key=key, run=run, token=token, start=start, last_believed=believed,
        end=end if end is not None else (believed if believed is not None else start),
        result=result, owner=f"owner-of-{run}", sid=next(_sids),
    )


def kinds(violations: list[Violation]) -> set[str]:
    return {v.kind for v in violations}


def commit(s: Section, seq: int, op: str = "commit") -> Effect:
    return Effect(s.kind, s.key, s.token, s.run, s.sid, op, seq)


def good_job() -> tuple[History, list[Effect], dict[str, Final]]:
    """Attempt 1 fails in run a, attempt 2 finishes in run b: every promise kept."""
    first = sec("j", "a", 1, 0.0, 0.4, result="failed")
    second = sec("j", "b", 2, 1.0, 1.4)
    history = History(
        sections=[first, second],
        outcomes=[
            Outcome("b", JOB, "j", "done", 1.5), Outcome("a", JOB, "j", "done_elsewhere", 1.6)
        ],
    )
    effects = [commit(first, 0, "write"), commit(second, 1, "write"), commit(second, 2)]
    return history, effects, {"j": Final("done", 2, 2)}


def test_a_history_that_keeps_every_promise_has_no_violation() -> None:
    history, effects, final = good_job()
    assert check(history, effects=effects, final=final, pending_ok=False, max_attempts=2) == []


def test_overlap_of_believed_sections_by_two_runs() -> None:
    history = History(sections=[
        sec("L", "a", 1, 0.0, 1.0, kind="lock"), sec("L", "b", 2, 0.9, 2.0, kind="lock"),
    ])
    found = check(history)
    assert kinds(found) == {"overlap"}
    assert "100.0 ms" in found[0].detail


def test_no_overlap_when_sections_follow_each_other_or_belong_to_one_run() -> None:
    history = History(sections=[
        sec("L", "a", 1, 0.0, 1.0, kind="lock"),
        sec("L", "b", 2, 1.0, 2.0, kind="lock"),  # starts exactly when a stopped believing
        sec("L", "b", 3, 1.5, 2.5, kind="lock"),  # same run: not two holders
        sec("M", "c", 1, 0.5, 1.5, kind="lock"),  # another key
        sec("L", "d", 4, 1.2, None, kind="lock", result="lost"),  # never believed it held
    ])
    assert check(history) == []


def test_the_same_token_in_two_runs_is_reuse() -> None:
    history = History(sections=[
        sec("L", "a", 7, 0.0, 1.0, kind="leader", result=None),  # killed
        sec("L", "a2", 7, 2.0, 3.0, kind="leader"),  # its restart re-entered with token 7
    ])
    found = check(history)
    assert kinds(found) == {"token_reuse"}
    assert "token 7" in found[0].detail


def test_a_lower_token_after_a_higher_one_goes_backwards() -> None:
    history = History(sections=[
        sec("L", "a", 1_700_000_000_000_000, 0.0, 1.0, kind="lock"),
        sec("L", "b", 1, 2.0, 3.0, kind="lock"),  # after a server lost its data
    ])
    assert kinds(check(history)) == {"token_backwards"}
    assert check(history, tokens=False) == []


def test_where_holders_may_overlap_tokens_order_sections_that_started_after_a_belief_ended(
) -> None:
    # A server restart without persistence: "a" was granted token 10 just before it,
    # "b" token 20 just after; "a" started its section 4.5 ms after "b" did (its
    # reply came late), both believing at once; the fence refused "a"'s writes.
    overlapping = History(sections=[
        sec("L", "b", 20, 0.0, 1.0, kind="leader"),
        sec("L", "a", 10, 0.0045, 0.005, kind="leader", result="fenced"),
    ])
    assert kinds(check(overlapping)) == {"overlap", "token_backwards"}  # exclusive
    assert check(overlapping, exclusive=False) == []
    # A section that starts after another stopped believing was granted after it.
    after = History(sections=[
        sec("L", "b", 20, 0.0, 1.0, kind="leader"),
        sec("L", "a", 10, 0.0045, 0.005, kind="leader", result="fenced"),
        sec("L", "c", 15, 2.0, 3.0, kind="leader"),  # below b's 20: backwards
    ])
    found = check(after, exclusive=False)
    assert kinds(found) == {"token_backwards"}
    assert "run c" in found[0].detail and "run b" in found[0].detail


def test_unbelieved_sections_do_not_order_tokens_but_may_not_reuse_them() -> None:
    history = History(sections=[
        sec("L", "a", 2, 0.0, 1.0, kind="lock"),
        sec("L", "b", 1, 2.0, None, kind="lock", result="lost"),  # paused before its start
    ])
    assert check(history) == []


def test_two_runs_reporting_done_is_double_done() -> None:
    history, effects, final = good_job()
    history.outcomes.append(Outcome("a", JOB, "j", "done", 1.7))
    assert kinds(check(history, effects=effects, final=final)) == {"double_done"}


def test_done_reported_by_a_run_that_did_not_finish_the_job_is_double_done() -> None:
    history, effects, final = good_job()
    history.outcomes = [Outcome("c", JOB, "j", "done", 1.7)]  # a restart with the same owner
    assert kinds(check(history, effects=effects, final=final)) == {"double_done"}


def test_an_attempt_or_commit_after_done_is_double_done() -> None:
    history, effects, final = good_job()
    late = sec("j", "c", 3, 2.0, 2.2)
    history.sections.append(late)
    effects.append(commit(late, 3))
    found = check(history, effects=effects, final=final)
    assert kinds(found) == {"double_done", "lost"}  # the state also fell behind token 3
    assert sum(1 for v in found if v.kind == "double_done") == 2


def test_done_reported_for_a_job_that_gave_up_is_double_done() -> None:
    history, effects, _ = good_job()
    assert kinds(check(history, effects=effects, final={"j": Final("gave_up", 2, 2)})) == {
        "double_done"
    }


def test_a_job_left_pending_is_lost_only_when_pending_is_not_allowed() -> None:
    history = History(sections=[sec("j", "a", 1, 0.0, 0.5, result="failed")])
    final = {"j": Final("pending", 1, 1)}
    assert check(history, final=final) == []
    assert kinds(check(history, final=final, pending_ok=False)) == {"lost"}


def test_done_without_a_finished_attempt_is_lost() -> None:
    history = History(sections=[sec("j", "a", 1, 0.0, 0.5, result=None)])  # killed
    assert kinds(check(history, final={"j": Final("done", 1, 1)})) == {"lost"}


def test_done_without_the_commit_in_the_store_is_lost() -> None:
    history, effects, final = good_job()
    assert kinds(check(history, effects=effects[:2], final=final)) == {"lost"}


def test_a_state_behind_the_tokens_handed_out_is_lost() -> None:
    history, effects, _ = good_job()
    history.outcomes = []
    found = check(history, effects=effects, final={"j": Final("pending", 0, 0)})
    assert kinds(found) == {"lost"}
    assert "fell behind" in found[0].detail


def test_a_job_without_a_final_state_is_lost() -> None:
    history, effects, _ = good_job()
    assert kinds(check(history, effects=effects, final={})) == {"lost"}


def test_done_reported_while_the_state_says_pending_is_lost() -> None:
    history, effects, _ = good_job()
    assert kinds(check(history, effects=effects, final={"j": Final("pending", 2, 2)})) == {
        "lost"
    }


def test_more_hook_runs_than_max_attempts() -> None:
    history, effects, final = good_job()
    assert kinds(check(history, effects=effects, final=final, max_attempts=1)) == {
        "too_many_attempts"
    }


def test_the_store_accepting_a_lower_token_after_a_higher_one_is_a_fence_violation() -> None:
    history, effects, final = good_job()
    swapped = [effects[1], effects[0], effects[2]]
    reordered = [Effect(e.kind, e.key, e.token, e.run, e.sid, e.op, n)
                 for n, e in enumerate(swapped)]
    assert kinds(check(history, effects=reordered, final=final)) == {"fence"}


def test_an_accepted_write_of_no_known_section_is_a_fence_violation() -> None:
    history, effects, final = good_job()
    effects.append(Effect(JOB, "j", 2, "ghost", 99, "write", 3))
    found = check(history, effects=effects, final=final)
    assert "fence" in kinds(found)
    assert "token_reuse" in kinds(found)  # token 2 accepted from two runs


def test_recorded_events_fold_into_sections_and_a_torn_last_line_is_skipped(
    tmp_path: Path,
) -> None:
    path = tmp_path / "h.jsonl"
    rec = Recorder(path, owner="me")
    sid = rec.begin("lock", "L", 5, lambda: False)
    believed = rec.holding(sid, lambda: False)
    assert rec.holding(sid, lambda: True) is None
    rec.end(sid, "returned")
    killed = rec.begin("lock", "L", 6, lambda: False)
    rec.outcome("j", "done")
    rec.close()
    with path.open("a") as f:
        f.write('{"ev":"believe","run":"x')  # SIGKILL in the middle of a line
    history = load([path])
    first, second = history.sections
    assert (first.token, first.result, first.owner) == (5, "returned", "me")
    assert believed is not None and first.end is not None
    assert first.last_believed == believed
    assert first.start <= believed <= first.end
    assert (second.sid, second.end, second.result) == (killed, None, None)
    assert history.outcomes[0].outcome == "done"
    assert first.run == second.run and first.run.startswith(f"{os.getpid()}-")


def test_a_torn_line_before_the_end_is_an_error() -> None:
    lines = ['{"ev":"note","run":"r","what":"ready","t":1', json.dumps(
        {"ev": "note", "run": "r", "what": "exit", "t": 2})]
    with pytest.raises(json.JSONDecodeError):
        parse_lines(lines)


def test_a_section_that_was_already_lost_at_its_start_is_never_believed(
    tmp_path: Path,
) -> None:
    rec = Recorder(tmp_path / "h.jsonl")
    rec.begin("job", "j", 1, lambda: True)
    rec.close()
    (section,) = load([tmp_path / "h.jsonl"]).sections
    assert section.last_believed is None


def test_handovers_count_changes_of_run_per_key() -> None:
    history = History(sections=[
        sec("L", "a", 1, 0.0, 0.1, kind="lock"), sec("L", "a", 2, 0.2, 0.3, kind="lock"),
        sec("L", "b", 3, 0.4, 0.5, kind="lock"), sec("L", "a", 4, 0.6, 0.7, kind="lock"),
        sec("M", "c", 1, 0.0, 0.1, kind="lock"),
    ])
    assert handovers(history) == 2


# Property: sequential histories (each section after the previous one stopped believing,
# with growing tokens) are clean, whoever holds; shifting one start back into the
# previous holder's belief is always reported as an overlap.

holds = st.lists(
    st.tuples(st.sampled_from("abcd"), st.floats(0.001, 1.0), st.floats(0.0, 0.5),
              st.integers(1, 3)),
    min_size=2, max_size=30,
)


def sequential(spec: list[tuple[str, float, float, int]]) -> list[Section]:
    sections, t, token = [], 0.0, 0
    for run, length, gap, step in spec:
        token += step
        sections.append(sec("K", run, token, t, t + length, kind="lock"))
        t += length + gap
    return sections


@settings(max_examples=200, deadline=None, database=None)
@given(holds)
def test_sequential_histories_are_clean(spec: list[tuple[str, float, float, int]]) -> None:
    assert check(History(sections=sequential(spec))) == []


@settings(max_examples=200, deadline=None, database=None)
@given(holds, st.data())
def test_any_start_moved_into_the_previous_belief_is_an_overlap(
    spec: list[tuple[str, float, float, int]], data: st.DataObject
) -> None:
    sections = sequential(spec)
    i = data.draw(st.integers(1, len(sections) - 1))
    prev, cur = sections[i - 1], sections[i]
    assert prev.last_believed is not None
    if prev.run == cur.run:
        cur.run = prev.run + "-other"
    cur.start = data.draw(st.floats(prev.start, prev.last_believed, exclude_max=True))
    assert "overlap" in kinds(check(History(sections=sections)))


DYING = """
import asyncio, gc, threading

def thread():
    raise KeyError("in a thread")

async def task():
    raise ValueError("in a task")

async def main():
    t = asyncio.create_task(task())
    await asyncio.sleep(0)
    del t  # its exception never retrieved: the loop reports it once it is collected
    gc.collect()
    asyncio.get_running_loop().call_soon(lambda: 1 / 0)
    await asyncio.sleep(0.01)

th = threading.Thread(target=thread)
th.start()
th.join()
asyncio.run(main())
"""


def test_threads_tasks_and_callbacks_that_died_are_read_from_stderr() -> None:
    err = subprocess.run(
        [sys.executable, "-c", DYING], capture_output=True, text=True, check=True, timeout=30
    ).stderr
    found = deaths([line for line in err.splitlines() if line.strip()])
    assert [kind for kind, _ in found] == ["thread_died", "task_died", "task_died"], err
    assert found[0][1].endswith("KeyError: 'in a thread'"), found
    assert found[1][1].endswith("ValueError: in a task"), found
    assert found[2][1].endswith("ZeroDivisionError: division by zero"), found


def test_every_scenario_has_a_soak_size() -> None:
    """The soak runs every scenario at its soak size: a scenario without one stopped it."""
    from .__main__ import SOAK
    from .scenarios import SCENARIOS

    assert set(SOAK) == set(SCENARIOS)


def test_a_run_after_the_done_window_is_accepted_only_where_granted() -> None:
    """A job run again after its DONE record expired: a double DONE, unless the checker
    is told that job's window ended before the second run (and only after it)."""
    lines = [
        json.dumps({"ev": "start", "run": "r1", "sid": 1, "kind": JOB, "key": "x",
                    "token": 5, "t": 1.0, "believed": True}),
        json.dumps({"ev": "end", "run": "r1", "sid": 1, "t": 1.1, "result": "returned"}),
        json.dumps({"ev": "outcome", "run": "r1", "kind": JOB, "key": "x",
                    "outcome": "done", "t": 1.2}),
        json.dumps({"ev": "start", "run": "r2", "sid": 1, "kind": JOB, "key": "x",
                    "token": 9, "t": 5.0, "believed": True}),
        json.dumps({"ev": "end", "run": "r2", "sid": 1, "t": 5.1, "result": "returned"}),
        json.dumps({"ev": "outcome", "run": "r2", "kind": JOB, "key": "x",
                    "outcome": "done", "t": 5.2}),
    ]
    history = parse_lines(lines)
    effects = [Effect(JOB, "x", 5, "r1", 1, "commit", 1),
               Effect(JOB, "x", 9, "r2", 1, "commit", 2)]
    final = {"x": Final("done", 9, 1)}
    first = Final("done", 5, 1)
    plain = check(history, effects=effects, final=final, pending_ok=False)
    assert {v.kind for v in plain} == {"double_done"}, plain
    granted = check(history, effects=effects, final=final, pending_ok=False,
                    windows={"x": Window(3.0, first)})
    assert granted == []
    too_early = check(history, effects=effects, final=final, pending_ok=False,
                      windows={"x": Window(6.0, first)})
    assert {v.kind for v in too_early} >= {"double_done"}, too_early


def test_a_delivery_followed_before_its_job_was_done_is_caught() -> None:
    """``followed_early``: a backup settled a job by the progress before the run that
    the server marked DONE returned, or settled one that did not end DONE."""
    done = sec("x", "a", 7, 1.0, 1.4, end=1.5)
    history = History(sections=[done])
    final = {"x": Final("done", 7, 1), "y": Final("gave_up", 3, 3)}

    def followed(key: str, t: float) -> list[Violation]:
        history.notes[:] = [{"what": "followed", "key": key, "run": "b", "t": t}]
        return followed_early(history, final)

    assert followed("x", 1.6) == []  # after the DONE run returned: fine
    assert kinds(followed("x", 1.2)) == {"followed_early"}  # while it still ran
    assert kinds(followed("y", 2.0)) == {"followed_early"}  # never DONE
    final["x"] = Final("done", 8, 2)  # DONE by a run the history does not show
    assert kinds(followed("x", 1.6)) == {"followed_early"}
