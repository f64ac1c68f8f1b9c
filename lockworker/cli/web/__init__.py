"""``lockworker dashboard``: one web page that shows what is happening right now.

Leaders and their terms, jobs counted by state per namespace, held jobs with holder
and lease left, handovers as they happen, given-up jobs with their last error and a
job's attempt history; re-drive (reset) buttons only when started with
``--allow-reset``. Needs the ``dashboard`` extra (Starlette, uvicorn, Jinja2).

- :mod:`~lockworker.cli.web.view`: what is read from Redis (as ``lockworker status``
  reads it) and the handovers seen between two reads;
- :mod:`~lockworker.cli.web.guard`: the token, the session cookie, the cross-site
  request checks and the response headers;
- :mod:`~lockworker.cli.web.app`: the pages (Starlette, Jinja2 templates that escape
  every value).

Like the CLI, this is an edge of the package: it imports the library, and nothing in the
library imports it (only the CLI's ``dashboard`` command does).
"""
