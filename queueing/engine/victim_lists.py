"""Victim lists of a preemption search (:mod:`.preemption`), read only as far as needed.

A tree's holdings in victim order (``OrderedVictims``: a heap popped as entries are
read) and the part of them a search may take (``FilteredVictims``: filtered on demand,
with the nodes-only search's useless prefixes cached).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping
from operator import itemgetter

from queueing.engine.types import WorkloadSpec

__all__ = ["FilteredVictims", "OrderedVictims", "VKey", "first"]

#: A holding's victim order: ``(priority, -admitted_at, -id)``.
VKey = tuple[int, float, int]

#: Sort key of the victim lists, whose first item is the workload's victim order:
#: ``(priority, -admitted_at, -id)`` -- lower priority, then the most recently
#: admitted, then the higher id (built inline, it is made for every holding).
first = itemgetter(0)


class OrderedVictims:
    """Victim-list entries in victim order, sorted only as far as they are read.

    A search reads the first few hundred entries of a tree's ~20k holdings at most
    (60k cycle: 1,490): the rest stays in a heap. Indexed like the sorted list it
    stands for (``len`` is all of it); the keys are unique (they end with the id).
    """

    __slots__ = ("_entries", "_heap", "_out")

    def __init__(self, entries: list[tuple[VKey, WorkloadSpec, int]]) -> None:
        self._entries = entries
        self._heap = [(e[0], i) for i, e in enumerate(entries)]
        heapq.heapify(self._heap)
        self._out: list[tuple[VKey, WorkloadSpec, int]] = []

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, p: int) -> tuple[VKey, WorkloadSpec, int]:
        out = self._out
        if p >= len(out):
            heap = self._heap
            entries = self._entries
            pop = heapq.heappop
            while len(out) <= p:
                out.append(entries[pop(heap)[1]])  # (IndexError past the end, as a list)
        return out[p]


class FilteredVictims:
    """Victim-ordered ``(key, workload, quota, lowest over quota)`` read on demand.

    ``every`` is holdings in victim order; ``lowest`` maps the quotas whose work is a
    candidate to their lowest over quota. What was filtered is kept, so repeated
    searches read a list and the filter passes over ``every`` at most once.
    """

    __slots__ = ("_every", "_gone", "_lowest", "_pos", "_useless", "items")

    def __init__(self, every: OrderedVictims, lowest: dict[int, int]):
        self.items: list[tuple[VKey, WorkloadSpec, int, int]] = []
        self._every = every
        self._lowest = lowest
        self._pos = 0
        self._useless: dict[
            tuple[frozenset[int], frozenset[str]], tuple[int, dict[int, int], dict[int, int]]
        ] = {}
        self._gone: dict[
            tuple[frozenset[int], frozenset[str]], tuple[int, int, int, dict[int, int]]
        ] = {}

    def __iter__(self) -> Iterator[tuple[VKey, WorkloadSpec, int, int]]:
        items = self.items
        i = 0
        while True:
            if i < len(items):
                yield items[i]
                i += 1
            elif not self._more():
                return

    def useless_prefix(
        self, elig: frozenset[int], keys: frozenset[str], nindex: Mapping[str, int]
    ) -> tuple[int, dict[int, int], dict[int, int]]:
        """The entries before the first one holding ``keys`` on a node of ``elig``.

        Returns how many there are, how many of them each lowest over quota has, and
        each one's workload id -> lowest over quota. Such workloads free nothing a
        nodes-only search can use (:func:`find_victims`'s ``useful``). Cached per
        ``(elig, keys)``: the entries never change within the cycle.
        """
        ck = (elig, keys)
        got = self._useless.get(ck)
        if got is None:
            counts: dict[int, int] = {}
            ids: dict[int, int] = {}
            n = 0
            for _, v, _vq, low in self:
                if any(
                    nindex.get(name, -1) in elig and not amount.raw.keys().isdisjoint(keys)
                    for name, amount in v.assignment.items()
                ):
                    break
                n += 1
                counts[low] = counts.get(low, 0) + 1
                ids[v.id] = low
            got = (n, counts, ids)
            self._useless[ck] = got
        return got

    def useless_gone(
        self,
        elig: frozenset[int],
        keys: frozenset[str],
        ids: Mapping[int, int],
        skip: set[int],
        awaited: set[int],
    ) -> tuple[int, dict[int, int]]:
        """Of :meth:`useless_prefix`'s ``ids``, those in ``skip`` and in ``awaited``.

        Returns how many (an id in both counts twice) and how many per lowest over
        quota. Both sets only grow within a cycle, so their sizes tell whether the
        count cached for ``(elig, keys)`` is still right.
        """
        ck = (elig, keys)
        got = self._gone.get(ck)
        ns, na = len(skip), len(awaited)
        if got is None or got[0] != ns or got[1] != na:
            by_low: dict[int, int] = {}
            total = 0
            for ws in (skip, awaited):
                for vid in ws:
                    low = ids.get(vid)
                    if low is not None:
                        by_low[low] = by_low.get(low, 0) + 1
                        total += 1
            got = (ns, na, total, by_low)
            self._gone[ck] = got
        return got[2], got[3]

    def _more(self) -> bool:
        """Filter ``every`` up to its next candidate; False when none is left."""
        every = self._every
        lowest = self._lowest
        p = self._pos
        n = len(every)
        while p < n:
            key, v, vq = every[p]
            p += 1
            low = lowest.get(vq)
            if low is not None:
                self.items.append((key, v, vq, low))
                self._pos = p
                return True
        self._pos = p
        return False
