"""The marketplace experiment of "Redis in Action" (J. Carlson), chapter 6.2.

Sellers ("listers") put items on a market (one sorted set, ``market:``) and buyers
buy the cheapest item listed, each in its own OS process, for a short window:

- **without a lock** (the book's chapter 4 code): ``list_item`` WATCHes the seller's
  inventory, ``purchase_item`` WATCHes the market and the buyer, and each retries its
  MULTI/EXEC when a watched key changed. Every listing changes the market, so buyers
  retry more the more listers there are;
- **with a lock** (the book's chapter 6 code, with ``lockworker.Lock`` in place of the
  book's ``acquire_lock``): both take one coarse lock on the market; a purchase still
  WATCHes the buyer's own hash, as in the book.

"listed" and "bought" count successful listings and purchases; "retries" counts
purchase attempts that a changed watched key made retry; "wait" is the average time of
a purchase call, retries (or lock waits) included. The book's runs lasted 60 s; this
one runs for a few seconds, and the "per 60 s" columns scale the counts linearly.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from multiprocessing.connection import Connection

import redis

import lockworker
from benchmarks.common import quiet_logging
from benchmarks.contended import Pool

SETUPS = ((1, 1), (5, 1), (5, 5))
"""(listers, buyers)."""

BOOK_SECONDS = 60.0
BOOK = {
    # (locked, listers, buyers): (listed, bought, retries, wait), as commonly cited.
    (False, 1, 1): ("145,000", "27,000", "80,000", "14 ms"),
    (False, 5, 1): ("331,000", "<200", "50,000", "150 ms"),
    (False, 5, 5): ("206,000", "<600", "161,000", "498 ms"),
    (True, 1, 1): ("57,000", "27,000", "0", "11 ms"),
    (True, 5, 1): ("118,000", "27,000", "<10", "16 ms"),
    (True, 5, 5): ("67,000", "24,000", "<60", "59 ms"),
}
LOCK_TTL = 10.0
FUNDS = 1 << 50


def _list_item(pipe: redis.client.Pipeline, ns: str, seller: int, item: str) -> bool:
    inventory = f"{ns}:inventory:{seller}"
    while True:
        try:
            pipe.watch(inventory)
            if not pipe.sismember(inventory, item):
                pipe.unwatch()
                return False
            pipe.multi()
            pipe.zadd(f"{ns}:market:", {f"{item}.{seller}": 10})
            pipe.srem(inventory, item)
            pipe.execute()
            return True
        except redis.WatchError:
            continue


def _purchase(
    pipe: redis.client.Pipeline, ns: str, buyer: int, entry: str, *, watch_market: bool,
    end: float,
) -> tuple[bool, int]:
    """Buy ``entry`` ("item.seller") if still listed: (bought, retries).

    Gives up when the window closes (``end``), as the book's gives up after 10 s.
    """
    item, seller = entry.rsplit(".", 1)
    buyer_key, seller_key = f"{ns}:users:{buyer}", f"{ns}:users:{seller}"
    market = f"{ns}:market:"
    retries = 0
    while time.monotonic() < end:
        try:
            if watch_market:
                pipe.watch(market, buyer_key)
            else:
                pipe.watch(buyer_key)
            price = pipe.zscore(market, entry)
            funds = int(pipe.hget(buyer_key, "funds") or 0)
            if price is None or price > funds:
                pipe.unwatch()
                return False, retries
            pipe.multi()
            pipe.hincrby(seller_key, "funds", int(price))
            pipe.hincrby(buyer_key, "funds", -int(price))
            pipe.sadd(f"{ns}:inventory:{buyer}", item)
            pipe.zrem(market, entry)
            pipe.execute()
            return True, retries
        except redis.WatchError:
            retries += 1
    pipe.reset()
    return False, retries


def _session(
    client: redis.Redis, task: tuple[str, str, int, bool, float], pipe_to_parent: Connection
) -> tuple[int, int, int, float, int]:
    """One process's window: (listed, bought, retries, seconds purchasing, purchases).

    ``task``: (namespace, role, this process's number, locked, seconds).
    """
    ns, role, me, locked, seconds = task
    lock = lockworker.Lock(client, f"{ns}-market", ttl=LOCK_TTL) if locked else None
    pipe = client.pipeline(True)
    client.hset(f"{ns}:users:{me}", "funds", FUNDS)
    client.ping()
    pipe_to_parent.send(("ready",))
    start_at = float(pipe_to_parent.recv())
    time.sleep(max(0.0, start_at - time.monotonic()))
    end = start_at + seconds
    listed = bought = retries = calls = 0
    waited = 0.0
    n = 0
    while time.monotonic() < end:
        if role == "lister":
            n += 1
            item = f"i{me}x{n}"
            client.sadd(f"{ns}:inventory:{me}", item)
            if lock is not None:
                lock.acquire()
                try:
                    listed += _list_item(pipe, ns, me, item)
                finally:
                    lock.release()
            else:
                listed += _list_item(pipe, ns, me, item)
            continue
        cheapest = client.zrange(f"{ns}:market:", 0, 0)
        if not cheapest:
            continue
        entry = cheapest[0].decode()
        started = time.monotonic()
        if lock is not None:
            lock.acquire()
            try:
                done, tries = _purchase(pipe, ns, me, entry, watch_market=False, end=end)
            finally:
                lock.release()
        else:
            done, tries = _purchase(pipe, ns, me, entry, watch_market=True, end=end)
        waited += time.monotonic() - started
        calls += 1
        bought += done
        retries += tries
    if lock is not None:
        lock.close()
    return listed, bought, retries, waited, calls


def child_main(ports: list[int], pipe: Connection) -> None:
    """A long-lived process: runs ``(ns, role, me, locked, seconds)`` until ``None``."""
    quiet_logging(to_devnull=True)
    client = redis.Redis(host="127.0.0.1", port=ports[0], socket_timeout=60.0)
    while True:
        message = pipe.recv()
        if message is None:
            break
        try:
            pipe.send(("ok", *_session(client, message, pipe)))
        except Exception as exc:  # reported to the parent, which fails the run
            pipe.send(("error", f"{type(exc).__name__}: {exc}"))
    client.close()


@dataclass
class MarketRun:
    locked: bool
    listers: int
    buyers: int
    seconds: float
    listed: int = 0
    bought: int = 0
    retries: int = 0
    purchase_seconds: float = 0.0
    purchase_calls: int = 0

    def per_minute(self, count: int) -> float:
        return count * BOOK_SECONDS / self.seconds

    @property
    def wait_ms(self) -> float:
        calls = self.purchase_calls
        return self.purchase_seconds / calls * 1000 if calls else float("nan")

    @property
    def book(self) -> tuple[str, str, str, str]:
        return BOOK[(self.locked, self.listers, self.buyers)]


def _run_one(pool: Pool, locked: bool, listers: int, buyers: int, seconds: float) -> MarketRun:
    ns = f"bench-market-{uuid.uuid4().hex[:8]}"
    roles = ["lister"] * listers + ["buyer"] * buyers
    pipes = pool.pipes[: len(roles)]
    for me, (pipe, role) in enumerate(zip(pipes, roles, strict=True)):
        pipe.send((ns, role, me, locked, seconds))
    for pipe in pipes:
        if not pipe.poll(60) or pipe.recv()[0] != "ready":
            raise RuntimeError("a marketplace process did not get ready")
    start_at = time.monotonic() + 0.05
    for pipe in pipes:
        pipe.send(start_at)
    result = MarketRun(locked, listers, buyers, seconds)
    for pipe in pipes:
        if not pipe.poll(60 + seconds * 10):
            raise RuntimeError("a marketplace process did not finish")
        reply = pipe.recv()
        if reply[0] != "ok":
            raise RuntimeError(f"marketplace: {reply[1]}")
        _, listed, bought, retries, waited, calls = reply
        result.purchase_calls += calls
        result.listed += listed
        result.bought += bought
        result.retries += retries
        result.purchase_seconds += waited
    return result


def run(port: int, seconds: float) -> list[MarketRun]:
    pool = Pool([port], max(listers + buyers for listers, buyers in SETUPS), child_main)
    try:
        return [
            _run_one(pool, locked, listers, buyers, seconds)
            for locked in (False, True)
            for listers, buyers in SETUPS
        ]
    finally:
        pool.close()
