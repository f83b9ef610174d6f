"""The live stream's reads: what a subscription shows, bounded whatever the queue's length.

``read`` answers one ``portal.delivery`` read with the same functions the queue page
uses (portal.queries), always within one tenant, so a connection can never read another
tenant's rows whatever ids it subscribes to. ``Reads`` shares work among the connections
of this process:

* every connection that needs the same read (same tenant, same queue window, same
  workload ids) after the same notification awaits one database query, so 500 viewers
  of one page cost one query per process, not 500;
* connections in the same state (``Stream.lineage``: same subscription, same view) get
  the same frames for the same notice, so those are worked out -- and encoded to JSON --
  once as well.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from channels.db import database_sync_to_async

from portal import queries
from portal.delivery import (
    Buffer,
    ListsResult,
    Notice,
    Outcome,
    QueueLists,
    Read,
    RowsResult,
    Stream,
    WindowRows,
    stub,
)
from queueing.models import Workload

log = logging.getLogger(__name__)

AROUND = 5  # rows read either side of a window, for the stubs of rows that just left it


def read(item: Read, tenant_id: int) -> ListsResult | RowsResult:
    """One read for one tenant (sync; run it off the event loop)."""
    if isinstance(item, QueueLists):
        pending, holding = queries.queue_totals(item.queue, tenant_id)
        return ListsResult(
            pending=pending,
            holding=holding,
            holding_rows=tuple(queries.holding_rows(item.queue, tenant_id)),
            finished_rows=tuple(queries.finished_rows(item.queue, tenant_id)),
        )
    if isinstance(item, WindowRows):
        # A few rows either side, as stubs: where rows leaving the window usually go.
        start = max(0, item.lo - 1 - AROUND)
        skip, size = item.lo - 1 - start, item.hi - item.lo + 1
        rows = queries.pending_rows(item.queue, start, skip + size + AROUND, tenant_id)
        around = {r["id"]: stub(r) for r in rows[:skip] + rows[skip + size :]}
        inside = rows[skip : skip + size]
        return RowsResult(rows=tuple(inside), around=around)
    return rows_by_id(item.ids, tenant_id)


def rows_by_id(ids: Sequence[int], tenant_id: int) -> RowsResult:
    """The tenant's rows among ``ids`` (others are skipped), and when each last changed."""
    rows: list[dict[str, Any]] = []
    versions: dict[int, str] = {}
    qs = Workload.objects.filter(id__in=list(ids), tenant_id=tenant_id)
    for values in qs.values(*queries.ROW_COLUMNS, "updated_at"):
        rows.append(queries.live_row(values))
        versions[values["id"]] = values["updated_at"].isoformat()
    return RowsResult(rows=tuple(rows), versions=versions)


class Reads:
    """Work shared within this process: reads keyed by (notification, tenant, read), and
    outcomes keyed by ``Stream.share_key``, each with its frames encoded once.

    A result is the database's state some time after the notification named in its key
    committed, so any connection that has seen that notification (and nothing newer) may
    use it: each compares it with what it sent itself. Entries are kept for the ``size``
    most recent keys; a failed one is not kept.

    Reads that wait at the same time go to the database together, in one call off the
    event loop on one connection, instead of one call (and connection checkout) each.
    """

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self.entries: OrderedDict[tuple[Any, ...], asyncio.Task[Any]] = OrderedDict()
        self.texts: OrderedDict[int, tuple[dict[str, Any], str]] = OrderedDict()
        self.queries = 0  # reads that went to the database (tests and benchmarks look)
        self.diffs = 0  # outcomes worked out rather than shared
        self.waiting: list[tuple[Read, int, asyncio.Future[Any]]] = []
        self.reader: asyncio.Task[None] | None = None

    def _shared(self, key: tuple[Any, ...] | None, start: Any) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        task = self.entries.get(key) if key is not None else None
        if task is None or task.get_loop() is not loop or _failed(task):
            task = loop.create_task(start())
            if key is not None:
                self.entries[key] = task
                while len(self.entries) > self.size:
                    self.entries.popitem(last=False)
        elif key is not None:
            self.entries.move_to_end(key)
        # shield: a connection that goes away mid-read must not cancel it for the others
        return asyncio.shield(task)

    async def get(self, key: str | None, tenant_id: int, item: Read) -> Any:
        async def start() -> Any:
            self.queries += 1
            loop = asyncio.get_running_loop()
            done: asyncio.Future[Any] = loop.create_future()
            self.waiting.append((item, tenant_id, done))
            if self.reader is None or self.reader.done() or self.reader.get_loop() is not loop:
                self.reader = loop.create_task(self._read_waiting())
            return await done

        return await self._shared(None if key is None else ("read", key, tenant_id, item), start)

    async def _read_waiting(self) -> None:
        while self.waiting:
            batch, self.waiting = self.waiting, []
            try:
                answers = await database_sync_to_async(_read_each)([(i, t) for i, t, _ in batch])
            except Exception as exc:  # no read of the batch happened: each awaiting one fails
                answers = [(None, exc)] * len(batch)
            for (_, _, done), (result, error) in zip(batch, answers, strict=True):
                if done.done():
                    continue
                if error is not None:
                    done.set_exception(error)
                else:
                    done.set_result(result)

    async def all(self, key: str | None, tenant_id: int, items: Iterable[Read]) -> dict[Read, Any]:
        wanted = list(items)
        found = await asyncio.gather(*(self.get(key, tenant_id, item) for item in wanted))
        return dict(zip(wanted, found, strict=True))

    async def outcome(self, stream: Stream, tenant_id: int, notice: Notice) -> Outcome:
        """The stream's outcome for the notice, shared with every stream in its state."""
        twin = stream.copy()  # what the stream is now, whatever happens to it meanwhile

        async def start() -> Outcome:
            self.diffs += 1
            results = await self.all(notice.key, tenant_id, twin.needs(notice))
            left = twin.left(notice, results)
            if left is not None:
                results.update(await self.all(notice.key, tenant_id, [left]))
            outcome = twin.diff(tenant_id, notice, results)
            for frame in outcome.frames:  # encoded once, here, for every sharer
                self.texts[id(frame)] = (frame, json.dumps(frame))  # holding it keeps its id
                while len(self.texts) > self.size:
                    self.texts.popitem(last=False)
            return outcome

        key = ("outcome", *stream.share_key(tenant_id, notice))
        return await self._shared(key if notice.key is not None else None, start)

    def text(self, frame: dict[str, Any]) -> str:
        """The frame as JSON: a shared outcome's frames were encoded once already."""
        found = self.texts.get(id(frame))
        if found is not None and found[0] is frame:
            return found[1]
        return json.dumps(frame)


def _read_each(
    items: Sequence[tuple[Read, int]],
) -> list[tuple[Any, BaseException | None]]:
    """Several reads in a row on this thread's connection; one failing fails only itself."""
    answers: list[tuple[Any, BaseException | None]] = []
    for item, tenant_id in items:
        try:
            answers.append((read(item, tenant_id), None))
        except Exception as exc:  # handed to whoever awaits this read
            answers.append((None, exc))
    return answers


def _failed(task: asyncio.Task[Any]) -> bool:
    return task.done() and (task.cancelled() or task.exception() is not None)


SHARED = Reads()


async def frames(
    stream: Stream, tenant_id: int, notice: Notice, reads: Reads = SHARED
) -> list[dict[str, Any]]:
    """The frames one connection sends for one tenant's notice (the work shared)."""
    diffed: tuple[dict[str, Any], ...] = ()
    if stream.diffs(notice):
        outcome = await reads.outcome(stream, tenant_id, notice)
        stream.adopt(outcome)
        diffed = outcome.frames
    return stream.wrap(tenant_id, notice, diffed)


def frames_now(stream: Stream, tenant_id: int, notice: Notice) -> list[dict[str, Any]]:
    """The same, synchronously and unshared (tests and tools)."""
    results: dict[Read, Any] = {item: read(item, tenant_id) for item in stream.needs(notice)}
    left = stream.left(notice, results)
    if left is not None:
        results[left] = read(left, tenant_id)
    return stream.frames(tenant_id, notice, results)


def deliver_now(stream: Stream, payloads: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Buffer ``payloads`` and flush them as a connection would (tests and tools)."""
    buffer = Buffer()
    for payload in payloads:
        buffer.add(payload)
    passthrough, notices = buffer.drain()
    out = list(passthrough)
    for tenant_id, notice in notices.items():
        out += frames_now(stream, tenant_id, notice)
    return out
