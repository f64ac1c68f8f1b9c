"""lockworker's benchmarks: uncontended and contended locks, job cycles, failover,
a served stream, jobs in flight at scale and the "Redis in Action" marketplace.

Run them all with one command from the project root::

    python -m benchmarks            # full run (several minutes), rewrites docs/benchmarks.md
    python -m benchmarks --quick    # a smoke run (under a minute), writes nothing
                                    # unless --output is given

Every figure comes from servers this run starts itself on 127.0.0.1
(:class:`lockworker.testing.RedisServer`); no other server is ever touched.
"""
