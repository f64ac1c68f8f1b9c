"""lockworker's benchmarks: uncontended and contended locks, job cycles, failover,
a served stream, jobs in flight at scale, the "Redis in Action" marketplace, a
cluster, and a stream's failover beside the worker frameworks (RQ, Celery, Dramatiq,
arq, saq, streaq, taskiq-redis and huey, those installed).

Run them all with one command from the project root::

    python -m benchmarks            # full run (several minutes), rewrites docs/benchmarks.md
    python -m benchmarks --quick    # a smoke run (a couple of minutes), writes
                                    # nothing unless --output is given
    python -m benchmarks --only failover
                                    # section 9 alone (a stream's failover, the
                                    # worker frameworks), put into docs/benchmarks.md,
                                    # the other sections' figures kept

Every figure comes from servers this run starts itself on 127.0.0.1
(:class:`lockworker.testing.RedisServer`); no other server is ever touched.
"""
