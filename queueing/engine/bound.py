"""Aging's bound: "starts by T at the latest" for the head of a queue.

Once aging has made a head's claim whole (:func:`.aging.claim_full_at`), nothing in
its quota tree keeps its capacity past the declared limit of the work holding it.
The bound is the later of the two, stated in the head's explanation (:mod:`.explain`)
and, with typical runtimes instead of declared limits, used for the p50 beside it
(:func:`.eta_bounds.typical_bound`). Both read the work holding capacity in a tree from
:func:`tree_holders`: what holds it in the snapshot and what the cycle itself has
just admitted there (explanations and ETAs are made after the admissions; a bound
that left those out was untrue when stated, and the next cycle, counting them as
holding, stated a later one -- the demo worlds with waves, seeds 7-10: 86 of the 92
bounds that moved later).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from queueing.engine.aging import claim_full_at
from queueing.engine.cyclestate import F_NEVER
from queueing.engine.types import WorkloadSpec

if TYPE_CHECKING:
    from queueing.engine.cyclestate import CycleState as Cycle
    from queueing.engine.cyclestate import QueueState

__all__ = ["AgingBounds", "Bound", "tree_holders"]

#: A head's bound: when at the latest, the workload whose end sets it and when that
#: started (``Explanation.starts_by``, ``bound_by``, ``bound_since``; the last two None
#: when the time its claim is whole sets it).
Bound = tuple[float, int | None, float | None]


def tree_holders(cy: Cycle, root: int) -> Iterator[WorkloadSpec]:
    """The work holding capacity in ``root``'s tree at the end of the cycle: what held
    it in the snapshot, then what the cycle admitted into that tree."""
    for c in cy.tree.subtree(root):
        yield from cy.holding[c]
    if cy.admitted_ws:
        quota_of = cy.quota_of
        root_of = cy.tree.root_of
        for w in cy.admitted_ws:
            qi = quota_of.get(w.id)
            if qi is not None and root_of(qi) == root:
                yield w


def _latest_end(cy: Cycle, root: int) -> Bound | None:
    """When the last workload holding capacity in ``root``'s tree is expected to end,
    with which workload that is and when it started (None, None: none holds any); None
    when work there has run past its declared limit (its end is not known: no bound)."""
    now = cy.now
    latest = now
    last: WorkloadSpec | None = None
    for w in tree_holders(cy, root):
        end = cy.latest_end(w)
        if end < now:
            return None
        if end > latest:
            latest, last = end, w
    if last is None:
        return latest, None, None
    return latest, last.id, last.started_at if last.started_at is not None else now


class AgingBounds:
    """The bounds of one cycle's heads, sharing what they read per tree and queue."""

    def __init__(self, cy: Cycle) -> None:
        self.cy = cy
        self._ends: dict[int, Bound | None] = {}
        self._oldest: dict[str, dict[int, float]] = {}

    def _oldest_of(self, q: QueueState) -> dict[int, float]:
        """Per quota, when the longest-waiting of ``q``'s candidates still waiting
        queued (``queue_order_at``), but those that never fit."""
        got = self._oldest.get(q.spec.name)
        if got is None:
            cy = self.cy
            admitted = cy.admitted_ids
            fail_get = cy.fail.get
            quota_of = cy.quota_of
            got = self._oldest[q.spec.name] = {}
            for v in q.cands:
                if v.id in admitted:
                    continue
                f = fail_get(v.id)
                if f is not None and f[0] == F_NEVER:
                    continue  # it never fits: it goes ahead of no one
                c = quota_of.get(v.id)
                if c is not None:
                    t = got.get(c)
                    if t is None or v.queue_order_at < t:
                        got[c] = v.queue_order_at
        return got

    def of(self, q: QueueState, w: WorkloadSpec, qi: int) -> Bound | None:
        """The bound of ``w``, the head of ``q`` on quota ``qi``: claim whole, and what
        holds capacity in its tree ended. None with aging off, or while work in its
        tree runs past its declared limit (or its queue's p90): when that ends is not
        known, and "by now" would be untrue.

        None too for a head that has not aged while work of its quota that queued
        before it waits behind it (of lower priority): that work ages before the
        head's claim is whole and goes ahead of it (:func:`.aging.order_key`), so the
        head does not stay the head the bound is stated for. In the demo worlds with
        waves (seeds 7-10) about a third of the bounds were stated so, and one head
        passed so was stated a bound 261 s later once it was the head again."""
        cy = self.cy
        full = claim_full_at(q.spec, w)
        if full is None:
            return None
        if full > cy.now and self._oldest_of(q).get(qi, full) < w.queue_order_at:
            return None
        root = cy.tree.chains[qi][-1]
        if root not in self._ends:
            self._ends[root] = _latest_end(cy, root)
        got = self._ends[root]
        if got is None:
            return None
        end, by, since = got
        if end <= full or end <= cy.now:
            return max(full, cy.now), None, None
        return end, by, since
