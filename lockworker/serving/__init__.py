"""What the sync side (:mod:`lockworker.daemons`) and the asyncio side
(:mod:`lockworker.aio`) share, with no I/O of its own: the contender loop, the handles
hooks get, the hooks, the settings, deliveries, a backup's held-back decisions and the
rules of ``serve``. Each side drives them with its own I/O: threads and the sync
client, or tasks and ``redis.asyncio``."""
