"""A backup following its namespace's progress (lockworker.serving.follow.Following, and
the witness of lockworker.serving.held.Held): pure decisions, no server.

A held-back delivery is settled without a look only when its entry is at or before the
progress and after the highest entry resolved otherwise than DONE; each mark only moves
forward. A delivery settled so is not looked at, so the newest one is looked at with the
next batch that goes out anyway, and counts as the serving moving if a run deferred to
did it.
"""

from __future__ import annotations

from lockworker.daemons.sources import Delivery
from lockworker.model.keys import JobKeys
from lockworker.model.state import JobStatus, Snapshot
from lockworker.serving.follow import Following
from lockworker.serving.held import Held, Sighting

NEVER = Snapshot(JobStatus.PENDING, 0, 0, "")
PRIMARY = "1" * 16


def fanout(job_id: str, entry: str, stream: str = "s") -> Delivery:
    return Delivery(job_id, None, stream=stream, entry=entry)


def keyed(*deliveries: Delivery) -> list[tuple[Delivery, JobKeys]]:
    return [(d, JobKeys.of("ns", d.job_id)) for d in deliveries]


def test_only_entries_up_to_the_progress_and_after_the_not_done_mark_are_settled() -> None:
    following = Following()
    a, b, c, d = (fanout(f"j{i}", f"{i}-0") for i in range(1, 5))
    plain = Delivery("plain", None)  # an iterable's: no entry, always looked at
    looked = keyed(a, b, c, d, plain)
    assert following.split(looked) == ([], looked)  # nothing read yet
    assert following.unread(looked) == ["s"]
    following.learn("s", [b"3-0", b"1-0"])  # j1 at or before a give-up: looked at
    covered, rest = following.split(looked)
    assert [x.job_id for x, _ in covered] == ["j2", "j3"]
    assert [x.job_id for x, _ in rest] == ["j1", "j4", "plain"]
    assert following.unread(rest) == ["s"]  # j4 is past the progress: read again
    assert following.unread(keyed(a, plain)) == []  # j1 no reading would settle


def test_each_mark_only_moves_forward_and_no_mark_means_all_done() -> None:
    following = Following()
    following.learn("s", [b"5-0", None])
    assert following.covers(fanout("j", "5-0")) and following.covers(fanout("j", "1-7"))
    following.learn("s", [b"2-0", None])  # a progress read lower (its hash reset)
    assert following.covers(fanout("j", "5-0"))
    following.learn("s", [None, b"4-0"])
    assert not following.covers(fanout("j", "4-0"))
    assert following.covers(fanout("j", "4-1"))
    following.learn("s", [b"6-0", b"3-0"])  # the not-DONE mark never moves back
    assert not following.covers(fanout("j", "3-5"))
    assert not following.covers(fanout("j", "5-0", stream="other"))


def test_the_newest_delivery_settled_by_the_progress_witnesses_the_serving_moving() -> None:
    """Without the witness, jobs the progress settles would hide that the serving
    moves: a job nobody took would be seen lying free with nothing resolved for the
    delay, and taken from a primary about to reach it."""
    def first_look(witness_run: str) -> list[tuple[str, Sighting]]:
        held = Held(0.5)
        settled = [fanout(f"done-{i}", f"{i}-0") for i in range(3)]
        ahead = Delivery("ahead", None)
        for delivery in [*settled, ahead]:
            held.hold(10.0, delivery)
        due = held.take(10.6, everything=False)
        assert len(due) == 4
        held.followed(10.6, keyed(*settled))
        witness = held.witness()
        assert witness is not None and witness[0][0] is settled[-1]
        assert held.witness() is None  # looked at once
        held.witnessed(Snapshot(JobStatus.DONE, 1, 5, "x", run=witness_run), witness[1],
                       movers=frozenset({PRIMARY}))
        handed, _ = held.after_look(keyed(ahead), [NEVER], 10.6, True,
                                    movers=frozenset({PRIMARY}))
        return [(d.job_id, s) for d, s in handed if s is not None]

    assert first_look(PRIMARY) == []  # the primary moves: the job ahead is left to it
    # Done by another (a backup's takeover): not the primary moving; nothing resolved
    # by it for the delay, so the job ahead has lain free since it came.
    assert first_look("2" * 16) == [("ahead", Sighting(NEVER, (10.0, 0)))]
