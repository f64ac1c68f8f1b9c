"""The ``lockworker`` command: run daemons, submit and inspect jobs, and the demo.

An edge of the package: it may import anything below it and nothing imports it. It is
the only place that configures logging, standard and structlog (:mod:`lockworker.cli.logs`).
"""
