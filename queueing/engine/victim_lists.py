"""Victim lists of a preemption search (:mod:`.preemption`), read only as far as needed.

A tree's holdings in victim order (``OrderedVictims``: a heap popped as entries are
read) and the part of them a search may take (``FilteredVictims``: filtered on demand,
with the nodes-only search's useless prefixes cached).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from operator import itemgetter

from queueing.engine.types import PREEMPTED, WorkloadSpec

__all__ = [
    "FilteredVictims",
    "OrderedVictims",
    "VKey",
    "first",
    "held_beyond_max",
    "keeps_min",
    "kept_within_max",
    "vkey",
]

#: A holding's victim order: ``(priority, -admitted_at, -id)``.
VKey = tuple[int, float, int]

#: Sort key of the victim lists, whose first item is the workload's victim order:
#: ``(priority, -admitted_at, -id)`` -- lower priority, then the most recently
#: admitted, then the higher id (built inline, it is made for every holding).
first = itemgetter(0)


def vkey(v: WorkloadSpec) -> VKey:
    """``v``'s victim order (:data:`VKey`)."""
    return (v.priority, -(v.admitted_at or 0.0), -v.id)


def keeps_min(
    holding: Iterable[WorkloadSpec],
    v: WorkloadSpec,
    k: str,
    limits: tuple[int, int | None],
    left: int,
    held: int,
    *gone: Container[int],
) -> bool:
    """Whether taking ``v`` leaves its quota the ``min`` of ``k`` it guarantees.

    ``limits``: the quota's (min, max) of ``k``; ``left``: what it has of ``k`` once
    ``v`` is gone; ``held``: what it holds of ``k`` now. A quota holding no more than its
    max must keep ``left`` at its min. One holding more (a max lowered under running
    work) is judged by what it keeps within its max (:func:`kept_within_max`): taking
    ``v`` may not take that below the min, nor lower it where it is below already."""
    m, mx = limits
    if mx is None or held <= mx:
        return left >= m
    before, after, _ = kept_within_max(holding, v, k, mx, *gone)
    return after >= min(m, before)


def held_beyond_max(
    holding: Iterable[WorkloadSpec],
    v: WorkloadSpec,
    maxes: Mapping[str, int],
    held: Callable[[str], int],
    *gone: Container[int],
) -> bool:
    """Whether ``v`` is work its quota holds beyond its max in some resource (its
    quota, holding more than its max there, keeps it out of what it keeps within it:
    :func:`kept_within_max`). ``held``: what the quota holds of a resource now."""
    for k, x in v._request._d.items():
        mx = maxes.get(k)
        if (
            x
            and mx is not None
            and held(k) > mx
            and not kept_within_max(holding, v, k, mx, *gone)[2]
        ):
            return True
    return False


def kept_within_max(
    holding: Iterable[WorkloadSpec], v: WorkloadSpec, k: str, mx: int, *gone: Container[int]
) -> tuple[int, int, bool]:
    """What a quota holding more than its max ``mx`` of ``k`` keeps of it within that
    max, with ``v`` and without it, and whether ``v`` is kept. What it keeps is its work
    (``holding``, less evictions under way and the ids in ``gone``) in its own order --
    the reverse of victim order: priority, then the earliest admitted -- up to the
    first that goes beyond the max.

    A quota holds more than its max when the max was lowered under running work. Its
    min guarantees it room up to that max, not the work beyond it, which is what its
    own queue's higher-priority jobs evict first. Judged by all it held, the min
    protected that work and let other quotas take the higher-priority work instead,
    which came back and evicted it in its quota, leaving the quota below its min to
    reclaim what had been taken for: a ping-pong (the property test, seeds 33425 and
    14407). Judged by what it keeps within its max, taking work beyond the max takes
    nothing the min guarantees (and that work cannot be admitted again while the work
    ahead of it holds), and taking work within it must leave the min kept."""
    ws = sorted(
        (u for u in holding if u.phase != PREEMPTED and not any(u.id in g for g in gone)),
        key=vkey,
        reverse=True,
    )
    before = after = 0
    full_before = full_after = kept = False
    for u in ws:
        x = u._request._d.get(k, 0)
        if not full_before:
            if before + x > mx:
                full_before = True
            else:
                before += x
                kept = kept or u is v
        if u is not v and not full_after:
            if after + x > mx:
                full_after = True
            else:
                after += x
    return before, after, kept


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
