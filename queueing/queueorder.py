"""One queue's waiting rows in the orders a tree's world lists them from
(``queueing.world.TreeWorld.select``): by priority, and in the order they queued, kept
sorted as rows come and go, with the Pending rows' total request per quota and the
front of a queue whose rows all compete (none Backoff, none aged)."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, NamedTuple

from queueing.choices import Phase
from queueing.engine.aging import OrderKey, order_key

Key = tuple[int, datetime, int]  # (-priority, queue order time, id): priority order
Fifo = tuple[float, int]  # (queue order time as epoch seconds, id): the aged's order


class QueueOrder:
    """One queue's waiting rows kept sorted as rows come and go -- by priority and in
    the order they queued (the two indexes the engine's queue order is drawn from, see
    ``TreeWorld.select``) -- with the total request of its Pending rows per quota (for
    the unlisted demand)."""

    __slots__ = ("backoff", "demand", "fifo", "front", "head", "keys", "pending", "row_of")

    def __init__(self) -> None:
        self.keys: list[Key] = []
        self.fifo: list[Fifo] = []
        self.pending = 0
        self.demand: dict[int, dict[str, int]] = {}
        self.backoff: set[int] = set()
        self.row_of: dict[int, Mapping[str, Any]] = {}
        #: ``TreeWorld.select``'s front of a queue without Backoff or aged rows, kept as
        #: rows come and go (a queue's front changes between two cycles by a few rows):
        #: the first ``head`` keys (always ``keys[:head]``) and their rows' total request
        #: per quota; None until a select asks for it (and after another ``head``).
        self.head = 0
        self.front: tuple[list[Key], dict[int, dict[str, int]]] | None = None

    def plain_front(self, head: int) -> tuple[list[Key], dict[int, dict[str, int]]]:
        """The keys of the first ``head`` rows in priority order and their total request
        per quota; only for a queue whose rows all compete and none is aged (then those
        are the queue's front in the engine's order, all Pending)."""
        front = self.front
        if front is not None and self.head == head:
            return front
        first = self.keys[:head]
        charged: dict[int, dict[str, int]] = {}
        row_of = self.row_of
        for key in first:
            charge(charged, row_of[key[2]], 1)
        self.head = head
        self.front = (first, charged)
        return self.front

    def add(self, row: Mapping[str, Any]) -> None:
        key = _key(row)
        self.row_of[row["id"]] = row
        bisect.insort(self.keys, key)
        front = self.front
        if front is not None:
            first, charged = front
            if len(first) < self.head:
                bisect.insort(first, key)
                charge(charged, row, 1)
            elif key < first[-1]:
                bisect.insort(first, key)
                charge(charged, row, 1)
                out = first.pop()
                charge(charged, self.row_of[out[2]], -1)
        bisect.insort(self.fifo, (row["queue_order_at"].timestamp(), row["id"]))
        if row["phase"] == Phase.BACKOFF:
            self.backoff.add(row["id"])
        else:
            self.pending += 1
            charge(self.demand, row, 1)

    def remove(self, row: Mapping[str, Any]) -> None:
        key = _key(row)
        _discard(self.keys, key)
        front = self.front
        if front is not None:
            first, charged = front
            if first and key <= first[-1]:
                at = bisect.bisect_left(first, key)
                if at < len(first) and first[at] == key:
                    del first[at]
                    charge(charged, row, -1)
                    if len(self.keys) > len(first):  # the next row moves up
                        key_in = self.keys[len(first)]
                        first.append(key_in)
                        charge(charged, self.row_of[key_in[2]], 1)
                else:  # not the row it holds (never so): read the front again
                    self.front = None
        self.row_of.pop(row["id"], None)
        _discard(self.fifo, (row["queue_order_at"].timestamp(), row["id"]))
        if row["phase"] == Phase.BACKOFF:
            self.backoff.discard(row["id"])
        else:
            self.pending -= 1
            charge(self.demand, row, -1)


def _discard(keys: list[Any], key: Any) -> None:
    at = bisect.bisect_left(keys, key)
    if at < len(keys) and keys[at] == key:
        del keys[at]


class _Queued(NamedTuple):
    """A row as the engine's queue order reads it (``aging.Queued``)."""

    id: int
    priority: int
    queue_order_at: float


def row_order_key(
    aging_bound_s: float | None, now: float
) -> Callable[[Mapping[str, Any]], OrderKey]:
    """The engine's queue order (:func:`queueing.engine.aging.order_key`) for rows."""
    key = order_key(aging_bound_s, now)

    def of_row(row: Mapping[str, Any]) -> OrderKey:
        return key(_Queued(row["id"], row["priority"], row["queue_order_at"].timestamp()))

    return of_row


def _key(row: Mapping[str, Any]) -> Key:
    return (-row["priority"], row["queue_order_at"], row["id"])


def charge(demand: dict[int, dict[str, int]], row: Mapping[str, Any], sign: int) -> None:
    bucket = demand.setdefault(row["quota_id"], {})
    for resource, amount in (row["total_request"] or {}).items():
        bucket[resource] = bucket.get(resource, 0) + sign * int(amount)


def add_demand(
    demand: dict[int, dict[str, int]], amounts_by_quota: Mapping[int, Mapping[str, int]], sign: int
) -> None:
    """Add (``sign`` 1) or take away (-1) a request per quota to ``demand``."""
    for quota_id, amounts in amounts_by_quota.items():
        bucket = demand.setdefault(quota_id, {})
        for resource, amount in amounts.items():
            bucket[resource] = bucket.get(resource, 0) + sign * amount
