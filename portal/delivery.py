"""Delivery rules for the live stream, kept apart from the consumers so tests can call them.

The generators (queueing.events, from the cycle and the actions) send each change after
its transaction commits. A connection buffers what arrives for a short while (the
debounce), merges it -- the last row of a workload wins, removals accumulate -- and then
sends one frame per tenant shaped by the client's subscription:

* ``queues: "*"`` (the default) forwards every changed row of the tenant;
* a list of queue ids forwards rows of those queues only; a queue given as
  ``{"id", "from", "to"}`` is windowed: waiting rows ranked outside positions
  from..to travel as stubs ``{"id", "queue_id", "phase", "position"}``, enough for a
  page of a long queue to keep its counts and notice rows moving out of its window;
* ``workloads`` adds rows of individual workloads (the workload page);
* ``summary: true`` replaces rows with one ``activity`` frame naming the queues that
  changed (the overview and cluster pages refetch their numbers on it).

Nothing here touches the database or decides anything about scheduling.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

WAITING = frozenset({"Pending", "Backoff"})
STUB_FIELDS = ("id", "queue_id", "phase", "position")
PROTOCOL = 1


class SubscriptionError(ValueError):
    """A subscribe message that does not follow docs/events.md."""


@dataclass(frozen=True)
class Window:
    lo: int
    hi: int

    def holds(self, position: int | None) -> bool:
        return position is None or self.lo <= position <= self.hi


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

    def shape(self, row: Mapping[str, Any]) -> dict[str, Any] | None:
        """The row as this subscriber gets it: whole, as a stub, or not at all."""
        if row["id"] in self.workloads:
            return dict(row)
        if self.all_queues:
            return dict(row)
        if row["queue_id"] not in self.queues:
            return None
        window = self.queues[row["queue_id"]]
        if window is None or row["phase"] not in WAITING or window.holds(row.get("position")):
            return dict(row)
        return {key: row.get(key) for key in STUB_FIELDS}


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclass
class _TenantBuffer:
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    removed: set[int] = field(default_factory=set)
    quotas: dict[Any, dict[str, Any]] = field(default_factory=dict)
    cycle: int | None = None
    at: str | None = None
    quota_cycle: int | None = None
    quota_at: str | None = None


class Buffer:
    """Events received since the last flush, merged per tenant."""

    def __init__(self) -> None:
        self.tenants: dict[Any, _TenantBuffer] = {}
        self.passthrough: list[dict[str, Any]] = []

    def __bool__(self) -> bool:
        return bool(self.tenants or self.passthrough)

    def add(self, payload: Mapping[str, Any]) -> None:
        kind = payload.get("type")
        if kind == "workloads":
            buf = self.tenants.setdefault(payload.get("tenant"), _TenantBuffer())
            for row in payload.get("changes", []):
                buf.rows[int(row["id"])] = dict(row)
            buf.removed.update(int(i) for i in payload.get("removed", []))
            buf.cycle = payload.get("cycle") if payload.get("cycle") is not None else buf.cycle
            buf.at = payload.get("at") or buf.at
        elif kind == "quotas":
            buf = self.tenants.setdefault(payload.get("tenant"), _TenantBuffer())
            for quota in payload.get("quotas", []):
                buf.quotas[quota.get("id", quota.get("name"))] = dict(quota)
            buf.quota_cycle = payload.get("cycle")
            buf.quota_at = payload.get("at") or buf.quota_at
        else:
            self.passthrough.append(dict(payload))

    def drain(self, subscription: Subscription) -> list[dict[str, Any]]:
        """The frames to send now, and an empty buffer."""
        frames = list(self.passthrough)
        for tenant, buf in self.tenants.items():
            if buf.rows or buf.removed:
                frame = workloads_frame(tenant, buf, subscription)
                if frame is not None:
                    frames.append(frame)
            if buf.quotas:
                frames.append(
                    {
                        "type": "quotas",
                        "tenant": tenant,
                        "cycle": buf.quota_cycle,
                        "at": buf.quota_at,
                        "quotas": list(buf.quotas.values()),
                    }
                )
        self.tenants = {}
        self.passthrough = []
        return frames


def workloads_frame(
    tenant: Any, buf: _TenantBuffer, subscription: Subscription
) -> dict[str, Any] | None:
    if subscription.summary:
        queues = sorted({int(r["queue_id"]) for r in buf.rows.values()})
        return {
            "type": "activity",
            "tenant": tenant,
            "cycle": buf.cycle,
            "at": buf.at,
            "queues": queues,
            "workloads": len(set(buf.rows) | buf.removed),
        }
    changes = [shaped for row in buf.rows.values() if (shaped := subscription.shape(row))]
    sent = {row["id"] for row in changes}
    removed = sorted(
        i
        for i in buf.removed
        if i in sent
        or (subscription.all_queues and i not in buf.rows)
        or i in subscription.workloads
    )
    if not changes and not removed:
        return None
    return {
        "type": "workloads",
        "tenant": tenant,
        "cycle": buf.cycle,
        "at": buf.at,
        "changes": changes,
        "removed": removed,
    }


def merge(payloads: Iterable[Mapping[str, Any]], subscription: Subscription) -> list[dict]:
    """Buffer then drain in one go (what a connection does over one debounce)."""
    buffer = Buffer()
    for payload in payloads:
        buffer.add(payload)
    return buffer.drain(subscription)
