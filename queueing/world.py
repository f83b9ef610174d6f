"""The world of a quota tree, kept in memory by the process that cycles it.

Kueue's scheduler keeps a cache and a queue manager, fed by watch events, and its cycle
reads those, never the API server. Here the database stays the durable record and each
cycle process keeps, per tree, the live workloads (waiting and holding) as rows in
memory, brought up to date incrementally from the product's own change journal:

- every commit that changes workloads appends their ids to the journal of their tree
  (``record``: the cycle's own apply, and, through ``events.notify_changes``, every
  action and the sync, which also reflect what the cluster's watch events did);
- before a cycle, ``TreeWorld.refresh`` reads the ids appended since its cursor and
  re-reads exactly those rows (one query); a cycle never reads the whole tree again.

The journal is a Redis stream per tree (``kq:journal:<root>``, capped), each world
keeping its own cursor, so several processes can keep worlds of one tree; without Redis
(tests, one process) it is a list in the process. A world rebuilds from the database
(one query of the tree's live rows) when it starts, when its cursor fell off the capped
stream or the stream is gone (a Redis restart), on a full cycle (the periodic
reconciliation; state.full_cycle_due), when the tree's quotas changed, and after a
cycle lost its lease or met conflicts (its view was stale). Whatever a world misses in
between costs at most a late decision, never a wrong one: apply's conditional updates
and the placement lock decide against the database.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Collection, Iterable, Mapping
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from queueing.choices import HOLDING_PHASES, WAITING_PHASES, Phase
from queueing.engine.aging import aged_cutoff
from queueing.engine.types import WorkloadSpec
from queueing.queueorder import QueueOrder, add_demand, charge, row_order_key

log = logging.getLogger(__name__)

LIVE = frozenset((*WAITING_PHASES, *HOLDING_PHASES))
MAXLEN = 100_000  # journal entries kept per tree (each a commit's ids)
Cursor = str  # a stream id ("<ms>-<seq>"); "0-0" before the first entry
#: What ``Journal.since`` answers: (a new cursor, the ids, the reader's own, the unsettled).
Since = tuple[Cursor, set[int] | None, set[int], set[int]]


# --- the journal -----------------------------------------------------------------------


class Journal(Protocol):
    def append(
        self,
        changes: Mapping[str, Iterable[int]],
        *,
        by: str = "",
        tx: str = "",
        done: bool = False,
        quiet: Collection[str] = (),
    ) -> None:
        """Record changed workload ids per tree root. ``by``: the token of the world
        whose own cycle wrote these changes (see ``TreeWorld.refresh``). ``tx``: names
        the writing transaction, on its record made inside it and on the one made after
        its commit (``done``); a record with ``done`` names committed rows. ``quiet``:
        the roots whose changes here wake no cycle (jobs that merely started): beat's
        tick does not count them as a change a lost wake may have left undone."""
        ...

    def head(self, root: str) -> Cursor:
        """A cursor after everything recorded so far."""
        ...

    def changed_since(self, root: str, cursor: Cursor) -> bool:
        """Whether anything but a cycle's own writes (``by`` set) and quiet changes was
        recorded after ``cursor``; True when that cannot be told (trimmed past it, or
        lost)."""
        ...

    def since(
        self, root: str, cursor: Cursor, *, reader: str = ""
    ) -> tuple[Cursor, set[int] | None, set[int], set[int]]:
        """(a new cursor, the ids recorded after ``cursor``, those of them that
        ``reader`` wrote itself, the unsettled: ids of records made inside a transaction
        whose record after the commit is not among those read); None: some were lost."""
        ...

    def since_many(self, reads: Mapping[str, tuple[Cursor, str]]) -> dict[str, Since]:
        """``since`` of several trees at once (root -> (cursor, reader)): one read of the
        journal for a pass's trees (``PassReads.read_journal``)."""
        ...


def _seq(cursor: Cursor) -> tuple[int, int]:
    ms, _, seq = cursor.partition("-")
    return int(ms), int(seq or 0)


class _Read:
    """What a reader makes of the journal's entries after its cursor, in order: the ids,
    its own (``by`` = the reader), and the unsettled -- ids of a record made inside a
    transaction (``tx``, not ``done``) whose record after the commit is not among the
    entries read. A row read now may predate such a commit and is read again at the next
    refresh; one whose commit was recorded before this read is read once."""

    def __init__(self, reader: str) -> None:
        self.reader = reader
        self.ids: set[int] = set()
        self.own: set[int] = set()
        self.open: dict[str, set[int]] = {}  # tx -> ids, its commit not yet recorded
        self.loose: set[int] = set()  # records made inside a transaction with no tx

    def entry(self, text: str, by: str, tx: str, done: bool) -> None:
        got = {int(i) for i in text.split(",") if i}
        self.add(got, by, tx, done)

    def add(self, got: Iterable[int], by: str, tx: str, done: bool) -> None:
        own = bool(self.reader) and by == self.reader
        (self.own if own else self.ids).update(got)
        if own:
            return
        if done:
            self.open.pop(tx, None)  # committed before this read (or autocommitted)
        elif tx:
            self.open.setdefault(tx, set()).update(got)
        else:
            self.loose.update(got)

    def result(self) -> tuple[set[int], set[int], set[int]]:
        unsettled = set(self.loose)
        for ids in self.open.values():
            unsettled |= ids
        return self.ids, self.own - self.ids, unsettled


class RedisJournal:
    """A capped Redis stream per tree; each reader keeps its own cursor."""

    BATCH = 5000  # entries read per round trip

    def __init__(self, url: str) -> None:
        import redis

        self.client: Any = redis.Redis.from_url(url, socket_timeout=5.0, decode_responses=True)

    @staticmethod
    def key(root: str) -> str:
        return f"kq:journal:{root}"

    def append(
        self,
        changes: Mapping[str, Iterable[int]],
        *,
        by: str = "",
        tx: str = "",
        done: bool = False,
        quiet: Collection[str] = (),
    ) -> None:
        pipe = self.client.pipeline(transaction=False)
        for root, ids in changes.items():
            text = ",".join(str(i) for i in sorted(set(ids)))
            if text:
                fields = {"ids": text}
                if by:
                    fields["by"] = by
                if root in quiet:
                    fields["q"] = "1"
                if tx:
                    fields["tx"] = tx
                if done:
                    fields["done"] = "1"
                pipe.xadd(self.key(root), fields, maxlen=MAXLEN, approximate=True)
        pipe.execute()

    def head(self, root: str) -> Cursor:
        last = self.client.xrevrange(self.key(root), count=1)
        return str(last[0][0]) if last else "0-0"

    def changed_since(self, root: str, cursor: Cursor) -> bool:
        """Whether anything but a cycle's own writes was recorded after ``cursor`` (True
        when the stream cannot tell: trimmed past it, or gone)."""
        key = self.key(root)
        first = self.client.xrange(key, count=1)
        if not first or (cursor != "0-0" and _seq(str(first[0][0])) > _seq(cursor)):
            return cursor != "0-0" or bool(first)
        last = cursor
        while True:  # most often the first batch answers
            batch = self.client.xrange(key, min=f"({last}", count=200)
            if any(not fields.get("by") and not fields.get("q") for _, fields in batch):
                return True
            if len(batch) < 200:
                return False
            last = str(batch[-1][0])

    def since(
        self, root: str, cursor: Cursor, *, reader: str = ""
    ) -> tuple[Cursor, set[int] | None, set[int], set[int]]:
        return self.since_many({root: (cursor, reader)})[root]

    def since_many(self, reads: Mapping[str, tuple[Cursor, str]]) -> dict[str, Since]:
        # One round trip for every tree: each stream's first entry (was our cursor
        # trimmed away?) and the entries after the cursor, read atomically (MULTI); more
        # only past BATCH, per tree.
        chosen = list(reads.items())
        if not chosen:
            return {}
        pipe = self.client.pipeline(transaction=True)
        for root, (cursor, _) in chosen:
            key = self.key(root)
            pipe.xrange(key, count=1)
            pipe.xrange(key, min=f"({cursor}" if cursor != "0-0" else "-", count=self.BATCH)
        answers = pipe.execute()
        out: dict[str, Since] = {}
        for i, (root, (cursor, reader)) in enumerate(chosen):
            out[root] = self._since(root, cursor, reader, answers[2 * i], answers[2 * i + 1])
        return out

    def _since(self, root: str, cursor: Cursor, reader: str, first: Any, batch: Any) -> Since:
        if not first:
            # Nothing recorded, ever, or the stream is gone (a Redis restart): only the
            # first is safe to believe.
            return cursor, (set() if cursor == "0-0" else None), set(), set()
        if cursor != "0-0" and _seq(str(first[0][0])) > _seq(cursor):
            return cursor, None, set(), set()  # trimmed past our cursor
        read = _Read(reader)
        last = cursor
        while batch:
            for entry_id, fields in batch:
                last = str(entry_id)
                read.entry(
                    str(fields["ids"]),
                    fields.get("by", ""),
                    fields.get("tx", ""),
                    fields.get("done") == "1",
                )
            if len(batch) < self.BATCH:
                break
            batch = self.client.xrange(self.key(root), min=f"({last}", count=self.BATCH)
        return (last, *read.result())


class LocalJournal:
    """The journal of one process (no Redis): the same semantics, in lists. A cursor is
    "<seq>-<generation>"; ``reset`` starts a new generation (as a Redis restart would
    lose the streams), which every older cursor notices."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # (seq, ids, by, tx, done, quiet) per root
        self.entries: dict[str, list[tuple[int, frozenset[int], str, str, bool, bool]]] = (
            defaultdict(list)
        )
        self.dropped: dict[str, int] = {}  # root -> the last seq trimmed away
        self.seq = 0
        self.generation = 1

    def append(
        self,
        changes: Mapping[str, Iterable[int]],
        *,
        by: str = "",
        tx: str = "",
        done: bool = False,
        quiet: Collection[str] = (),
    ) -> None:
        with self.lock:
            for root, ids in changes.items():
                self.seq += 1
                entries = self.entries[root]
                entries.append((self.seq, frozenset(ids), by, tx, done, root in quiet))
                if len(entries) > MAXLEN:
                    cut = len(entries) - MAXLEN
                    self.dropped[root] = entries[cut - 1][0]
                    del entries[:cut]

    def head(self, root: str) -> Cursor:
        with self.lock:
            return f"{self.seq}-{self.generation}"

    def changed_since(self, root: str, cursor: Cursor) -> bool:
        after, generation = _seq(cursor)
        with self.lock:
            if generation != self.generation or after < self.dropped.get(root, 0):
                return True
            return any(
                seq > after and not by and not quiet
                for seq, _, by, _, _, quiet in self.entries.get(root, ())
            )

    def since(
        self, root: str, cursor: Cursor, *, reader: str = ""
    ) -> tuple[Cursor, set[int] | None, set[int], set[int]]:
        after, generation = _seq(cursor)
        with self.lock:
            if generation != self.generation or after < self.dropped.get(root, 0):
                return cursor, None, set(), set()
            read = _Read(reader)
            for seq, changed, by, tx, done, _ in self.entries.get(root, ()):
                if seq > after:
                    read.add(changed, by, tx, done)
            return (f"{self.seq}-{self.generation}", *read.result())

    def since_many(self, reads: Mapping[str, tuple[Cursor, str]]) -> dict[str, Since]:
        return {
            root: self.since(root, cursor, reader=reader)
            for root, (cursor, reader) in reads.items()
        }

    def reset(self) -> None:
        """Forget everything (tests: as if Redis restarted)."""
        with self.lock:
            self.entries.clear()
            self.dropped.clear()
            self.generation += 1


_journal: Journal | None = None
_journal_lock = threading.Lock()


def journal() -> Journal:
    global _journal
    with _journal_lock:
        if _journal is None:
            _journal = RedisJournal(settings.REDIS_URL) if settings.REDIS_URL else LocalJournal()
        return _journal


def set_journal(value: Journal | None) -> None:
    global _journal
    with _journal_lock:
        _journal = value


def record(
    changes: Mapping[str, Iterable[int]],
    *,
    by: str = "",
    tx: str = "",
    done: bool = True,
    quiet: Collection[str] = (),
) -> None:
    """Append to the journal now (call after the commit: ``done``). A failure only costs
    the worlds a rebuild: they find their cursor fell behind, or see the rows at the next
    full cycle. ``by``: see ``record_cycle``; ``tx``: ``record_now_and_on_commit``;
    ``quiet``: see ``Journal.append``."""
    changes = {root: list(ids) for root, ids in changes.items() if ids}
    if not changes:
        return
    try:
        journal().append(changes, by=by, tx=tx, done=done, quiet=quiet)
    except Exception:
        log.exception("could not record changes in the journal; worlds catch up later")
        _invalidate_all()


def record_now_and_on_commit(
    changes: Mapping[str, Iterable[int]], *, by: str = "", quiet: Collection[str] = ()
) -> None:
    """Record inside the writing transaction and again once it commits. The first is
    what a reader on the same connection needs (it sees the uncommitted rows); the second
    is what every other reader needs (one that read the ids before the commit saw the old
    rows, and reads them again). An id too many only costs a row read again. ``quiet``:
    the roots whose changes wake no cycle (``Journal.append``)."""
    chosen = {root: list(ids) for root, ids in changes.items() if ids}
    if not chosen:
        return
    hushed = frozenset(quiet)
    if not transaction.get_connection().in_atomic_block:
        record(chosen, by=by, quiet=hushed)  # autocommit: the rows are committed already
        return
    # Both records name the transaction: a reader that finds the second among the
    # entries it reads knows the rows it reads next are committed, and reads them once.
    tx = uuid.uuid4().hex[:16]
    record(chosen, by=by, tx=tx, done=False, quiet=hushed)
    transaction.on_commit(lambda: record(chosen, by=by, tx=tx, done=True, quiet=hushed))


#: The annotation fields a world keeps (state.snapshot.WORKLOAD_FIELDS): what a cycle's
#: annotation step writes of them, its own world takes in place (``record_cycle``).
ANNOTATION_FIELDS = ("position", "global_position", "eta_p50", "eta_p90", "reason")


class Shown(NamedTuple):
    """What a waiting row shows beside ``ANNOTATION_FIELDS``, as this process last wrote
    (or read) it: the engine's explanation (compared as the tuple it is, so an unchanged
    one is neither rebuilt as a dict nor read back), the stored ETA document
    (``Workload.eta``) and whether its first forecast is recorded. Kept by the world for
    as long as the row is not re-read (anyone else's write journals the row, which drops
    this), so a forecasting cycle reads none of the JSON it compares against."""

    explanation: Any  # engine.types.Explanation | None
    eta: Mapping[str, Any] | None
    first: bool


def record_cycle(
    root: str,
    moved: Iterable[int],
    annotated: Iterable[tuple[int, Mapping[str, Any]]],
    tree: TreeWorld | None,
    *,
    journal: bool = True,
) -> None:
    """Journal what a cycle's apply wrote (call inside its transaction).

    ``moved``: workloads whose phase or placement changed: every world of the tree re-reads
    them. ``annotated``: the waiting workloads whose position, ETA or reason changed, with
    the new values. The world the cycle read (``tree``) takes those in place once the
    transaction commits and skips them in the journal; every other world (another
    process's, beat's) re-reads them as before. The world's own moves are read once,
    not twice: nobody can commit them after the world's next refresh. ``journal=False``
    (the forecaster's annotations, queueing.forecaster): nothing is journaled, the world
    that wrote them only takes them in place."""
    moved = set(moved)
    notes = [(wid, fields) for wid, fields in annotated if wid not in moved]
    if tree is None:
        if journal:
            record_now_and_on_commit({root: [*moved, *(wid for wid, _ in notes)]})
        return
    if journal:
        record_now_and_on_commit({root: [*moved, *(wid for wid, _ in notes)]}, by=tree.token)
    if notes and transaction.get_connection().in_atomic_block:
        cursor = tree.cursor
        transaction.on_commit(lambda: tree.annotate(notes, cursor))


# --- the world of a tree ----------------------------------------------------------------


_compiled = threading.local()
_IN = '"queueing_workload"."id" IN (%s)'


def _rows_by_id(ids: Collection[int]) -> list[dict[str, Any]]:
    """The rows (``WORLD_FIELDS``) of workloads ``ids``, as
    ``Workload.objects.filter(id__in=ids).values(*WORLD_FIELDS)`` reads them (the same
    statement and the same conversions), without building and compiling that query
    again for every refresh (about half a millisecond of the cycle's CPU each time):
    compiled once per thread's connection, only the ids' placeholders are written."""
    from django.db import DEFAULT_DB_ALIAS, connections

    from queueing.models import Workload
    from queueing.state.snapshot import WORLD_FIELDS

    conn = connections[DEFAULT_DB_ALIAS]
    made = getattr(_compiled, "reread", None)
    if made is None or made[0] is not conn:
        query = Workload.objects.filter(id__in=[0]).values(*WORLD_FIELDS)
        compiler = query.query.get_compiler(DEFAULT_DB_ALIAS)
        sql, _ = compiler.as_sql()
        if sql.count(_IN) != 1:
            # Another Django writes it otherwise: the ORM's own query, built each time.
            log.warning("the world's re-read is not compiled once: unexpected SQL %s", sql)
            made = _compiled.reread = (conn, None, "", "", [])
        else:
            selected = query.query.selected  # the names as ValuesIterable takes them
            names = list(selected) if selected else list(query.query.values_select)
            before, after = sql.split(_IN)
            made = _compiled.reread = (conn, compiler, before + _IN[:-3], ")" + after, names)
    _, compiler, before, after, names = made
    if compiler is None:
        return list(Workload.objects.filter(id__in=list(ids)).values(*WORLD_FIELDS))
    listed = list(ids)
    with conn.cursor() as cursor:
        cursor.execute(before + ", ".join(["%s"] * len(listed)) + after, listed)
        fetched = cursor.fetchall()
    return [dict(zip(names, row, strict=True)) for row in compiler.results_iter(results=[fetched])]


#: How many arrivals a tree's world remembers (``TreeWorld.arrived``).
ARRIVALS_KEPT = 2_000


class TreeWorld:
    """The live workloads of one tree, as rows (the fields build_snapshot reads), with
    each queue's waiting rows kept in the engine's order."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.rows: dict[int, dict[str, Any]] = {}
        self.holding: set[int] = set()
        self.queues: dict[int, QueueOrder] = defaultdict(QueueOrder)
        self.cursor: Cursor | None = None
        self.again: set[int] = set()  # ids to read once more at the next refresh
        self.annotated: set[int] = set()  # rows whose annotations were taken in place
        self.quota_ids: frozenset[int] = frozenset()
        self.rebuilt_at = 0.0
        self.rebuilds = 0
        #: Marks the journal's entries this world's own cycles wrote (``record_cycle``).
        self.token = uuid.uuid4().hex
        self.reread = 0  # rows re-read by the last refresh
        #: Engine specs of unchanged rows, reused between cycles (state.snapshot).
        self.specs: dict[int, tuple[Mapping[str, Any], WorkloadSpec]] = {}
        #: What the waiting rows show beside their row's fields (``Shown``), by id.
        self.shown: dict[int, Shown] = {}
        #: The rows of the workloads that arrived since this process first built the
        #: world, the latest ARRIVALS_KEPT (kept across rebuilds): the forecast replays
        #: work like them (``forecasting.recent_arrivals``) without reading the tree.
        self.arrived: deque[dict[str, Any]] = deque()
        self.arrived_ids: set[int] = set()
        #: When this process first built the world: it has seen arrivals since then
        #: only, so their rate is counted over no longer (a worker just started knew a
        #: minute of them, read as the rate of the tree's whole history window).
        self.watching_since: datetime | None = None
        #: When the last refresh or rebuild began reading (wall clock): a row queued
        #: after it that a rebuild finds new to the world arrived in between.
        self.read_at: datetime | None = None

    def invalidate(self) -> None:
        self.cursor = None

    def due_rebuild(self) -> bool:
        """Whether the next refresh rebuilds whatever the quotas (no cursor, or stale)."""
        stale = time.monotonic() - self.rebuilt_at > settings.KQ_WORLD_REBUILD_S
        return stale or self.cursor is None

    def refresh(self, quota_ids: Iterable[int], ahead: tuple[Cursor, Since] | None = None) -> None:
        """Bring the rows up to date: the journal's ids since the cursor, or a rebuild
        (at least every KQ_WORLD_REBUILD_S: the periodic reconciliation). ``ahead``: the
        journal read after the cursor it names (a pass's one read for all its trees,
        made after their leases were taken and before any of their rows were read):
        used when that is still this world's cursor, else the journal is read here."""
        wanted = frozenset(quota_ids)
        stale = time.monotonic() - self.rebuilt_at > settings.KQ_WORLD_REBUILD_S
        if stale or self.cursor is None or wanted != self.quota_ids:
            self._rebuild(wanted)
            return
        self.read_at = timezone.now()
        if ahead is not None and ahead[0] == self.cursor:
            cursor, ids, own, unsettled = ahead[1]
        else:
            cursor, ids, own, unsettled = journal().since(self.root, self.cursor, reader=self.token)
        if ids is None:
            self._rebuild(wanted)
            return
        self.cursor = cursor
        # Ids recorded inside a transaction may be read before it commits (the old row);
        # the record after the commit normally follows, but not from a writer killed in
        # between. So an id is read again at the next refresh unless its transaction's
        # record after the commit is among those read now (``unsettled``: the sync's
        # moves, committed before the cycles that follow it, are read once). This
        # world's own cycles committed before this refresh (or it was invalidated): once
        # is enough, and the annotations they wrote it took in place (``annotate``).
        again, self.again = self.again, set(unsettled)
        ids |= again
        ids |= own - self.annotated
        self.annotated = set()
        self.reread = len(ids)
        if ids:
            self._reread(ids)

    def annotate(
        self, notes: Iterable[tuple[int, Mapping[str, Any]]], cursor: Cursor | None
    ) -> None:
        """After the commit of a cycle that read this world: the annotations it wrote, in
        place (the journal's records of them are this world's own, which it skips). Only
        if no refresh or rebuild came between (``cursor``), and only for rows still
        waiting (the write was guarded so)."""
        if cursor is None or cursor != self.cursor:
            return
        for workload_id, fields in notes:
            row = self.rows.get(workload_id)
            if row is None or row["phase"] not in WAITING_PHASES:
                continue
            for name in ANNOTATION_FIELDS:
                if name in fields:
                    row[name] = fields[name]
            shown = fields.get("shown")
            if isinstance(shown, Shown):
                self.shown[workload_id] = shown
            else:
                self.shown.pop(workload_id, None)
            self.annotated.add(workload_id)

    def _rebuild(self, quota_ids: frozenset[int]) -> None:
        from queueing.models import Workload
        from queueing.state.snapshot import WORLD_FIELDS

        # The cursor first: what commits during the load is read again next time.
        cursor = journal().head(self.root)
        previous, self.read_at = self.read_at, timezone.now()
        known = set(self.rows)
        rows = Workload.objects.filter(quota_id__in=list(quota_ids), phase__in=list(LIVE)).values(
            *WORLD_FIELDS
        )
        self.rows = {}
        self.again = set()
        self.annotated = set()
        self.holding = set()
        self.queues = defaultdict(QueueOrder)
        self.specs = {}
        self.shown = {}
        for row in rows:
            self._put(row)
            # Queued since the last read and new to the world: an arrival the journal
            # would have named had there been no rebuild (every KQ_WORLD_REBUILD_S; the
            # forecaster's world missed about a tenth of the demo's arrivals so).
            if (
                previous is not None
                and row["id"] not in known
                and row["id"] not in self.arrived_ids
                and row["queue_order_at"] > previous
            ):
                self._arrived(row)
        self.quota_ids = quota_ids
        self.cursor = cursor
        if self.watching_since is None:
            self.watching_since = self.read_at  # the first read
        self.rebuilt_at = time.monotonic()
        self.rebuilds += 1
        self.reread = len(self.rows)

    def _reread(self, ids: set[int]) -> None:
        found = {row["id"]: row for row in _rows_by_id(ids)}
        for workload_id in ids:
            known = workload_id in self.rows
            self._drop(workload_id)
            row = found.get(workload_id)
            if row is not None and row["phase"] in LIVE and row["quota_id"] in self.quota_ids:
                self._put(row)
                if not known and workload_id not in self.arrived_ids:
                    self._arrived(row)

    def _arrived(self, row: dict[str, Any]) -> None:
        self.arrived.append(row)
        self.arrived_ids.add(row["id"])
        while len(self.arrived) > ARRIVALS_KEPT:
            self.arrived_ids.discard(self.arrived.popleft()["id"])

    def _put(self, row: dict[str, Any]) -> None:
        self.rows[row["id"]] = row
        if row["phase"] in HOLDING_PHASES:
            self.holding.add(row["id"])
        else:
            self.queues[row["queue_id"]].add(row)

    def _drop(self, workload_id: int) -> None:
        old = self.rows.pop(workload_id, None)
        self.specs.pop(workload_id, None)
        self.shown.pop(workload_id, None)
        if old is None:
            return
        if old["phase"] in HOLDING_PHASES:
            self.holding.discard(workload_id)
        else:
            self.queues[old["queue_id"]].remove(old)

    def select(
        self,
        head: int | None,
        now: datetime,
        aging_bounds: Mapping[int, float | None] | None = None,
    ) -> tuple[dict[int, dict[str, Any]], dict[int, dict[str, int]], int]:
        """What build_snapshot lists: (rows, unlisted demand per quota id, unlisted count).

        ``head`` None: every live row. Otherwise the holding rows and the first ``head``
        competing rows of each queue in the engine's queue order
        (:func:`queueing.engine.aging.order_key`: the aged first, in the order they
        queued, then priority, queue-order time, id; ``aging_bounds``: each queue's
        ``aging_bound_s`` by queue id, a queue missing from it has aging off); the other
        competing rows (Pending, or Backoff that is due) are counted as demand. Walks
        only each queue's front, its aged rows and its Backoff rows."""
        if head is None:
            return dict(self.rows), {}, 0
        rows = self.rows
        listed = {workload_id: rows[workload_id] for workload_id in self.holding}
        demand: dict[int, dict[str, int]] = {}
        unlisted = 0
        bounds = aging_bounds or {}
        at = now.timestamp()

        def competing(row: Mapping[str, Any]) -> bool:
            return (
                row["phase"] != Phase.BACKOFF
                or row["requeue_at"] is None
                or row["requeue_at"] <= now
            )

        for queue_id, order in self.queues.items():
            bound = bounds.get(queue_id)
            cutoff = aged_cutoff(bound, at)
            if not order.backoff and (not order.fifo or order.fifo[0][0] > cutoff):
                # Every row Pending and none aged: the front is the first ``head`` by
                # priority, the same as below, kept while the queue does not change.
                front, charged = order.plain_front(head)
                for _, _, workload_id in front:
                    listed[workload_id] = rows[workload_id]
                add_demand(demand, order.demand, 1)
                add_demand(demand, charged, -1)
                unlisted += order.pending - len(front)
                continue
            # Candidates: the first ``head`` aged rows in the order they queued, and the
            # first ``head`` by priority. The queue's first ``head`` in the engine's
            # order are among them (the aged lead it; if fewer than ``head`` are aged,
            # the priority walk holds the rest), and are drawn by the engine's key.
            cands: dict[int, dict[str, Any]] = {}
            if cutoff != -math.inf:
                for queued_at, workload_id in order.fifo:
                    if len(cands) >= head or queued_at > cutoff:
                        break
                    row = rows[workload_id]
                    if competing(row):
                        cands[workload_id] = row
            aged = bool(cands)
            taken = 0
            for _, _, workload_id in order.keys:
                if taken >= head:
                    break
                row = rows[workload_id]
                if competing(row):
                    cands[workload_id] = row
                    taken += 1
            # With none aged the engine's key is the priority index's own order.
            first = list(cands.values())
            if aged:
                first = sorted(first, key=row_order_key(bound, at))[:head]
            listed_pending: list[dict[str, Any]] = []
            for row in first:
                listed[row["id"]] = row
                if row["phase"] != Phase.BACKOFF:
                    listed_pending.append(row)
            # Unlisted demand: every Pending row's request, less the listed ones', plus
            # the due Backoff rows left out.
            add_demand(demand, order.demand, 1)
            for row in listed_pending:
                charge(demand, row, -1)
            unlisted += order.pending - len(listed_pending)
            for workload_id in order.backoff:
                row = rows[workload_id]
                due = row["requeue_at"] is None or row["requeue_at"] <= now
                if due and workload_id not in listed:
                    unlisted += 1
                    charge(demand, row, 1)
        demand = {
            quota_id: {r: a for r, a in amounts.items() if a}
            for quota_id, amounts in demand.items()
        }
        return listed, {q: a for q, a in demand.items() if a}, unlisted


_worlds: dict[str, TreeWorld] = {}
#: Per tree root, what this process remembers of it beside its world (state.quotas: the
#: time of the last usage sample); forgotten with the worlds.
notes: defaultdict[str, dict[str, Any]] = defaultdict(dict)


def enabled() -> bool:
    return bool(settings.KQ_WORLD)


def world_of(root: str) -> TreeWorld:
    found = _worlds.get(root)
    if found is None:
        found = _worlds[root] = TreeWorld(root)
    return found


def drop(root: str) -> None:
    """After a lost lease or an error: the next cycle of ``root`` rebuilds its world."""
    found = _worlds.get(root)
    if found is not None:
        found.invalidate()


def _invalidate_all() -> None:
    for found in _worlds.values():
        found.invalidate()


def forget() -> None:
    """Tests: drop every world of this process (as a restarted worker would), and what
    it remembers of the node view it stored (queueing.nodeview)."""
    from queueing import nodeview

    _worlds.clear()
    notes.clear()
    nodeview.forget()
