"""The dashboard's pages: a Starlette application over a :class:`~.view.Collector`.

``/``       leaders, live workers, jobs counted by state per namespace, what the
            workers did per minute over the last hour (a chart per namespace), handovers,
            held jobs and given-up jobs (each list paged: ``?held=N``, ``?gave_up=N``),
            and what the server holds (keys and bytes per namespace by kind);
``/jobs``   every job, filtered by namespace, state and part of the id, paged;
``/job``    one job (``?ns=&id=``): its state, holder, lease and attempt history;
``/reset``, ``/reset-gave-up``   POST only, and only with ``allow_reset``;
``/login``  the token form, when a token is set.

Each page renders its live part alone for ``?fragment=1``: the page's script fetches
that every ``refresh`` seconds and swaps it in, so handovers show without a reload.
Values are escaped by the templates (autoescaping on for every template): job ids,
holders and errors are the users' data.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import urllib.parse
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import QueryParams
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from lockworker import __version__
from lockworker.cli import footprint, schedules, throughput
from lockworker.cli.cells import duration
from lockworker.cli.web import guard
from lockworker.cli.web.jobs import STATES
from lockworker.cli.web.view import Collector
from lockworker.errors import InvalidConfig
from lockworker.model.history import reset_before

PAGE = 50
"""Rows per page of every list."""
SAID = {
    "reset": "The job is pending again.",
    "redriven": "The job is pending again, and was added to its stream again: the workers "
    "serving that stream run it.",
    "stranded": "The job is pending again, but nothing will run it: its payload was not "
    "kept (only a stream's job that gave up keeps it). Submit it again: "
    "lockworker submit STREAM JOB_ID 'PAYLOAD_JSON'.",
    "redriven_all": "The given-up jobs are pending again, each added to its stream again.",
    "stranded_some": "The given-up jobs are pending again; those whose payload was kept "
    "were added to their stream again, the others will not run until submitted again "
    "(lockworker submit STREAM JOB_ID 'PAYLOAD_JSON'; the dashboard's log names each "
    "with its command).",
    "held": "Not reset: a process holds the job now.",
    "absent": "Not reset: Redis knows no such job.",
    "bad": "Not reset: the request did not come from this page (or it has expired); "
    "reload and try again.",
}


@dataclass(frozen=True)
class Page:
    """One page of a list."""

    rows: Sequence[Any]
    number: int
    pages: int
    total: int
    param: str
    """The query parameter that selects the page."""


def paged(rows: Sequence[Any], params: QueryParams, param: str = "page") -> Page:
    """Page ``?param=N`` of ``rows`` (1 if absent or not a number; the last if past it)."""
    pages = max(1, math.ceil(len(rows) / PAGE))
    try:
        number = min(max(1, int(params.get(param, "1"))), pages)
    except ValueError:
        number = 1
    start = (number - 1) * PAGE
    return Page(rows[start : start + PAGE], number, pages, len(rows), param)


def with_query(request: Request, **changes: Any) -> str:
    """This page's path and query with ``changes`` (None removes a parameter)."""
    params = {k: v for k, v in request.query_params.items() if k != "fragment"}
    for key, value in changes.items():
        if value is None:
            params.pop(key, None)
        else:
            params[key] = str(value)
    query = urllib.parse.urlencode(params)
    return request.url.path + (f"?{query}" if query else "")


def job_link(namespace: str, job_id: str) -> str:
    return "/job?" + urllib.parse.urlencode({"ns": namespace, "id": job_id})


def timestamp(ms: int | None) -> str:
    """``2026-11-22 10:04:05.120 UTC`` for a time in milliseconds since the epoch."""
    if ms is None:
        return "-"
    when = datetime.datetime.fromtimestamp(ms / 1000.0, tz=datetime.timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d} UTC"


def templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("lockworker.cli.web", "templates"),
        autoescape=True,  # every template, whatever its name: ids and errors are user data
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(duration=duration, timestamp=timestamp)
    env.globals.update(job_link=job_link, with_query=with_query, STATES=STATES,
                       version=__version__, footprint=footprint, schedules=schedules,
                       throughput=throughput)
    return Jinja2Templates(env=env)


class Dashboard:
    """The pages over ``collector``; ``url`` is shown (already masked)."""

    def __init__(
        self, collector: Collector, *, url: str, token: str | None = None,
        allow_reset: bool = False,
    ) -> None:
        self.collector = collector
        self.url = url
        self.token = token
        self.allow_reset = allow_reset
        self.csrf = guard.Csrf()
        self.templates = templates()

    def render(self, request: Request, page: str, part: str, **context: Any) -> Response:
        """``page`` (or, for ``?fragment=1``, its live ``part`` alone), with what every
        page shows; gives a browser its CSRF cookie with its first page."""
        cookie, new = guard.cookie_of(request)
        view = self.collector.view
        context.update(
            request=request, view=view, url=self.url, allow_reset=self.allow_reset,
            csrf=self.csrf.token(cookie), refresh=self.collector.refresh,
            said=SAID.get(request.query_params.get("said", "")), part=part,
            login=self.token is not None,
        )
        name = part if request.query_params.get("fragment") == "1" else page
        response = self.templates.TemplateResponse(request, name, context)
        if new:
            guard.set_cookie(response, request, guard.CSRF_COOKIE, cookie)
        return response

    def overview(self, request: Request) -> Response:
        view = self.collector.view
        namespace = request.query_params.get("ns") or None
        held = paged(view.select(namespace=namespace, state="held"), request.query_params,
                     "held")
        gave_up = paged(view.select(namespace=namespace, state="gave_up"),
                        request.query_params, "gave_up")
        return self.render(
            request, "index.html", "overview.html", namespace=namespace, held=held,
            gave_up=gave_up, errors=self.collector.last_errors(gave_up.rows),
            handovers=[h for h in self.collector.handovers
                       if namespace is None or h.namespace in (namespace, "leader")][:20],
        )

    def jobs(self, request: Request) -> Response:
        params = request.query_params
        namespace = params.get("ns") or None
        state = params.get("state") if params.get("state") in STATES else None
        query = params.get("q", "")
        rows = paged(self.collector.view.select(namespace=namespace, state=state, query=query),
                     params)
        errors = self.collector.last_errors([r for r in rows.rows if r.state == "gave_up"])
        return self.render(request, "jobs.html", "jobs_list.html", namespace=namespace,
                           state=state, query=query, rows=rows, errors=errors)

    def job(self, request: Request) -> Response:
        namespace, job_id = request.query_params.get("ns", ""), request.query_params.get("id")
        if job_id is None:
            return PlainTextResponse("which job? /job?ns=NAMESPACE&id=JOB_ID", status_code=400)
        try:
            seen = self.collector.inspect(namespace, job_id)
        except InvalidConfig as exc:
            return PlainTextResponse(str(exc), status_code=400)
        records = tuple(getattr(seen, "history", ()) or ()) if seen is not None else ()
        return self.render(request, "job.html", "job_detail.html", namespace=namespace,
                           job_id=job_id, seen=seen, records=records,
                           resets=reset_before(records))

    async def reset(self, request: Request) -> Response:
        form = await self.form(request)
        namespace, job_id = form.get("ns", ""), form.get("id", "")
        back = job_link(namespace, job_id)
        if not self.change_allowed(request, form):
            return self.said(back, "bad", 403)
        try:
            done = await run_in_threadpool(self.collector.reset, namespace, job_id)
        except InvalidConfig as exc:
            return PlainTextResponse(str(exc), status_code=400)
        await run_in_threadpool(self.collector.read)
        if done.redriven:
            return self.said(back, "redriven")
        return self.said(back, "stranded" if done.stranded else done.result.value)

    async def reset_gave_up(self, request: Request) -> Response:
        form = await self.form(request)
        namespace = form.get("ns", "")
        back = "/?" + urllib.parse.urlencode({"ns": namespace}) if namespace else "/"
        if not self.change_allowed(request, form):
            return self.said(back, "bad", 403)
        rows = self.collector.view.select(namespace=namespace or None, state="gave_up")
        stranded = False
        for row in rows:  # one at a time, as `lockworker reset` does: a held job is refused
            done = await run_in_threadpool(
                self.collector.reset, row.namespace, row.id, "gave_up"
            )
            stranded = stranded or done.stranded
        await run_in_threadpool(self.collector.read)
        return self.said(back, "stranded_some" if stranded else "redriven_all")

    @staticmethod
    async def form(request: Request) -> dict[str, str]:
        """A form's fields (``application/x-www-form-urlencoded``, what the pages send)."""
        body = (await request.body()).decode("utf-8", "replace")
        return {k: v[-1] for k, v in urllib.parse.parse_qs(body).items()}

    def change_allowed(self, request: Request, form: dict[str, str]) -> bool:
        return (self.allow_reset and guard.same_origin(request)
                and self.csrf.valid(request, form.get("csrf", "")))

    @staticmethod
    def said(back: str, what: str, status: int = 303) -> Response:
        target = back + ("&" if "?" in back else "?") + f"said={what}"
        if status == 303:
            return RedirectResponse(target, status_code=303)
        return PlainTextResponse(SAID["bad"], status_code=status)

    async def login(self, request: Request) -> Response:
        if self.token is None:
            return RedirectResponse("/", status_code=303)
        wanted = request.query_params.get("next", "/")
        if not wanted.startswith("/") or wanted.startswith("//"):
            wanted = "/"  # only a page of this dashboard, never another site
        failed = False
        if request.method == "POST":
            form = await self.form(request)
            if guard.same_origin(request) and guard.same_secret(
                form.get("token", ""), self.token
            ):
                response = RedirectResponse(wanted, status_code=303)
                guard.set_cookie(response, request, guard.SESSION_COOKIE,
                                 guard.session_value(self.token))
                return response
            failed = True
        return self.templates.TemplateResponse(
            request, "login.html", {"request": request, "failed": failed, "url": self.url,
                                    "login": True},
            status_code=401 if failed else 200,
        )


def create_app(
    collector: Collector, *, url: str, token: str | None = None, allow_reset: bool = False,
    start: bool = True,
) -> Starlette:
    """The ASGI application; with ``start``, the collector reads while it serves."""
    board = Dashboard(collector, url=url, token=token, allow_reset=allow_reset)
    routes = [
        Route("/", board.overview),
        Route("/jobs", board.jobs),
        Route("/job", board.job),
        Route("/login", board.login, methods=["GET", "POST"]),
        Mount("/static", StaticFiles(packages=[("lockworker.cli.web", "static")]),
              name="static"),
    ]
    if allow_reset:
        routes += [Route("/reset", board.reset, methods=["POST"]),
                   Route("/reset-gave-up", board.reset_gave_up, methods=["POST"])]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        if start:
            await run_in_threadpool(collector.start)
        try:
            yield
        finally:
            await run_in_threadpool(collector.stop)

    return Starlette(routes=routes, lifespan=lifespan,
                     middleware=[Middleware(guard.Guard, token=token)])
