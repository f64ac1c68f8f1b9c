"""The ticks a catch-up policy leaves out are counted once, by the ADMIT that decides
the tick after them, and only while the count is about the ticks it left out."""

from __future__ import annotations

import redis
from hypothesis import given
from hypothesis import strategies as st

from lockworker import Cron, Every
from lockworker.model.schedule import Schedule
from lockworker.protocol import text
from lockworker.protocol.schedules import ADMIT, decode_progress, schedule_key


def fields(client: redis.Redis, key: str) -> dict[str, str]:
    return {text(k): text(v) for k, v in client.hgetall(key).items()}


def admit(client: redis.Redis, key: str, tick: int, dropped: int, last: int | str) -> list[int]:
    verdict, decided, counted = ADMIT(client, [key], [tick, "allow", 0, tick, dropped, last])
    assert text(verdict) == "run"
    return [int(decided), int(counted)]


def test_the_deciding_admit_counts_the_ticks_left_out_once(
    redis_client: redis.Redis, namespace: str
) -> None:
    key = schedule_key(namespace, "beat")
    redis_client.hset(key, mapping={"last": 100, "resolved": 100})
    assert admit(redis_client, key, 105, 4, 100) == [1, 4]  # 101..104 left out
    assert admit(redis_client, key, 105, 4, 100) == [0, 0]  # read, not decided again
    assert decode_progress(fields(redis_client, key)).dropped == 4


def test_a_count_read_before_another_decision_is_not_counted(
    redis_client: redis.Redis, namespace: str
) -> None:
    """Two processes read ``last`` = 100; one decides 103 (counting 101 and 102), the
    other then decides 105 with its count from 100: that count is not about 104 alone,
    so it adds nothing rather than count 101 and 102 twice."""
    key = schedule_key(namespace, "beat")
    redis_client.hset(key, mapping={"last": 100, "resolved": 100})
    assert admit(redis_client, key, 103, 2, 100) == [1, 2]
    assert admit(redis_client, key, 105, 4, 100) == [1, 0]
    assert decode_progress(fields(redis_client, key)).dropped == 2


def test_a_new_schedule_counts_nothing_dropped(redis_client: redis.Redis, namespace: str) -> None:
    key = schedule_key(namespace, "beat")
    assert admit(redis_client, key, 105, 0, "") == [1, 0]
    assert "dropped" not in fields(redis_client, key)


SCHEDULES = st.one_of(
    st.integers(min_value=1, max_value=7200).map(lambda s: Every("e", s)),
    st.sampled_from(["*/5 * * * *", "30 2 * * *", "0 */3 * * 1-5", "15,45 * * * *"]).map(
        lambda expression: Cron("c", expression, tz="Europe/Berlin")
    ),
)


@given(
    SCHEDULES,
    st.floats(min_value=1.7e9, max_value=1.8e9),
    st.integers(min_value=0, max_value=3 * 86400),
)
def test_count_between_is_the_number_of_ticks_strictly_between(
    schedule: Schedule, after: float, span: int
) -> None:
    until = int(after) + span
    walked = [t for t in Schedule.seconds_between(schedule, after, until) if t < until]
    assert schedule.count_between(after, until) == len(walked)
