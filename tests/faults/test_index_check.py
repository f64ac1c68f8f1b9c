"""The index check of the fault battery (:mod:`faults.index`) on made-up scans: quiet
when the index agrees with the job states, an ``index_disagrees`` naming the job and
both sides for each planted disagreement."""

from __future__ import annotations

import pytest

from lockworker.model.codec import StateValue
from lockworker.model.index import Kind, score
from lockworker.model.keys import escape, index_key
from lockworker.model.state import JobStatus

from .index import Counts, Indexed, Job, agreement

pytestmark = pytest.mark.faults

NS = "ns"
NOW = 1_800_000_000_000


def job(job_id: str, status: JobStatus, *, locked: bool = False, due: int | None = None) -> Job:
    return Job(NS, job_id, StateValue(status, 1, 7, "" if due else "run", "o", due), locked)


def ix(job_id: str, kind: Kind, ms: int = NOW, *, ns: str = NS) -> Indexed:
    return Indexed(index_key(ns, escape(job_id)), escape(job_id), float(score(kind, ms)))


GOOD_JOBS = [
    job("done", JobStatus.DONE),
    job("gave-up", JobStatus.GAVE_UP),
    job("held", JobStatus.PENDING, locked=True),
    job("backoff", JobStatus.PENDING, due=NOW + 60_000),
    job("due-passed", JobStatus.PENDING, due=NOW - 5),
    job("pending", JobStatus.PENDING),
    job("lapsed", JobStatus.PENDING),
    job("odd {id} 100% : \u00e9", JobStatus.PENDING, locked=True),
]
GOOD_INDEX = [
    ix("gave-up", Kind.GAVE_UP),
    ix("held", Kind.HELD),
    ix("backoff", Kind.BACKOFF, NOW + 60_000),
    ix("due-passed", Kind.BACKOFF, NOW - 5),
    ix("pending", Kind.PENDING),
    ix("lapsed", Kind.HELD),  # its holder died, its lease ran out: allowed
    ix("odd {id} 100% : \u00e9", Kind.HELD),
]
GOOD_COUNTS = [Counts(NS, (3, 2, 1, 1))]


def disagreements(jobs: list[Job], entries: list[Indexed], **kw: object) -> list[str]:
    found = agreement(jobs, entries, **kw)  # type: ignore[arg-type]
    assert {v.kind for v in found} <= {"index_disagrees"}, found
    return [f"{v.key}: {v.detail}" for v in found]


def test_an_index_that_agrees_with_every_state_is_quiet() -> None:
    assert disagreements(GOOD_JOBS, GOOD_INDEX, counts=GOOD_COUNTS) == []


def replaced(job_id: str, new: Indexed | None) -> list[Indexed]:
    kept = [e for e in GOOD_INDEX if e.member != escape(job_id)]
    return kept if new is None else [*kept, new]


@pytest.mark.parametrize(("job_id", "planted", "says"), [
    ("gave-up", ix("gave-up", Kind.PENDING), "should hold GAVE_UP, but it holds PENDING"),
    ("gave-up", None, "should hold GAVE_UP, but it holds none"),
    ("done", ix("done", Kind.HELD), "which has no entry, but the index holds HELD"),
    ("held", ix("held", Kind.PENDING), "should hold HELD, but it holds PENDING"),
    ("backoff", ix("backoff", Kind.PENDING), "should hold BACKOFF, but it holds PENDING"),
    ("backoff", ix("backoff", Kind.BACKOFF, NOW), f"BACKOFF entry is at {NOW}"),
    ("pending", ix("pending", Kind.GAVE_UP), "should hold HELD or PENDING, but it holds"),
    ("pending", None, "should hold HELD or PENDING, but it holds none"),
])
def test_a_planted_disagreement_names_the_job_and_both_sides(
    job_id: str, planted: Indexed | None, says: str
) -> None:
    found = disagreements(GOOD_JOBS, replaced(job_id, planted))
    assert len(found) == 1, found
    assert found[0].startswith(f"{NS}/{job_id}: the state is "), found
    assert says in found[0], found


def test_an_entry_without_a_job_is_reported_unless_its_keys_were_deleted() -> None:
    orphan = ix("gone", Kind.GAVE_UP)
    [found] = disagreements(GOOD_JOBS, [*GOOD_INDEX, orphan])
    assert found.startswith(f"{NS}/gone: the index holds GAVE_UP at {NOW} but the job has no")
    assert disagreements(GOOD_JOBS, [*GOOD_INDEX, orphan], forgotten={(NS, "gone")}) == []


def test_an_entry_in_another_slots_key_or_of_no_kind_is_reported() -> None:
    wrong_key = Indexed(index_key(NS, "somewhere-else"), "pending", score(Kind.PENDING, NOW))
    found = disagreements(GOOD_JOBS, replaced("pending", wrong_key))
    assert any("not its slot's key" in f for f in found), found
    no_kind = Indexed(index_key(NS, "pending"), "pending", float(9 * 10**13))
    found = disagreements(GOOD_JOBS, replaced("pending", no_kind))
    assert any("is of no kind" in f for f in found), found


def test_two_entries_of_one_job_in_two_namespaces_stay_apart() -> None:
    other = [Job("other", "held", StateValue(JobStatus.DONE, 1, 7, "run", "o"), False)]
    assert disagreements([*GOOD_JOBS, *other], GOOD_INDEX) == []
    found = disagreements([*GOOD_JOBS, *other], [*GOOD_INDEX, ix("held", Kind.HELD, ns="other")])
    assert len(found) == 1 and found[0].startswith("other/held: "), found


def test_views_counting_other_than_the_index_keys_hold_is_reported() -> None:
    [found] = disagreements(GOOD_JOBS, GOOD_INDEX, counts=[Counts(NS, (3, 2, 0, 1))])
    assert found == (f"{NS}: the views count (held, backoff, pending, gave_up) (3, 2, 0, 1), "
                     "the index keys hold (3, 2, 1, 1)")
