"""``lockworker dashboard`` in a real browser (headless Chromium through chromedriver)
against real ``lockworker run`` daemons: the open page shows a stream's readers and
its delayed job and a handover without a reload, a given-up job's error, an id holding
markup as text; the command refuses a non-loopback address without a token and never
shows the Redis password.

One browser serves the whole module; each test starts its own dashboard process.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import reap, wait_for

import lockworker
from lockworker.daemons.sources import stream_keys
from lockworker.testing import RedisServer
from lockworker.testing.server import free_port
from tests.helpers import need_binary

pytestmark = pytest.mark.processes

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1280,1000")
XSS_ID = '<script>window.__ran=1</script><img src=x onerror="window.__ran=2">'


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    chromium = need_binary("chromium", "chromium")
    chromedriver = need_binary("chromedriver", "chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    profile = tempfile.mkdtemp(prefix="lockworker-chromium-")
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    reap(started)


def lockworker_process(
    procs: list[subprocess.Popen[bytes]], err: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    with err.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lockworker", *args], stdin=subprocess.DEVNULL,
            stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "LOCKWORKER_REDIS_URL": "", **(env or {})},
        )
    procs.append(proc)
    return proc


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # it answered (a 401 is an answer)
    except OSError:
        return False


def dashboard(procs: list[subprocess.Popen[bytes]], tmp: Path, url: str, *args: str,
              env: dict[str, str] | None = None) -> str:
    """A ``lockworker dashboard`` process on a free port; its base URL once it answers."""
    port = free_port()
    proc = lockworker_process(procs, tmp / "dashboard.log", "dashboard", "--redis", url,
                              "--port", str(port), "--refresh", "0.25", *args, env=env)
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: answers(base + "/") or proc.poll() is not None, timeout=30)
    assert proc.poll() is None, (tmp / "dashboard.log").read_text()
    return base


def shows(browser: Any, css: str, check: Callable[[list[str]], bool], timeout: float = 20) -> None:
    """Wait until the texts of the elements ``css`` selects pass ``check``."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    def texts() -> list[str]:
        # read in the page in one go: the live part may be swapped between two reads
        try:
            return [e.text for e in browser.find_elements(By.CSS_SELECTOR, css)]
        except StaleElementReferenceException:
            return ["(the live part was being swapped)"]

    try:
        wait_for(lambda: check(texts()), timeout=timeout, interval=0.05)
    except AssertionError as exc:
        raise AssertionError(f"{css}: {texts()}") from exc


def test_the_open_page_shows_a_handover_and_the_new_holder_without_a_reload(
    redis_server: RedisServer, namespace: str, procs: list[subprocess.Popen[bytes]],
    tmp_path: Path, browser: Any,
) -> None:
    client = redis_server.client(decode_responses=True)
    stream = f"{namespace}-jobs"
    daemons = {}
    for owner, role in (("dash-primary", "primary"), ("dash-backup", "backup")):
        daemons[owner] = lockworker_process(
            procs, tmp_path / f"{owner}.log", "run", "lockworker.cli.demo_worker:DemoWorker",
            "--redis", redis_server.url, "--namespace", namespace, "--stream", stream,
            "--owner", owner, "--role", role, "--lock-timeout", "1", "--backup-delay", "2",
            "--log-format", "json",
        )
    readers = stream_keys(stream).extra("readers")
    wait_for(lambda: all(client.zscore(readers, o) is not None for o in daemons), timeout=30)
    base = dashboard(procs, tmp_path, redis_server.url, "--namespace", namespace)
    browser.get(base + "/")
    browser.execute_script("window.__sameDocument = true;")
    lockworker.submit(client, stream, "report-7", {"ms": 60_000})  # outlasts the test
    shows(browser, "#held tr.job", lambda rows: any(
        "report-7" in r and "dash-primary" in r for r in rows))
    lockworker.submit(client, stream, "digest-1", delay=3600)
    shows(browser, "#streams tr.stream", lambda rows: any(  # both readers, the job waiting
        stream in r and "2/2" in r and "1 delayed, next due in 59m" in r for r in rows))
    daemons["dash-primary"].send_signal(signal.SIGKILL)
    shows(browser, "#handovers tr.handover", lambda rows: any(
        "report-7" in r and "dash-primary" in r and "dash-backup" in r for r in rows))
    shows(browser, "#held tr.job", lambda rows: any(
        "report-7" in r and "dash-backup" in r for r in rows))
    assert browser.execute_script("return window.__sameDocument === true;")  # no reload
    browser.save_screenshot(str(tmp_path / "dashboard.png"))
    client.close()


def test_a_given_up_jobs_error_is_on_its_page_and_an_id_with_markup_is_text(
    redis_server: RedisServer, namespace: str, procs: list[subprocess.Popen[bytes]],
    tmp_path: Path, browser: Any,
) -> None:
    from selenium.webdriver.common.by import By

    client = redis_server.client(decode_responses=True)

    def fail(job: lockworker.Job) -> None:
        raise RuntimeError(f"disk <b>full</b> while {job.id}")

    worker = lockworker.Worker(client, namespace=namespace, on_acquired=fail, max_attempts=1,
                               handle_signals=False, lock_timeout=2.0)
    for job_id in ("invoice-43", XSS_ID):
        assert worker.process(job_id) is lockworker.Outcome.GAVE_UP
    worker.close()
    base = dashboard(procs, tmp_path, redis_server.url, "--namespace", namespace)
    browser.get(base + "/")
    shows(browser, "#gave-up td.id", lambda ids: sorted(ids) == sorted(["invoice-43", XSS_ID]))
    shows(browser, "#memory tr.share", lambda rows: any(
        r.startswith(f"{namespace} job states 2 ") for r in rows))
    browser.execute_script("window.__swaps = 0; new MutationObserver(() => window.__swaps++)"
                           ".observe(document.getElementById('live'), {childList: true});")
    wait_for(lambda: browser.execute_script("return window.__swaps;") >= 2, timeout=20)
    assert browser.execute_script("return window.__ran === undefined;")  # after live swaps
    assert browser.find_element(By.ID, "gave-up").find_elements(By.LINK_TEXT, XSS_ID)
    browser.get(base + "/job?" + urllib.parse.urlencode({"ns": namespace, "id": XSS_ID}))
    shows(browser, "#job-id", lambda ids: ids == [XSS_ID])
    assert browser.execute_script("return window.__ran === undefined;")
    browser.get(base + "/job?" + urllib.parse.urlencode({"ns": namespace, "id": "invoice-43"}))
    shows(browser, "#history .error", lambda errors: any(
        "RuntimeError" in e and "disk <b>full</b> while invoice-43" in e for e in errors))
    shows(browser, "#job-state", lambda states: states == ["gave_up"])
    client.close()


def test_reset_from_the_page_and_a_token_on_a_non_loopback_address(
    redis_server: RedisServer, namespace: str, procs: list[subprocess.Popen[bytes]],
    tmp_path: Path, browser: Any,
) -> None:
    from selenium.webdriver.common.by import By

    refused = lockworker_process(procs, tmp_path / "refused.log", "dashboard", "--redis",
                                 redis_server.url, "--host", "0.0.0.0", "--port",
                                 str(free_port()), env={"LOCKWORKER_DASHBOARD_TOKEN": ""})
    assert refused.wait(timeout=30) == 2
    assert "refusing to serve 0.0.0.0 without a token" in (tmp_path / "refused.log").read_text()

    client = redis_server.client(decode_responses=True)
    worker = lockworker.Worker(client, namespace=namespace, on_acquired=lambda j: None,
                               handle_signals=False, lock_timeout=2.0)
    assert worker.process("nightly") is lockworker.Outcome.DONE
    worker.close()
    base = dashboard(procs, tmp_path, redis_server.url, "--namespace", namespace, "--host",
                     "0.0.0.0", "--allow-reset", env={"LOCKWORKER_DASHBOARD_TOKEN": "s3cr3t-tok"})
    with pytest.raises(urllib.error.HTTPError) as no_token:
        urllib.request.urlopen(base + "/", timeout=5)
    assert no_token.value.code == 401
    browser.get(base + "/job?" + urllib.parse.urlencode({"ns": namespace, "id": "nightly"}))
    assert "/login" in browser.current_url
    browser.find_element(By.ID, "token").send_keys("s3cr3t-tok")
    browser.find_element(By.ID, "sign-in").click()
    shows(browser, "#job-state", lambda states: states == ["done"])
    browser.find_element(By.ID, "reset").click()  # the form's CSRF token, from its page
    shows(browser, ".said", lambda said: any("pending again" in s for s in said))
    shows(browser, "#job-state", lambda states: states == ["pending"])
    client.close()


def test_the_redis_password_never_shows(
    procs: list[subprocess.Popen[bytes]], tmp_path: Path, browser: Any,
) -> None:
    secret = "pa55-w0rd-XyZ"
    with RedisServer() as server:
        plain = server.client()
        plain.config_set("requirepass", secret)
        plain.close()
        url = f"redis://:{secret}@127.0.0.1:{server.port}/0"
        base = dashboard(procs, tmp_path, url)
        browser.get(base + "/")
        shows(browser, "header .redis", lambda shown: shown == [
            f"redis://:***@127.0.0.1:{server.port}/0"])
        assert secret not in browser.page_source
        server.stop()  # the page now says why Redis cannot be read, without the password
        shows(browser, "#read-error", lambda errors: bool(errors) and bool(errors[0]))
        assert secret not in browser.page_source
    for proc in procs:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
    assert secret not in (tmp_path / "dashboard.log").read_text()
