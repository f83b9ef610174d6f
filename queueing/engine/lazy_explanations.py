"""A cycle's explanations built when read (:class:`Explanations`).

A cycle without a forecast hands these out instead of :func:`.explain.explain_all`'s
dict: the same explanations, in the same order, each queue's built by the same code the
first time one of them is read, so a cycle that only admits pays for none.
"""

from __future__ import annotations

import gc
from collections.abc import ItemsView, Iterator, Mapping, ValuesView
from typing import TYPE_CHECKING, Any

from queueing.engine.explain import Bound, Part, Rest, explainer, node_bound_of
from queueing.engine.types import Explanation

if TYPE_CHECKING:
    from queueing.engine.cyclestate import CycleState as Cycle

__all__ = ["Explanations"]


class Explanations(Mapping[int, Explanation]):
    """A cycle's explanations, by workload id, each queue's built when first read.

    Complete: every waiting workload has one, equal to what :func:`explain_all` gives
    (it is built by the same code from the same end state), and iteration gives them in
    the same order. A queue's explanations are built together the first time any of
    them is read (its workloads' positions depend on one another); iterating builds
    them queue by queue, so ``any(...)`` over the values stops early. A caller that
    reads none -- a cycle that only admits -- pays for none. The cycle's state is kept
    until all are built and must not change meanwhile (:meth:`.cycle.Cycle.result`
    hands this out only when nothing runs after it). Pickled as a plain dict.
    """

    __slots__ = ("_bound", "_cy", "_left", "_parts", "_queue", "_rest", "_where")

    def __init__(self, cy: Cycle) -> None:
        self._cy: Cycle | None = cy
        self._queue: Part | None
        self._rest: Rest | None
        self._bound: Bound | None
        self._queue, self._rest, self._bound = explainer(cy)
        #: Per queue, then the workloads in none (the last): the explanations built.
        self._parts: list[dict[int, Explanation] | None] = [None] * (len(cy.queues) + 1)
        self._left = len(self._parts)
        #: Workload id -> index of its part in ``_parts`` (built on the first lookup).
        self._where: dict[int, int] | None = None

    def _part(self, i: int) -> dict[int, Explanation]:
        got = self._parts[i]
        if got is None:
            self._build(i, i + 1)
            got = self._parts[i]
            assert got is not None
        return got

    def _build(self, start: int, stop: int) -> None:
        """Build the parts ``start`` to ``stop`` not built yet, the collector paused.

        (As during the cycle: the explanations are new tuples in no garbage cycle, and
        each collection while they are made would traverse the cycle's state kept for
        them. Paused once for many parts, the collector runs once for all of them.)
        """
        cy = self._cy
        parts = self._parts
        if cy is None:
            return
        explain_queue, explain_rest = self._queue, self._rest
        assert explain_queue is not None
        assert explain_rest is not None
        queues = cy.queues
        paused = gc.isenabled()
        if paused:
            gc.disable()
        try:
            for i in range(start, min(stop, len(parts))):
                if parts[i] is not None:
                    continue
                got: dict[int, Explanation] = {}
                if i < len(queues):
                    explain_queue(queues[i], got)
                else:
                    explain_rest(got)
                parts[i] = got
                self._left -= 1
        finally:
            if paused:
                gc.enable()
        if not self._left:
            # All built: the cycle's state and the builders' caches can go.
            self._cy = self._queue = self._rest = self._bound = None

    def _iter_parts(self) -> Iterator[dict[int, Explanation]]:
        """The parts in order, built in batches that double (1, 2, 4, ... parts): a
        reader that stops early builds little, one that reads all pauses the collector
        a dozen times, not once per queue."""
        n = len(self._parts)
        i = 0
        batch = 1
        while i < n:
            self._build(i, i + batch)
            for j in range(i, min(i + batch, n)):
                part = self._parts[j]
                assert part is not None
                yield part
            i += batch
            batch *= 2

    def _index(self) -> dict[int, int]:
        where = self._where
        if where is None:
            where = {}
            cy = self._cy
            if cy is None:
                for i, part in enumerate(self._parts):
                    assert part is not None
                    for wid in part:
                        where[wid] = i
            else:
                admitted = cy.admitted_ids
                i = 0
                for i, q in enumerate(cy.queues):
                    for w in q.cands:
                        if w.id not in admitted:
                            where[w.id] = i
                rest = len(cy.queues)
                for w, *_ in cy.never:
                    where[w.id] = rest
                for w in cy.backing_off:
                    where[w.id] = rest
                for w, _what in cy.unknown:
                    where[w.id] = rest
            self._where = where
        return where

    def node_bound(self) -> bool:
        """:func:`.explain.node_bound_of` these explanations, without building those not
        built yet (only their kinds and limits are looked at, from the cycle's state)."""
        bound = self._bound
        if bound is None:
            return node_bound_of(self)
        return bound()

    def materialize(self) -> Explanations:
        """Build every explanation now (before the cycle's state changes)."""
        self._build(0, len(self._parts))
        return self

    def __getitem__(self, workload_id: int) -> Explanation:
        i = self._index().get(workload_id)
        if i is None:
            raise KeyError(workload_id)
        return self._part(i)[workload_id]

    def get(self, workload_id: int, default: Any = None) -> Any:
        i = self._index().get(workload_id)
        if i is None:
            return default
        return self._part(i)[workload_id]

    def __contains__(self, workload_id: object) -> bool:
        return workload_id in self._index()

    def __len__(self) -> int:
        return len(self._index())

    def __iter__(self) -> Iterator[int]:
        for part in self._iter_parts():
            yield from part

    def values(self) -> ValuesView[Explanation]:
        return _Values(self)

    def items(self) -> ItemsView[int, Explanation]:
        return _Items(self)

    def _iter_items(self) -> Iterator[tuple[int, Explanation]]:
        for part in self._iter_parts():
            yield from part.items()

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self._iter_items()),))

    def __repr__(self) -> str:
        return f"Explanations({dict(self._iter_items())!r})"


class _Values(ValuesView[Explanation]):
    _mapping: Explanations

    def __iter__(self) -> Iterator[Explanation]:
        for _, e in self._mapping._iter_items():
            yield e


class _Items(ItemsView[int, Explanation]):
    _mapping: Explanations

    def __iter__(self) -> Iterator[tuple[int, Explanation]]:
        return self._mapping._iter_items()
