"""The dashboard over real HTTP against a real server: pages, paging at 10,000 jobs,
the token, the host names it answers to, and the checks on every change (a CSRF token
and the page's own origin)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from dashboard_server import ask, serving

import lockworker
from lockworker.cli.web.app import PAGE, create_app
from lockworker.cli.web.view import Collector
from lockworker.daemons.sources import stream_keys
from lockworker.model import registry as names
from lockworker.model.codec import StateValue
from lockworker.model.keys import JobKeys
from lockworker.model.state import JobStatus, Snapshot
from lockworker.protocol import ScriptProtocol, registry
from lockworker.protocol.schedules import schedule_key
from lockworker.protocol.streams import fanout_keys
from lockworker.testing import RedisServer

HTML = {"Accept": "text/html"}


def rows(body: str) -> list[str]:
    """The ids of the job rows a page shows."""
    return re.findall(r'<td class="id"><a href="[^"]*">([^<]*)</a>', body)


def csrf_of(body: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', body)
    assert found, "no form with a CSRF token on the page"
    return found[1]


def give_up(client: redis.Redis, namespace: str, job_id: str, error: str = "boom") -> None:
    def fail(_job: lockworker.Job) -> None:
        raise RuntimeError(error)

    worker = lockworker.Worker(client, namespace=namespace, on_acquired=fail, max_attempts=1,
                               handle_signals=False, lock_timeout=2.0)
    assert worker.process(job_id) is lockworker.Outcome.GAVE_UP
    worker.close()


def state(client: redis.Redis, namespace: str, job_id: str) -> JobStatus:
    return ScriptProtocol(client).inspect(JobKeys.of(namespace, job_id)).status


@pytest.fixture
def collector(redis_client: redis.Redis, namespace: str) -> Iterator[Collector]:
    made = Collector(redis_client, namespace=namespace, refresh=0.2)
    yield made
    made.stop()


def test_ten_thousand_jobs_are_paged_and_a_page_loads_well_under_a_second() -> None:
    with RedisServer() as server:
        client = server.client(decode_responses=True)
        pipe = client.pipeline(transaction=False)
        for i in range(10_000):
            keys = JobKeys.of(f"ns-{i % 4}", f"job-{i}")
            status = (JobStatus.DONE, JobStatus.GAVE_UP)[i % 2]
            value = StateValue(status, 1, i + 1, "0123456789abcdef", "host-a")
            pipe.set(keys.state, value.encode(), px=3_600_000)
        pipe.execute()
        collector = Collector(client, refresh=60.0)
        with serving(create_app(collector, url=server.url)) as base:
            assert len(collector.view.jobs) == 10_000
            took = []
            for path in ("/", "/jobs", "/jobs?page=150", "/jobs?ns=ns-1&state=gave_up&page=9",
                         "/?gave_up=3"):
                started = time.monotonic()
                reply = ask(base, path)
                took.append(time.monotonic() - started)
                assert reply.status == 200, path
                assert len(rows(reply.body)) <= PAGE
            assert max(took) < 1.0, took  # typically a few tens of ms: a wide margin
            page = ask(base, "/jobs?page=150").body
            assert "page 150 of 200 (10000 rows)" in page
            # by namespace, then naturally by id: rows 7451-7500 are ns-2's last 50
            assert rows(page) == [f"job-{4 * k + 2}" for k in range(2450, 2500)]
            counts = ask(base, "/").body
            assert 'ns=ns-1&amp;state=gave_up">2500<' in counts
            assert 'ns=ns-0&amp;state=gave_up">0<' in counts
            memory = counts[counts.index('<section id="memory">'):]
            memory = memory[:memory.index("</section>")]
            assert "server memory: " in memory and "10,000 keys" in memory
            assert re.search(r"<td>ns-3</td><td>job states</td><td class=\"count\">2,[0-9]{3}<",
                             memory), memory
            assert "bytes by MEMORY USAGE" in memory
        client.close()


def test_a_job_page_shows_its_attempts_and_escapes_the_error(
    redis_client: redis.Redis, namespace: str
) -> None:
    @dataclass(frozen=True)
    class Record:  # the attempt record's fields, as the library's history holds them
        attempt: int
        token: int
        owner: str
        run: str
        started_ms: int
        ended_ms: int | None
        ending: str | None
        error_type: str | None
        error: str | None

    @dataclass(frozen=True)
    class WithHistory(Snapshot):
        history: tuple[Any, ...] = ()

    class Recorded(Collector):
        def inspect(self, namespace: str, job_id: str) -> Snapshot | None:
            seen = super().inspect(namespace, job_id)
            assert seen is not None
            records = (
                Record(1, 7, "host-a", "r1", 1_700_000_000_000, 1_700_000_000_250, "lost",
                       None, None),
                Record(2, 8, "host-b", "r2", 1_700_000_001_000, 1_700_000_001_500, "gave_up",
                       "ValueError", "<b>bad</b> row & 'quote'"),
            )
            return WithHistory(**{**seen.__dict__, "history": records})

    give_up(redis_client, namespace, "invoice-43")
    collector = Recorded(redis_client, namespace=namespace, refresh=60.0)
    with serving(create_app(collector, url="redis://x")) as base:
        job = ask(base, f"/job?ns={namespace}&id=invoice-43").body
        assert "ValueError</b>: <span class=\"message\">&lt;b&gt;bad&lt;/b&gt; row &amp; " \
            "&#39;quote&#39;</span>" in job
        assert "<b>bad</b>" not in job
        assert job.count('class="attempt ') == 2 and "host-b" in job and "lost" in job
        overview = ask(base, "/").body  # the given-up list shows the last error
        assert "ValueError: &lt;b&gt;bad&lt;/b&gt; row" in overview


def refuse_with_markup(job: lockworker.Job) -> None:
    raise ValueError("<i>no</i> & done")


def test_a_job_page_shows_each_failure_s_traceback_escaped(
    redis_client: redis.Redis, namespace: str, collector: Collector
) -> None:
    worker = lockworker.Worker(
        redis_client, namespace=namespace, on_acquired=refuse_with_markup, max_attempts=2,
        retry_delay=0.0, handle_signals=False, lock_timeout=2.0,
    )
    assert worker.process("invoice-44") is lockworker.Outcome.GAVE_UP
    worker.close()
    with serving(create_app(collector, url="redis://x")) as base:
        page = ask(base, f"/job?ns={namespace}&id=invoice-44").body
        for part in (page, ask(base, f"/job?ns={namespace}&id=invoice-44&fragment=1").body):
            traces = re.findall(
                r'<details class="traceback" id="traceback-\d+"><summary>traceback</summary>'
                r"<pre>(.*?)</pre></details>", part, re.DOTALL,
            )
            assert len(traces) == 2  # one per failed attempt
            for trace in traces:
                assert ", in refuse_with_markup\n" in trace
                assert 'raise ValueError(&#34;&lt;i&gt;no&lt;/i&gt; &amp; done&#34;)' in trace
        assert "<i>no</i>" not in page


def test_a_read_only_dashboard_has_no_reset_and_a_reset_needs_the_pages_csrf_and_origin(
    redis_client: redis.Redis, namespace: str, collector: Collector
) -> None:
    give_up(redis_client, namespace, "j1")
    with serving(create_app(collector, url="redis://x")) as base:
        page = ask(base, f"/job?ns={namespace}&id=j1").body
        assert 'action="/reset"' not in page
        assert ask(base, "/reset", method="POST", form={"ns": namespace, "id": "j1"}).status \
            in (404, 405)
    with serving(create_app(collector, url="redis://x", allow_reset=True)) as base:
        first = ask(base, f"/job?ns={namespace}&id=j1")
        cookie, token = first.cookies["lockworker_csrf"], csrf_of(first.body)
        own = {"Origin": base, "Sec-Fetch-Site": "same-origin"}
        form = {"ns": namespace, "id": "j1", "csrf": token}
        attempts = [
            ({"ns": namespace, "id": "j1"}, own, {"lockworker_csrf": cookie}),  # no token
            ({**form, "csrf": "0" * 64}, own, {"lockworker_csrf": cookie}),  # a wrong one
            (form, own, {}),  # the token without the browser's cookie
            (form, {"Origin": "http://evil.example"}, {"lockworker_csrf": cookie}),
            (form, {"Origin": base, "Sec-Fetch-Site": "cross-site"}, {"lockworker_csrf": cookie}),
            (form, {}, {"lockworker_csrf": cookie}),  # neither Origin nor Referer
        ]
        for fields, headers, cookies in attempts:
            reply = ask(base, "/reset", method="POST", form=fields, headers=headers,
                        cookies=cookies)
            assert reply.status == 403, (fields, headers, cookies)
            assert state(redis_client, namespace, "j1") \
                is JobStatus.GAVE_UP
        assert ask(base, "/reset", headers=own).status == 405  # GET changes nothing
        done = ask(base, "/reset", method="POST", form=form, cookies={"lockworker_csrf": cookie},
                   headers={"Referer": f"{base}/job?ns={namespace}&id=j1"})
        assert done.status == 303 and "said=stranded" in done.headers["location"]
        assert state(redis_client, namespace, "j1") \
            is JobStatus.PENDING


def test_a_token_is_asked_by_bearer_header_or_login_form(collector: Collector) -> None:
    with serving(create_app(collector, url="redis://x", token="t0ken-42")) as base:
        assert ask(base, "/").status == 401
        assert ask(base, "/job?ns=a&id=b", headers={"Authorization": "Bearer nope"}).status == 401
        to_login = ask(base, "/jobs?page=2", headers=HTML)
        assert to_login.status == 303
        assert to_login.headers["location"] == "/login?next=%2Fjobs%3Fpage%3D2"
        assert ask(base, "/", headers={"Authorization": "Bearer t0ken-42"}).status == 200
        own = {"Origin": base}
        wrong = ask(base, "/login", method="POST", form={"token": "nope"}, headers=own)
        assert wrong.status == 401 and "lockworker_session" not in wrong.cookies
        cross = ask(base, "/login", method="POST", form={"token": "t0ken-42"},
                    headers={"Origin": "http://evil.example"})
        assert cross.status == 401
        ok = ask(base, "/login?next=//evil.example/", method="POST",
                 form={"token": "t0ken-42"}, headers=own)
        assert ok.status == 303 and ok.headers["location"] == "/"
        session = ok.cookies["lockworker_session"]
        assert "t0ken-42" not in session
        assert ask(base, "/", cookies={"lockworker_session": session}).status == 200
        assert ask(base, "/static/dashboard.css").status == 200  # the login page's style


def test_without_a_token_only_loopback_host_names_are_answered(collector: Collector) -> None:
    with serving(create_app(collector, url="redis://x")) as base:
        port = base.rsplit(":", 1)[1]
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
            assert ask(base, "/", headers={"Host": host}).status == 200, host
        rebound = ask(base, "/", headers={"Host": f"attacker.example:{port}"})
        assert rebound.status == 421


def test_every_page_forbids_inline_scripts_and_framing(collector: Collector) -> None:
    with serving(create_app(collector, url="redis://x")) as base:
        headers = ask(base, "/").headers
        assert "script-src 'self'" in headers["content-security-policy"]
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert headers["x-content-type-options"] == "nosniff"


def test_the_handovers_panel_starts_with_those_the_histories_record_and_a_reset_is_marked(
    redis_client: redis.Redis, namespace: str, collector: Collector
) -> None:
    stopping: list[lockworker.Worker] = []

    def fail(_job: lockworker.Job) -> None:
        raise RuntimeError("boom")

    def fail_and_stop(_job: lockworker.Job) -> None:
        stopping[0].stop()  # this process goes away after its failed attempt
        raise RuntimeError("boom")

    common: dict[str, Any] = dict(namespace=namespace, handle_signals=False,
                                  lock_timeout=2.0, retry_delay=0.0)
    with lockworker.Worker(redis_client, owner="host-a", on_acquired=fail, max_attempts=1,
                           **common) as a:
        assert a.process("moved") is lockworker.Outcome.GAVE_UP
        assert a.reset("moved")  # host-b runs it after a reset: a re-drive, no handover
    with lockworker.Worker(redis_client, owner="host-a", on_acquired=fail_and_stop,
                           **common) as a:
        stopping.append(a)
        assert a.process("handed") is lockworker.Outcome.STOPPED  # attempt 1 failed
    with lockworker.Worker(redis_client, owner="host-b", on_acquired=lambda job: None,
                           **common) as b:
        assert b.process("moved") is lockworker.Outcome.DONE
    # Attempt 2, handed over, gives up: the index lists it (not a finished one).
    with lockworker.Worker(redis_client, owner="host-b", on_acquired=fail, max_attempts=2,
                           **common) as b:
        assert b.process("handed") is lockworker.Outcome.GAVE_UP
    with serving(create_app(collector, url="redis://x")) as base:
        page = ask(base, "/").body
        recorded = [h for h in collector.handovers if h.recorded]
        assert [(h.id, h.before, h.after, h.attempt) for h in recorded] == [
            ("handed", "host-a", "host-b", 2)
        ]
        assert 'class="handover recorded"' in page
        job = ask(base, f"/job?ns={namespace}&id=moved").body
        assert job.count('class="reset-mark"') == 1
        assert job.index('class="attempt gave_up"') < job.index('class="reset-mark"') \
            < job.index('class="attempt done"')
        assert 'class="reset-mark"' not in ask(base, f"/job?ns={namespace}&id=handed").body


def test_the_schedules_panel_shows_each_schedule_s_ticks_and_counts(
    redis_client: redis.Redis, namespace: str
) -> None:
    worker = lockworker.Worker(redis_client, namespace=namespace, on_acquired=lambda job: None,
                               handle_signals=False, lock_timeout=2.0)
    source = lockworker.ScheduleSource(redis_client, [lockworker.Every("beat", 3600)])
    source.attach(worker)
    stopped = threading.Event()
    stopped.set()
    assert list(source.deliveries(stopped)) == []  # records the definition as it begins
    worker.close()
    tick = 1_699_999_200  # 2023-11-14T22:00:00Z
    redis_client.hset(schedule_key(namespace, "<b>hand</b>"), mapping={
        "last": tick, "resolved": tick - 60, "last_ran": tick, "ran": 4, "skipped": 2,
        "caught_up": 1, "dropped": 3,
    })
    redis_client.hset(schedule_key(namespace, "beat"), mapping={"last": tick, f"r:{tick}": 1})
    registry.register(redis_client, names.schedule(namespace, "<b>hand</b>"))  # as listed
    collector = Collector(redis_client, namespace=namespace, refresh=60.0)
    with serving(create_app(collector, url="redis://x")) as base:
        body = ask(base, "/").body
    panel = body[body.index('<section id="schedules">'):]
    panel = panel[: panel.index("</section>")]
    rows_ = re.findall(r'<tr class="schedule">(.*?)</tr>', panel, re.S)
    assert len(rows_) == 2, panel
    beat = next(r for r in rows_ if "<td>beat</td>" in r)
    assert "every 3600 s" in beat and "2023-11-14T22:00:00Z" in beat
    assert '<td class="outcome">running</td>' in beat
    assert "2023-11-14T23:00:00Z (overdue" in beat  # nobody serves it: the next is overdue
    hand = next(r for r in rows_ if "&lt;b&gt;hand&lt;/b&gt;" in r)
    assert "<b>hand</b>" not in panel  # the name is escaped
    assert "unknown (no definition recorded)" in hand and '<td class="outcome">ran</td>' in hand
    assert re.findall(r'<td class="count">(\d+)</td>', hand) == ["4", "2", "1", "3"]
    assert "its next tick is unknown" in panel


def test_the_rates_panel_charts_each_namespace_s_last_hour_per_minute(
    redis_client: redis.Redis, namespace: str
) -> None:
    def hook(job: lockworker.Job) -> None:
        if job.id == "bad":
            raise RuntimeError("boom")

    with lockworker.Worker(redis_client, namespace=namespace, on_acquired=hook,
                           max_attempts=1, handle_signals=False, lock_timeout=2.0) as worker:
        for job_id in ("a", "b", "bad"):
            worker.process(job_id)
    collector = Collector(redis_client, namespace=namespace, refresh=60.0)
    with serving(create_app(collector, url="redis://x")) as base:
        body = ask(base, "/").body
        fragment = ask(base, "/?fragment=1").body
    panel = body[body.index('<section id="rates">'):]
    panel = panel[: panel.index("</section>")]
    assert 'id="rates"' in fragment  # swapped in with the live part
    row = re.findall(r'<tr class="rates">(.*?)</tr>', panel, re.S)
    assert len(row) == 1 and f"<td>{namespace}</td>" in row[0]
    assert row[0].count("<polyline") == 4 and '<svg class="rate-chart"' in row[0]
    counts = re.findall(r'<td class="count (\w+)"[^>]*>(\d+)</td>', row[0])
    assert counts == [("done", "2"), ("failed", "1"), ("gave_up", "1"), ("handed_over", "0")]


def test_the_streams_panel_shows_entries_progress_readers_and_delayed_jobs(
    redis_client: redis.Redis, namespace: str
) -> None:
    stream = f"{namespace}-orders"
    entry = lockworker.submit(redis_client, stream, "now", {"n": 1})
    for job_id in ("later", "much-later", "last"):
        lockworker.submit(redis_client, stream, job_id, delay=30)
    reader = lockworker.StreamSource(redis_client, stream, owner="<i>reader</i>")
    reader.attach(SimpleNamespace(namespace=namespace))  # type: ignore[arg-type]
    reader.touch()  # a reader of the namespace, registered: the stream is listed
    progress = fanout_keys(stream_keys(stream))[4]
    redis_client.hset(progress, namespace, entry)  # as serving records it
    collector = Collector(redis_client, namespace=namespace, refresh=60.0)
    with serving(create_app(collector, url="redis://x")) as base:
        body = ask(base, "/").body
        fragment = ask(base, "/?fragment=1").body
    assert 'id="streams"' in fragment  # swapped in with the live part
    panel = body[body.index('<section id="streams">'):]
    panel = panel[: panel.index("</section>")]
    row = re.findall(r'<tr class="stream">(.*?)</tr>', panel, re.S)
    assert len(row) == 1 and f'<td class="name">{stream}</td>' in row[0], panel
    assert '<td class="count entries">1</td>' in row[0]  # the delayed jobs are not entries
    assert f"<div>{namespace} <span" in row[0] and f">{entry}</span>" in row[0]
    assert '<td class="count readers">1/1</td>' in row[0]
    delayed = re.search(r'<td class="delayed">([^<]*)</td>', row[0])
    assert delayed and re.fullmatch(r"3 delayed, next due in (2\d\.\d|30\.0)s", delayed[1])
    reader_row = re.findall(r'<tr class="reader">(.*?)</tr>', panel, re.S)
    assert len(reader_row) == 1 and "&lt;i&gt;reader&lt;/i&gt;" in reader_row[0]
    assert "<i>reader</i>" not in panel  # the owner is escaped
