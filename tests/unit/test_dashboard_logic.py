"""The dashboard's pure parts: handovers between two reads, the last error of an
attempt history, paging, which addresses need a token, and masked URLs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from starlette.datastructures import QueryParams

from lockworker.cli.common import safe_url
from lockworker.cli.dashboard import password_of
from lockworker.cli.status import Row
from lockworker.cli.web.app import PAGE, paged
from lockworker.cli.web.guard import is_loopback, needs_token
from lockworker.cli.web.jobs import count
from lockworker.cli.web.view import handovers, last_error, recorded_handovers
from lockworker.model.history import AttemptRecord, handed_over, reset_before


def job(job_id: str, state: str, holder: str | None, token: int, attempt: int = 1) -> Row:
    return Row("job", "ns", job_id, state, holder, attempt, token, None, None)


def test_a_new_holder_with_a_greater_token_is_a_handover_and_a_retry_by_the_same_is_not() -> None:
    found, seen = handovers({}, [job("a", "held", "host-a", 5), job("b", "held", "host-a", 7)],
                            1.0)
    assert found == []  # first sight: no handover
    found, seen = handovers(seen, [job("a", "pending", "host-a", 5),  # lease ran out
                                   job("b", "held", "host-a", 8, 2)], 2.0)  # same owner again
    assert found == []
    found, seen = handovers(seen, [job("a", "held", "host-b", 6, 2),
                                   job("b", "done", "host-a", 8, 2)], 3.0)
    assert [(h.id, h.before, h.after, h.token, h.attempt, h.seen_at) for h in found] == [
        ("a", "host-a", "host-b", 6, 2, 3.0)]
    found, _ = handovers(seen, [job("a", "held", "host-c", 6, 2)], 4.0)  # no greater token
    assert found == []


def test_a_vacant_leadership_keeps_the_last_leader_in_mind() -> None:
    def leader(holder: str | None, token: int) -> Row:
        return Row("leader", "leader", "cron", "leading" if holder else "vacant", holder, None,
                   token, None, None)

    _, seen = handovers({}, [leader("host-a", 3)], 1.0)
    _, seen = handovers(seen, [leader(None, 3)], 2.0)
    found, seen = handovers(seen, [leader("host-b", 4)], 3.0)
    assert [(h.kind, h.before, h.after, h.token) for h in found] == [
        ("leader", "host-a", "host-b", 4)]
    _, seen = handovers(seen, [], 4.0)
    assert seen == {}  # a job or leader gone from Redis is forgotten


def test_the_last_error_is_the_latest_recorded_one() -> None:
    records = [SimpleNamespace(error_type="OSError", error="disk full"),
               SimpleNamespace(error_type="ValueError", error="bad row"),
               SimpleNamespace(error_type=None, error=None)]
    assert last_error(records) == "ValueError: bad row"
    assert last_error([]) is None and last_error(records[2:]) is None


def test_counts_hold_every_state_of_every_namespace() -> None:
    counts = count([job("a", "held", "x", 1), job("b", "gave_up", "x", 2)])
    assert counts == {"ns": {"held": 1, "pending": 0, "done": 0, "gave_up": 1, "foreign": 0}}


@pytest.mark.parametrize(("asked", "number"), [("1", 1), ("3", 3), ("99", 3), ("x", 1),
                                                ("-4", 1)])
def test_pages_are_cut_on_the_server(asked: str, number: int) -> None:
    page = paged(list(range(2 * PAGE + 1)), QueryParams({"page": asked}))
    assert (page.number, page.pages, page.total) == (number, 3, 2 * PAGE + 1)
    assert list(page.rows) == list(range((number - 1) * PAGE, 2 * PAGE + 1))[:PAGE]


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("0.0.0.0", False), ("::", False), ("10.1.2.3", False),
    ("dash.example", False),
])
def test_only_loopback_is_served_without_a_token(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    assert needs_token(host, None) is not loopback
    assert not needs_token(host, "a-token")


def test_every_password_of_a_url_is_masked_and_known() -> None:
    url = "redis+sentinel://u:pw1@h:26379,h:26380/mymaster?sentinel_password=pw2"
    assert safe_url(url) == "redis+sentinel://u:***@h:26379,h:26380/mymaster?sentinel_password=***"
    assert password_of(url) == ["pw1", "pw2"]
    assert password_of("redis://:s%40cret@h:6379/0") == ["s@cret"]
    assert password_of("redis://h:6379/0") == []


def attempt(number: int, owner: str, ending: str | None, token: int = 0) -> AttemptRecord:
    return AttemptRecord(number, token or number, owner, "r", 1000 * token, None, ending,
                         None, None)


def test_a_reset_is_read_from_the_attempt_numbers_and_a_refund_is_not_one() -> None:
    records = [
        attempt(1, "host-a", "stopped", 1),  # refunded: the next is attempt 1 again
        attempt(1, "host-b", "failed", 2),
        attempt(2, "host-b", "gave_up", 3),
        attempt(1, "host-b", "failed", 4),  # after a reset
        attempt(2, "host-c", "done", 5),
    ]
    assert reset_before(records) == {3}
    assert reset_before(records[:1]) == frozenset()


def test_recorded_handovers_are_attempts_by_another_owner_not_across_a_reset() -> None:
    records = (
        attempt(1, "host-a", "lost", 1),
        attempt(2, "host-b", "gave_up", 2),
        attempt(1, "host-a", "failed", 3),  # after a reset: a re-drive, not a handover
        attempt(2, "host-a", "done", 4),
    )
    assert [(b.owner, a.owner, a.token) for b, a in handed_over(records)] == [
        ("host-a", "host-b", 2)
    ]
    found = recorded_handovers(job("j", "done", "host-a", 4), records)
    assert [(h.id, h.before, h.after, h.token, h.attempt, h.seen_at, h.recorded)
            for h in found] == [("j", "host-a", "host-b", 2, 2, 2.0, True)]
    assert recorded_handovers(job("j", "done", None, 1), [SimpleNamespace()] * 2) == []
