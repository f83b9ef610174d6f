"""Delivery rules for the live stream, kept apart from the consumers so tests can call them.

Generation (queueing.events) sends small ``changed`` notifications after each commit:
which queues and which workloads (or only how many) changed. A connection buffers them
for a short while (the debounce), merges them, and then works out from its subscription
what it must read (``Stream.needs``); the consumer reads it through
portal.stream_queries, which shares each read among the connections of the process that
need the same one after the same notification. ``Stream.frames`` then compares what was
read with what this connection last sent and makes the frames:

* a queue given as ``{"id", "from", "to"}`` is a window: the rows at positions
  from..to of the waiting list (as a fresh page load would show them), the admitted and
  running list, the recently finished list, and the queue's counts. Only rows that
  differ from what was sent go out; a row that left the window while still waiting goes
  as a stub ``{"id", "queue_id", "phase", "position"}``; a ``windows`` entry gives the
  counts and the ids now in the window, in order. Cost: O(window), whatever the queue's
  length;
* ``queues: "*"`` (the default) and plain queue ids get the rows of the workloads the
  notifications name, up to ``MAX_PULL_IDS``; beyond that (or when a notification gave
  only a count) a ``resync`` frame tells the client to refetch instead;
* ``workloads`` gets the rows of individual workloads when they change (the workload
  page);
* ``summary: true`` gets one ``activity`` frame straight from the notifications, with no
  read at all (the overview and cluster pages refetch their numbers on it).

Nothing here touches the database or decides anything about scheduling.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

WAITING = frozenset({"Pending", "Backoff"})
HOLDING = frozenset({"Admitted", "Running", "Preempted"})
TERMINAL = frozenset({"Succeeded", "Failed", "Cancelled"})
STUB_FIELDS = ("id", "queue_id", "phase", "position")
PROTOCOL = 2
MAX_PULL_IDS = 500  # rows a "*" or plain-queue subscriber reads by id per flush, at most
MAX_WINDOW = 500  # positions one window may span: what a connection reads stays bounded


class SubscriptionError(ValueError):
    """A subscribe message that does not follow docs/events.md."""


@dataclass(frozen=True)
class Window:
    lo: int
    hi: int


@dataclass(frozen=True)
class Subscription:
    """What one connection wants to receive."""

    all_queues: bool = True
    queues: Mapping[int, Window | None] = field(default_factory=dict)
    workloads: frozenset[int] = frozenset()
    summary: bool = False

    @classmethod
    def parse(cls, message: Mapping[str, Any]) -> Subscription:
        queues_raw = message.get("queues", "*")
        workloads_raw = message.get("workloads", [])
        summary = message.get("summary", False)
        if not isinstance(summary, bool):
            raise SubscriptionError("summary must be true or false.")
        if not isinstance(workloads_raw, list) or not all(_is_id(w) for w in workloads_raw):
            raise SubscriptionError("workloads must be a list of workload ids.")
        if len(workloads_raw) > 1000:
            raise SubscriptionError("subscribe to at most 1000 workloads.")
        if queues_raw == "*":
            return cls(True, {}, frozenset(workloads_raw), summary)
        if not isinstance(queues_raw, list) or len(queues_raw) > 1000:
            raise SubscriptionError('queues must be "*" or a list of at most 1000 queues.')
        queues: dict[int, Window | None] = {}
        for item in queues_raw:
            if _is_id(item):
                queues[item] = None
                continue
            if not isinstance(item, Mapping) or not _is_id(item.get("id")):
                raise SubscriptionError('a queue is an id or {"id", "from", "to"}.')
            lo: Any = item.get("from", 1)
            hi: Any = item.get("to")
            if not _is_id(lo) or not _is_id(hi) or hi < lo:
                raise SubscriptionError("a queue window needs 1 <= from <= to.")
            if hi - lo + 1 > MAX_WINDOW:
                raise SubscriptionError(f"a queue window spans at most {MAX_WINDOW} positions.")
            queues[item["id"]] = Window(lo, hi)
        return cls(False, queues, frozenset(workloads_raw), summary)

    def describe(self) -> dict[str, Any]:
        return {
            "queues": "*"
            if self.all_queues
            else [
                qid if window is None else {"id": qid, "from": window.lo, "to": window.hi}
                for qid, window in sorted(self.queues.items())
            ],
            "workloads": sorted(self.workloads),
            "summary": self.summary,
        }

    @property
    def windows(self) -> dict[int, Window]:
        return {qid: w for qid, w in self.queues.items() if w is not None}

    @property
    def plain(self) -> frozenset[int]:
        return frozenset(qid for qid, w in self.queues.items() if w is None)


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


# --- what to read ----------------------------------------------------------------------


@dataclass(frozen=True)
class QueueLists:
    """Read: a queue's counts, its admitted-and-running list and its finished list."""

    queue: int


@dataclass(frozen=True)
class WindowRows:
    """Read: the waiting rows at positions lo..hi of a queue, in admission order, and
    stubs of the few just around them (where rows that leave a window usually go)."""

    queue: int
    lo: int
    hi: int


@dataclass(frozen=True)
class RowsById:
    """Read: the rows of these workloads (with a version that changes on every write)."""

    ids: tuple[int, ...]


Read = QueueLists | WindowRows | RowsById


_TOKENS = itertools.count(1)


def _token() -> int:
    return next(_TOKENS)


@dataclass(frozen=True)
class ListsResult:
    pending: int
    holding: int
    holding_rows: tuple[dict[str, Any], ...]
    finished_rows: tuple[dict[str, Any], ...]
    token: int = field(default_factory=_token, compare=False)  # names this very result


@dataclass(frozen=True)
class RowsResult:
    rows: tuple[dict[str, Any], ...]
    versions: Mapping[int, str] = field(default_factory=dict)
    around: Mapping[int, dict[str, Any]] = field(default_factory=dict)  # stubs near a window
    token: int = field(default_factory=_token, compare=False)


# --- notifications, merged over the debounce -------------------------------------------


@dataclass
class Notice:
    """The notifications of one tenant received since the last flush, merged."""

    queues: set[int] = field(default_factory=set)
    ids: set[int] = field(default_factory=set)
    many: bool = False  # some notification gave only a count
    count: int = 0
    changed: bool = False
    key: str | None = None  # the latest notification's: reads are shared under it
    cycle: int | None = None
    at: str | None = None
    quotas: dict[Any, dict[str, Any]] = field(default_factory=dict)
    quotas_removed: set[int] = field(default_factory=set)
    quota_cycle: int | None = None
    quota_at: str | None = None

    def add_changed(self, payload: Mapping[str, Any]) -> None:
        self.changed = True
        self.queues.update(int(q) for q in payload.get("queues") or ())
        listed = payload.get("workloads")
        if listed is None:
            self.many = True
        else:
            self.ids.update(int(i) for i in listed)
        self.count += int(payload.get("count") or 0)
        self.key = payload.get("key") or self.key
        self.cycle = payload.get("cycle") if payload.get("cycle") is not None else self.cycle
        self.at = payload.get("at") or self.at

    @property
    def too_many(self) -> bool:
        return self.many or len(self.ids) > MAX_PULL_IDS

    @property
    def workload_count(self) -> int:
        return self.count if self.many else len(self.ids)


class Buffer:
    """Notifications received since the last flush, merged per tenant."""

    def __init__(self) -> None:
        self.tenants: dict[Any, Notice] = {}
        self.passthrough: list[dict[str, Any]] = []

    def __bool__(self) -> bool:
        return bool(self.tenants or self.passthrough)

    def add(self, payload: Mapping[str, Any]) -> None:
        kind = payload.get("type")
        if kind == "changed":
            self.tenants.setdefault(payload.get("tenant"), Notice()).add_changed(payload)
        elif kind == "quotas":
            notice = self.tenants.setdefault(payload.get("tenant"), Notice())
            for quota in payload.get("quotas", []):
                # The cycle sends a quota's usage, an edit the whole row: merge them.
                notice.quotas.setdefault(quota["id"], {}).update(quota)
                notice.quotas_removed.discard(quota["id"])
            for quota_id in payload.get("removed", []):
                notice.quotas.pop(quota_id, None)
                notice.quotas_removed.add(quota_id)
            notice.quota_cycle = payload.get("cycle")
            notice.quota_at = payload.get("at") or notice.quota_at
        else:
            self.passthrough.append(dict(payload))

    def drain(self) -> tuple[list[dict[str, Any]], dict[Any, Notice]]:
        """What arrived (frames to pass on as they are, notices per tenant); then empty."""
        out = (self.passthrough, self.tenants)
        self.tenants, self.passthrough = {}, []
        return out


# --- what this connection last sent, and the frames that bring it up to date ---------


@dataclass(frozen=True)
class _QueueView:
    window: Mapping[int, dict[str, Any]] = field(default_factory=dict)
    order: tuple[int, ...] = ()
    holding: Mapping[int, dict[str, Any]] = field(default_factory=dict)
    finished: frozenset[int] = frozenset()
    totals: tuple[int, int] | None = None
    source: tuple[int, int] = (0, 0)  # the tokens of the two results it was made from


_NOTHING_SHOWN = _QueueView()


@dataclass(frozen=True)
class _View:
    """What a connection last sent, made only from results read (never changed in place).

    ``signature`` names the results it was made from: two views with the same signature
    are equal, which is what lets connections share one diff.
    """

    queues: Mapping[int, _QueueView] = field(default_factory=dict)
    workloads: Mapping[int, tuple[dict[str, Any], str]] = field(default_factory=dict)
    workload_source: Mapping[int, int] = field(default_factory=dict)
    workload_queue: Mapping[int, int] = field(default_factory=dict)
    signature: Any = ((), ())


@dataclass(frozen=True)
class Outcome:
    """The frames for one notice and the view after sending them; ``lineage`` is that
    of the stream it was computed for."""

    frames: tuple[dict[str, Any], ...]
    view: _View
    lineage: Any


def stub(row: Mapping[str, Any]) -> dict[str, Any]:
    return {key: row.get(key) for key in STUB_FIELDS}


class Stream:
    """One connection's subscription and what it has sent under it.

    For a notice, ``needs`` says what to read and ``left`` what to look up because it
    left what the connection shows; ``diff`` makes the frames from what was read and
    ``adopt`` takes the view after them (``frames`` does all of it, for callers that
    read synchronously).

    ``lineage`` names the connection's state: streams with the same lineage have the
    same subscription and the same view (made from the very same results read), so a
    notice gives them the same frames, and portal.stream_queries computes those once.
    """

    def __init__(self, subscription: Subscription | None = None) -> None:
        self.subscribe(subscription or Subscription())

    def subscribe(self, subscription: Subscription) -> None:
        """A new subscription starts from nothing sent: its first frames carry whole
        windows, so a client that refetched its page (a resync) is whole again."""
        self.subscription = subscription
        self.view = _View()
        self._sub_key = repr(sorted(subscription.describe().items()))

    @property
    def lineage(self) -> tuple[str, Any]:
        return (self._sub_key, self.view.signature)

    def copy(self) -> Stream:
        twin = Stream.__new__(Stream)
        twin.subscription, twin.view, twin._sub_key = self.subscription, self.view, self._sub_key
        return twin

    def adopt(self, outcome: Outcome) -> None:
        if outcome.lineage != self.lineage:  # shared outcomes are for equal streams only
            raise ValueError("an outcome of another stream")
        self.view = outcome.view

    def diffs(self, notice: Notice) -> bool:
        """Whether this notice may call for workload frames (else no read at all)."""
        return notice.changed and not self.subscription.summary

    def share_key(self, tenant: Any, notice: Notice) -> tuple[Any, ...]:
        """Streams with equal keys get equal outcomes for this notice."""
        merged = (frozenset(notice.queues), frozenset(notice.ids), notice.many)
        return (tenant, notice.key, merged, self.lineage)

    def _by_id(self, notice: Notice) -> bool:
        sub = self.subscription
        return not sub.summary and (sub.all_queues or bool(sub.plain & notice.queues))

    def needs(self, notice: Notice) -> list[Read]:
        if not self.diffs(notice):
            return []
        sub = self.subscription
        reads: list[Read] = []
        for qid, window in sorted(sub.windows.items()):
            if qid in notice.queues:
                reads += [QueueLists(qid), WindowRows(qid, window.lo, window.hi)]
        ids: set[int] = set()
        if self._by_id(notice) and not notice.too_many:
            ids |= notice.ids
        for workload_id in sub.workloads:
            queue = self.view.workload_queue.get(workload_id)
            if workload_id in notice.ids or (
                notice.many and (queue is None or queue in notice.queues)
            ):
                ids.add(workload_id)
        if ids:
            reads.append(RowsById(tuple(sorted(ids))))
        return reads

    def left(self, notice: Notice, results: Mapping[Read, Any]) -> RowsById | None:
        """The rows this connection showed in a window or holding list that are no longer
        in any list read (nor just around the window): one more, bounded, read."""
        known = _rows(results)
        gone: set[int] = set()
        for qid, window in self.subscription.windows.items():
            lists = results.get(QueueLists(qid))
            rows = results.get(WindowRows(qid, window.lo, window.hi))
            view = self.view.queues.get(qid)
            if lists is None or rows is None or view is None:
                continue
            now = {r["id"] for r in rows.rows} | rows.around.keys()
            now |= {r["id"] for r in lists.holding_rows}
            now |= {r["id"] for r in lists.finished_rows}
            gone |= (view.window.keys() | view.holding.keys()) - now
        gone -= known.keys()
        return RowsById(tuple(sorted(gone))) if gone else None

    def diff(self, tenant: Any, notice: Notice, results: Mapping[Read, Any]) -> Outcome:
        """The ``resync`` and ``workloads`` frames for a notice, given what was read, and
        the view after them. Changes nothing."""
        if not self.diffs(notice):
            return Outcome((), self.view, self.lineage)
        head = {"tenant": tenant, "cycle": notice.cycle, "at": notice.at}
        frames: list[dict[str, Any]] = []
        if self._by_id(notice) and notice.too_many:
            frames.append({"type": "resync", **head, "queues": sorted(notice.queues)})
        body, view = self._workloads(notice, results)
        if body is not None:
            frames.append({"type": "workloads", **head, **body})
        return Outcome(tuple(frames), view, self.lineage)

    def frames(
        self, tenant: Any, notice: Notice, results: Mapping[Read, Any]
    ) -> list[dict[str, Any]]:
        """Every frame for one tenant's notice, given what was read; adopts the view."""
        outcome = self.diff(tenant, notice, results)
        self.adopt(outcome)
        return self.wrap(tenant, notice, outcome.frames)

    def wrap(
        self, tenant: Any, notice: Notice, diffed: Iterable[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The frames of a notice around its diffed ones: activity, quotas."""
        frames: list[dict[str, Any]] = []
        if notice.changed and self.subscription.summary:
            frames.append(
                {
                    "type": "activity",
                    "tenant": tenant,
                    "cycle": notice.cycle,
                    "at": notice.at,
                    "queues": sorted(notice.queues),
                    "workloads": notice.workload_count,
                }
            )
        frames += diffed
        if notice.quotas or notice.quotas_removed:
            frames.append(
                {
                    "type": "quotas",
                    "tenant": tenant,
                    "cycle": notice.quota_cycle,
                    "at": notice.quota_at,
                    "quotas": list(notice.quotas.values()),
                    "removed": sorted(notice.quotas_removed),
                }
            )
        return frames

    def _workloads(
        self, notice: Notice, results: Mapping[Read, Any]
    ) -> tuple[dict[str, Any] | None, _View]:
        sub = self.subscription
        known = _rows(results)
        changes: dict[int, dict[str, Any]] = {}
        removed: set[int] = set()

        def whole(row: dict[str, Any]) -> None:
            changes[row["id"]] = row
            if row["phase"] in TERMINAL:
                removed.add(row["id"])

        queues = dict(self.view.queues)
        windows: list[dict[str, Any]] = []
        for qid, window in sorted(sub.windows.items()):
            lists = results.get(QueueLists(qid))
            rows = results.get(WindowRows(qid, window.lo, window.hi))
            if lists is None or rows is None:
                continue
            view = queues.get(qid, _NOTHING_SHOWN)
            in_window = {r["id"]: r for r in rows.rows}
            holding = {r["id"]: r for r in lists.holding_rows}
            finished = frozenset(r["id"] for r in lists.finished_rows)
            before = len(changes), len(removed)
            for row in rows.rows:
                if view.window.get(row["id"]) != row:
                    whole(row)
            for row in lists.holding_rows:
                if view.holding.get(row["id"]) != row:
                    whole(row)
            for row in lists.finished_rows:
                if row["id"] not in view.finished:
                    whole(row)
            gone = (view.window.keys() | view.holding.keys()) - in_window.keys()
            for workload_id in sorted(gone - holding.keys() - finished):
                if workload_id in rows.around:  # still waiting, just outside the window
                    changes.setdefault(workload_id, rows.around[workload_id])
                    continue
                found = known.get(workload_id)
                if found is None:  # deleted, or never this connection's to see
                    removed.add(workload_id)
                    continue
                row = found[0][0]
                if row["queue_id"] == qid and row["phase"] in WAITING:
                    changes.setdefault(workload_id, stub(row))
                elif not (
                    row["queue_id"] == qid
                    and row["phase"] in HOLDING
                    and workload_id in view.holding
                ):  # a row that only fell off the holding list's end is not news
                    whole(row)
            order = tuple(r["id"] for r in rows.rows)
            totals = (lists.pending, lists.holding)
            if (len(changes), len(removed)) != before or (order, totals) != (
                view.order,
                view.totals,
            ):
                windows.append(
                    {
                        "queue": qid,
                        "from": window.lo,
                        "to": window.hi,
                        "pending": lists.pending,
                        "holding": lists.holding,
                        "ids": list(order),
                    }
                )
            source = (rows.token, lists.token)
            queues[qid] = _QueueView(in_window, order, holding, finished, totals, source)

        if self._by_id(notice) and not notice.too_many:
            for workload_id in sorted(notice.ids):
                found = known.get(workload_id)
                if found is not None and (sub.all_queues or found[0][0]["queue_id"] in sub.plain):
                    whole(found[0][0])

        workloads = dict(self.view.workloads)
        workload_source = dict(self.view.workload_source)
        workload_queue = dict(self.view.workload_queue)
        for workload_id in sorted(sub.workloads):
            found = known.get(workload_id)
            if found is None:
                continue
            (row, version), token = found
            workload_queue[workload_id] = row["queue_id"]
            workload_source[workload_id] = token
            if workloads.get(workload_id) != (row, version):
                workloads[workload_id] = (row, version)
                whole(row)

        signature = (
            tuple(sorted((qid, q.source) for qid, q in queues.items())),
            tuple(sorted(workload_source.items())),
        )
        after = _View(queues, workloads, workload_source, workload_queue, signature)
        if not changes and not removed and not windows:
            return None, after
        body: dict[str, Any] = {"changes": list(changes.values()), "removed": sorted(removed)}
        if windows:
            body["windows"] = windows
        return body, after


def _rows(results: Mapping[Read, Any]) -> dict[int, tuple[tuple[dict[str, Any], str], int]]:
    """Every row read by id: (row, version) and the token of the result it came from."""
    out: dict[int, tuple[tuple[dict[str, Any], str], int]] = {}
    for read, result in results.items():
        if isinstance(read, RowsById):
            for row in result.rows:
                out[row["id"]] = ((row, result.versions.get(row["id"], "")), result.token)
    return out
