"""Notifications for the live stream, sent after the transaction commits.

Generation only says *what* changed; it never loads or serialises workload rows. Each
commit that changes workloads sends, per tenant, one small ``changed`` message to the
tenant's channel-layer group (``tenant.<id>``) and to ``tenant.all``:

    {"type": "changed", "tenant": <id>, "cycle": <id or null>, "at": <iso8601>,
     "key": <unique token>, "queues": [<queue id>...], "workloads": [<id>...] or null,
     "count": <number of workloads>}

``workloads`` lists the ids while there are at most ``MAX_IDS`` of them and is null
beyond that (``count`` still says how many), so a message stays under a couple of
kilobytes however long the queues are. ``key`` names the notification: delivery uses it
to share one database read among the connections of a process that saw the same one.

Configuration travels whole, as it is small. Every action that changes a quota, queue,
membership, tenant or node publishes the rows it changed, and the cycle publishes the
quotas whose runtime quota or usage moved; all in one shape (``<kind>`` is one of
``quotas``, ``queues``, ``members``, ``tenants``, ``nodes``):

    {"type": <kind>, "tenant": <id or null>, "cycle": <id or null>, "at": <iso8601>,
     <kind>: [<row>...], "removed": [<key>...]}

A row is what the read models show (``quota_row``, ``queue_row``, ... below), so a
client merges it by key into what it fetched. ``tenant`` null means cluster-wide (a
cluster quota, a node): only the cluster admins' group receives it.

The WebSocket consumers (portal.consumers) pull what each subscription shows from the
database when a notification concerns it; docs/events.md describes the whole path.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import logging
import os
import secrets
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction
from django.utils import timezone

from queueing.choices import QUEUE_SETTINGS

log = logging.getLogger(__name__)

MAX_IDS = 100  # beyond this many changed workloads a notification carries only the count


def group_name(tenant_id: int) -> str:
    return f"tenant.{tenant_id}"


ALL_GROUP = "tenant.all"  # cluster admins watching every tenant


SEND_TIMEOUT_S = 5.0
EXIT_FLUSH_S = 2.0  # the longest a process's exit waits for its queued live events


def iso(value: datetime | None) -> str | None:
    """The one time format of pages, the API and the live stream: ISO 8601 in UTC, "Z"
    (as DRF renders a DateTimeField)."""
    if value is None:
        return None
    text = value.astimezone(UTC).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


class _SenderLoop:
    """One event loop per process, on a thread of its own, for sends from sync code.

    ``async_to_sync`` outside an event loop makes a new loop for every call, and the
    Redis channel layer keeps its connections per loop: every notification of a worker
    would connect to Redis anew. Sends to a cross-process layer go through this
    long-lived loop instead and reuse one connection. (A forked child starts its own.)

    ``submit`` does not wait for the send: the caller -- a cycle's or a sync's commit --
    goes on while the loop sends, one message after another in the order submitted (a
    config message carries whole rows: an older one must not overtake a newer one). A
    notification is a hint to re-read the database, never needed for a decision; waiting
    for its round trips (two commands per group, two groups per tenant) was the largest
    step of a cycle's commit on a loaded machine. At most ``MAX_BACKLOG`` sends wait;
    beyond that (Redis stalled) new ones are dropped and logged, as a failed send was.
    """

    MAX_BACKLOG = 10_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: deque[Callable[[], Awaitable[Any]] | _Outgoing] = deque()
        self._draining = False
        self._pid = 0
        self._dropped = 0

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid() or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="kq-events", daemon=True).start()
                if self._pid == 0:
                    # A process that ends (a command, a worker shutting down) sends what
                    # it queued first; the loop's thread is a daemon, cut at the exit.
                    atexit.register(self.flush, EXIT_FLUSH_S)
                self._loop, self._pid = loop, os.getpid()
                self._waiting = deque()  # a forked child's backlog was its parent's
                self._draining = False
            return self._loop

    def run(self, make: Callable[[], Awaitable[Any]], timeout_s: float) -> None:
        """Send now and wait for it (what ``submit`` queues behind is not waited for)."""

        async def call() -> Any:
            return await make()

        future = asyncio.run_coroutine_threadsafe(call(), self._running_loop())
        try:
            future.result(timeout_s)
        except TimeoutError:
            future.cancel()
            raise

    def submit(self, make: Callable[[], Awaitable[Any]] | _Outgoing, timeout_s: float) -> bool:
        """Queue a send, in order after those submitted before; returns at once. False
        when the backlog is full and it was dropped."""
        loop = self._running_loop()
        with self._lock:
            if len(self._waiting) >= self.MAX_BACKLOG:
                self._dropped += 1
                if self._dropped == 1 or self._dropped % 1000 == 0:
                    log.warning("live stream backlog full: %d event(s) dropped", self._dropped)
                return False
            # Under the lock: the order of submits is the order of sends, across threads.
            self._waiting.append(make)
            if not self._draining:
                # One drain at a time, gone once the backlog is empty (no task is left
                # pending in an idle process).
                self._draining = True
                asyncio.run_coroutine_threadsafe(self._drain(timeout_s), loop)
        return True

    def submit_message(self, layer: Any, tenant_id: int | None, payload: dict) -> bool:
        """Queue one live event for ``layer`` (see ``submit``). Events that wait together
        leave together: ``changed`` ones merged (``merge_changed``), their groups'
        listeners counted in one round trip and the empty groups skipped
        (``group_sends``)."""
        return self.submit(_Outgoing(layer, tenant_id, payload), SEND_TIMEOUT_S)

    async def _drain(self, timeout_s: float) -> None:
        while True:
            with self._lock:
                if not self._waiting:
                    self._draining = False
                    self._idle.notify_all()
                    return
                head = self._waiting[0]
                if isinstance(head, _Outgoing):
                    # Every live event waiting behind it for the same layer goes along.
                    batch = [head]
                    for item in itertools.islice(self._waiting, 1, MAX_BATCH):
                        if not isinstance(item, _Outgoing) or item.layer is not head.layer:
                            break
                        batch.append(item)
            try:
                # asyncio.timeout, not only the caller's: a Redis that stopped answering
                # must not hold the backlog (and an exiting worker's flush) forever.
                async with asyncio.timeout(timeout_s):
                    if isinstance(head, _Outgoing):
                        await group_sends(head.layer, fan_out(merge_changed(batch)))
                    else:
                        await head()
            except Exception:  # the stream is best effort; the database is the truth
                log.exception("could not publish a live event")
            finally:
                with self._lock:
                    for _ in range(len(batch) if isinstance(head, _Outgoing) else 1):
                        self._waiting.popleft()

    def flush(self, timeout_s: float) -> bool:
        """Wait until every submitted send is done (tests; a process about to exit).
        False if some were still waiting after ``timeout_s``."""
        with self._lock:
            return self._idle.wait_for(lambda: not self._draining, timeout_s)


_sender = _SenderLoop()


def _cross_process(layer: Any) -> bool:
    """A layer other processes read (Redis), as opposed to one living in this process's
    own event loop (the in-memory layer of development and tests)."""
    return not type(layer).__module__.startswith("channels.layers")


def send(tenant_id: int | None, payload: dict) -> None:
    """Deliver (to a cross-process layer: queued in order, not waited for; ``flush``).
    Use notify_changes / publish_on_commit from code that writes.

    A tenant's message goes to its group and to the cluster admins'; a cluster-wide one
    (``tenant_id`` None) to the cluster admins' only."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        if _cross_process(layer):
            _sender.submit_message(layer, tenant_id, payload)  # in order, not waited for
        else:
            sends = fan_out([_Outgoing(layer, tenant_id, payload)])

            async def each() -> None:
                for group, message in sends:
                    await layer.group_send(group, message)

            async_to_sync(each)()
    except Exception:  # the stream is best effort; the database is the truth
        log.exception("could not publish a live event for tenant %s", tenant_id)


@dataclass(frozen=True)
class _Outgoing:
    """A live event waiting in the sender loop's backlog."""

    layer: Any
    tenant_id: int | None
    payload: dict


MAX_BATCH = 500  # live events sent together at most (one count of listeners)
_CHANGED_FIELDS = frozenset({"type", "tenant", "cycle", "queues", "workloads", "count"})


def _mergeable(payload: Mapping[str, Any]) -> bool:
    return payload.get("type") == "changed" and payload.keys() >= _CHANGED_FIELDS


def merge_changed(batch: list[_Outgoing]) -> list[_Outgoing]:
    """One ``changed`` notification per tenant and cycle of the events that wait
    together (several commits of one cycle, or of syncs, before the loop sent them):
    queues and workloads united (ids while at most ``MAX_IDS``), at the place of the last
    of them, with its key and time. Every other message keeps its place. A notification is
    a hint to re-read: the merged one makes each listener read once what the separate
    ones would have made it read, in the order the rest arrive."""
    groups: dict[tuple[int | None, Any], list[int]] = {}
    for index, item in enumerate(batch):
        if _mergeable(item.payload):
            groups.setdefault((item.tenant_id, item.payload["cycle"]), []).append(index)
    if all(len(indexes) == 1 for indexes in groups.values()):
        return batch
    out: list[_Outgoing | None] = list(batch)
    for indexes in groups.values():
        if len(indexes) == 1:
            continue
        payloads = [batch[i].payload for i in indexes]
        queues: set[int] = set()
        ids: set[int] | None = set()
        for payload in payloads:
            queues.update(payload["queues"])
            if ids is not None and payload["workloads"] is not None:
                ids.update(payload["workloads"])
            else:
                ids = None
        # Some carried only a count: at most their sum changed.
        count = len(ids) if ids is not None else sum(int(p["count"]) for p in payloads)
        merged = {
            **payloads[-1],
            "queues": sorted(queues),
            "workloads": sorted(ids) if ids is not None and len(ids) <= MAX_IDS else None,
            "count": count,
        }
        for i in indexes[:-1]:
            out[i] = None
        last = batch[indexes[-1]]
        out[indexes[-1]] = _Outgoing(last.layer, last.tenant_id, merged)
    return [item for item in out if item is not None]


def fan_out(batch: Iterable[_Outgoing]) -> list[tuple[str, dict]]:
    """The (group, message) sends of live events: a tenant's to its group and the
    cluster admins', a cluster-wide one to the cluster admins' only."""
    sends: list[tuple[str, dict]] = []
    for item in batch:
        message = {"type": "kq.event", "payload": item.payload}
        if item.tenant_id is not None:
            sends.append((group_name(item.tenant_id), message))
        sends.append((ALL_GROUP, message))
    return sends


def _counts_listeners(layer: Any) -> bool:
    """The Redis channel layer (channels_redis.core), whose groups are sorted sets of
    channel names that one command counts."""
    try:
        from channels_redis.core import RedisChannelLayer
    except ImportError:  # pragma: no cover - a deployment without channels_redis
        return False
    return isinstance(layer, RedisChannelLayer)


async def listened(layer: Any, groups: Iterable[str]) -> set[str] | None:
    """Which of ``groups`` have at least one listener, in one pipelined round trip per
    Redis shard; None when the layer cannot tell (every group is then sent to).

    Counts what ``group_send`` would send to: the members a ``group_expiry`` has not
    yet expired."""
    if not _counts_listeners(layer):
        return None
    by_shard: dict[int, list[str]] = {}
    for group in dict.fromkeys(groups):
        by_shard.setdefault(layer.consistent_hash(group), []).append(group)
    floor = int(time.time()) - int(layer.group_expiry)
    out: set[str] = set()
    for index, names in by_shard.items():
        pipe = layer.connection(index).pipeline(transaction=False)
        for group in names:
            pipe.zcount(layer._group_key(group), f"({floor}", "+inf")
        counts = await pipe.execute()
        out.update(group for group, count in zip(names, counts, strict=True) if count)
    return out


async def group_sends(layer: Any, sends: list[tuple[str, dict]]) -> int:
    """``group_send`` each (group, message) in order, skipping the groups nobody listens
    to (``listened``); returns how many were sent. A group with no listener would
    deliver to nobody anyway: a browser that joins later reads the state when it
    subscribes (docs/events.md, "Delivery rules")."""
    if not sends:
        return 0
    live = await listened(layer, (group for group, _ in sends))
    sent = 0
    for group, message in sends:
        if live is None or group in live:
            await layer.group_send(group, message)
            sent += 1
    return sent


def flush(timeout_s: float = SEND_TIMEOUT_S) -> bool:
    """Wait until the live events sent so far have left this process (``send`` does not
    wait for a cross-process layer). False if some had not after ``timeout_s``."""
    return _sender.flush(timeout_s)


def publish_on_commit(tenant_id: int | None, payload: dict) -> None:
    """Send after the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: send(tenant_id, payload))


# A notification's key: unique across processes (a random prefix per process, drawn
# again in a forked child) and within one (a counter); drawing secure random bytes for
# every message cost the cycle worker ~0.5 % of its main thread.
_key_prefix = secrets.token_hex(6)
_key_counter = itertools.count()


def _keys_after_fork() -> None:
    global _key_prefix, _key_counter
    _key_prefix = secrets.token_hex(6)
    _key_counter = itertools.count()


os.register_at_fork(after_in_child=_keys_after_fork)


def _notification_key() -> str:
    return f"{_key_prefix}-{next(_key_counter):x}"


def changed_message(
    tenant_id: int, queues: Iterable[int], workloads: Iterable[int], *, cycle_id: int | None
) -> dict[str, Any]:
    """The ``changed`` notification of one tenant (see the module docstring)."""
    ids = sorted(set(workloads))
    return {
        "type": "changed",
        "tenant": tenant_id,
        "cycle": cycle_id,
        "at": iso(timezone.now()),
        "key": _notification_key(),
        "queues": sorted(set(queues)),
        "workloads": ids if len(ids) <= MAX_IDS else None,
        "count": len(ids),
    }


@dataclass
class _Batch:
    """What one transaction changed, per tenant, until it commits.

    Every change registers its own on-commit callback (so a change made inside a
    savepoint that rolls back loses its callback with it), and the first callback to run
    sends the whole batch: many changes in one transaction make one message per tenant.
    A change from a savepoint that rolled back may ride along with the others; that only
    makes subscribers re-read rows that did not change.
    """

    cycle_id: int | None = None
    callbacks: list[Any] | None = None  # the connection's on-commit list it was made under
    queues: dict[int, set[int]] = field(default_factory=dict)
    workloads: dict[int, set[int]] = field(default_factory=dict)
    sent: bool = False

    def flush(self) -> None:
        if self.sent:
            return
        self.sent = True
        for tenant_id in sorted(self.queues):
            send(
                tenant_id,
                changed_message(
                    tenant_id,
                    self.queues[tenant_id],
                    self.workloads[tenant_id],
                    cycle_id=self.cycle_id,
                ),
            )


def _batch(cycle_id: int | None) -> _Batch:
    conn = transaction.get_connection()
    batch: _Batch | None = getattr(conn, "_kq_stream_batch", None)
    # A batch no callback can flush any more belonged to a transaction that rolled back.
    # Django replaces its list of callbacks when a transaction ends or a savepoint rolls
    # back, so a batch made under another list is stale even while that list is not
    # empty (the callbacks pending there are someone else's). O(1): cycles notify often.
    stale = (
        batch is None
        or batch.sent
        or not conn.in_atomic_block
        or batch.callbacks is not conn.run_on_commit
    )
    if stale or (batch is not None and cycle_id is not None and batch.cycle_id != cycle_id):
        batch = _Batch(cycle_id=cycle_id, callbacks=conn.run_on_commit)
        conn._kq_stream_batch = batch
    assert batch is not None
    return batch


def notify_changes(
    changes: Iterable[tuple[int, int, int]],
    *,
    cycle_id: int | None = None,
    trees: tuple[dict[str, list[int]], set[str]] | None = None,
    own_world: bool = False,
) -> None:
    """Announce changed workloads, given as ``(tenant id, queue id, workload id)``, once
    the current transaction commits (at once outside one). ``trees``: the changed rows'
    trees as ``trees.roots_and_deciding`` answers, named by the statement that wrote them
    (else read here, one query). ``own_world``: the writer keeps its world itself and the
    change decides nothing (the forecaster's annotations, queueing.forecaster): the live
    stream hears of it, no world is journaled and no cycle woken."""
    items = list(changes)
    if not items:
        return
    batch = _batch(cycle_id)
    for tenant_id, queue_id, workload_id in items:
        batch.queues.setdefault(int(tenant_id), set()).add(int(queue_id))
        batch.workloads.setdefault(int(tenant_id), set()).add(int(workload_id))
    transaction.on_commit(batch.flush)
    if cycle_id is None and not own_world:
        # Not the cycle's own writes (it journals those itself): the trees' worlds hear
        # of them, and what changed may change a decision (docs/realtime.md).
        _journal_and_wake([int(workload_id) for _, _, workload_id in items], trees)


def _journal_and_wake(
    ids: list[int], trees: tuple[dict[str, list[int]], set[str]] | None = None
) -> None:
    """The trees of changed workloads (``trees``, else read in one query): their worlds'
    journal now and again after the commit (world.record_now_and_on_commit), and after
    the commit a wake of the cycles of those trees whose workloads now wait, ended or are being
    evicted. A workload that still holds its quota (admitted, now running) neither frees
    nor asks for any: its tree is journaled, not woken (the sync's ADMITTED -> RUNNING of
    every job would otherwise cost its tree a cycle)."""
    from queueing import trees as quota_trees
    from queueing import wake, world

    if not (wake.enabled() or world.enabled()):
        return
    roots, deciding = quota_trees.roots_and_deciding(ids) if trees is None else trees
    if not roots:
        return
    if world.enabled():
        # The trees only journaled (not woken) are quiet: beat's tick does not take their
        # records for a change whose wake was lost (wake.covered).
        world.record_now_and_on_commit(roots, quiet=set(roots) - deciding)
    if wake.enabled() and deciding:
        chosen = sorted(deciding)
        transaction.on_commit(lambda: wake.wake(chosen, reason="changed"))


# --- configuration messages: the rows actions changed ---------------------------------

CONFIG_KINDS = ("quotas", "queues", "members", "tenants", "nodes")

QUOTA_ROW_FIELDS = (
    "id",
    "name",
    "parent_id",
    "runtime",
    "used",
    "min",
    "max",
    "shared_weight",
    "fair_weight",
    "allow_lent",
    "namespaces",
    "default_queue_id",
    "version",
)
QUEUE_ROW_FIELDS = ("id", "name", *QUEUE_SETTINGS, "version")


def quota_row(quota: Any) -> dict[str, Any]:
    """A quota as the ``quotas`` message carries it."""
    return {name: getattr(quota, name) for name in QUOTA_ROW_FIELDS}


def queue_row(queue: Any) -> dict[str, Any]:
    return {name: getattr(queue, name) for name in QUEUE_ROW_FIELDS}


def member_row(membership: Any) -> dict[str, Any]:
    return {
        "user": membership.user_id,
        "username": membership.user.get_username(),
        "role": membership.role,
    }


def tenant_row(tenant: Any) -> dict[str, Any]:
    return {
        "id": tenant.pk,
        "name": tenant.name,
        "display_name": tenant.display_name,
        "description": tenant.description,
    }


def node_row(node: Any) -> dict[str, Any]:
    return {
        "name": node.name,
        "allocatable": dict(node.allocatable),
        "reserved": dict(node.reserved),
        "labels": dict(node.labels),
        "taints": [dict(t) for t in node.taints],
        "unschedulable": bool(node.unschedulable),
    }


def config_message(
    kind: str,
    tenant_id: int | None,
    rows: Iterable[Mapping[str, Any]] = (),
    *,
    removed: Iterable[Any] = (),
    cycle_id: int | None = None,
) -> dict[str, Any]:
    """The message of changed configuration rows (see the module docstring)."""
    assert kind in CONFIG_KINDS, kind
    return {
        "type": kind,
        "tenant": tenant_id,
        "cycle": cycle_id,
        "at": iso(timezone.now()),
        kind: [dict(row) for row in rows],
        "removed": sorted(removed),
    }
