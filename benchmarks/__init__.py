"""lockworker's benchmarks: job cycle, handover after a failure, takeover after SIGKILL.

Run them all with one command from the project root::

    python -m benchmarks            # full run (a few minutes), rewrites docs/benchmarks.md
    python -m benchmarks --quick    # a smoke run of a few seconds, writes nothing

Every figure comes from servers this run starts itself on 127.0.0.1
(:class:`lockworker.testing.RedisServer`); no other server is ever touched.
"""
