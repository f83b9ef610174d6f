"""Aging in the forward simulation (:mod:`.forecast_sim`): order and claims in virtual time.

The cycle orders each queue by age (:func:`.aging.queue_order_key`: the aged first) and
serves the aged heads' *claims* in the runtime quota split (:func:`.aging.aged_claims`);
both move with time. :func:`age` re-keys workloads that reach their queue's
``aging_bound_s`` in virtual time ahead of the rest; :func:`claims_at` gives what the
heads claim at a virtual time, so that the simulation splits the runtime quota as the
cycle at that time would -- when it recomputes it, and at the instant a head's claim
becomes whole, so that the head starts then. Without it the simulation kept the claims
of the cycle it started from until enough work ended (gpu-heavy: a 2 x 4 gang whose
claim was whole the next cycle was forecast 966 s away, and work behind such heads
1,000-2,000 s late). An aged head of a Priority queue short of quota holds its
quota's room there (``Cycle.hold_aged``), but work within the quota's min passes it
while the head still fits under its max (:func:`passes_hold_at`, :func:`wake_behind`).
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING

from queueing.engine.aging import HEAD_SCAN, aged_claims
from queueing.engine.cyclestate import F_NEVER
from queueing.engine.holds import hold_rooms, passes_hold
from queueing.engine.quota import Claims

if TYPE_CHECKING:
    from queueing.engine.forecast_sim import Simulation
    from queueing.engine.forecast_window import SimCand, SimQueue

__all__ = ["SPACE", "age", "aged", "claims_at", "passes_hold_at", "wake_behind"]

#: A candidate's key in its queue is its list index shifted by this many bits; one
#: that ages in virtual time is given a key between the workloads aged at the start
#: and the rest (:func:`aged`), and an arrival one between the two waiting workloads
#: it lands between, placed among other arrivals there by its own order
#: (:func:`.forecast_arrivals.arrive`, whose rank takes 95 bits).
SPACE = 100


def age(sim: Simulation, t: float) -> None:
    """Workloads that reach their queue's ``aging_bound_s`` by ``t`` go first in it.

    As :func:`.aging.queue_order_key` orders a queue: the aged ahead of the rest, in
    the order they queued (which is the order they age in). Each is given a key
    after those aged at the start and before the others, brought into the window if
    it was beyond it, and looked at again.
    """
    queues = sim.queues
    heap = sim.age_heap
    if heap is None:
        # Per queue, when its next workload ages (one pass, no sorting): a queue's
        # own heap is built only once the simulation reaches that time.
        heap = sim.age_heap = []
        for sq in queues:
            bound = sq.state.spec.aging_bound_s
            if bound is None:
                continue
            start = sim.now - max(0.0, bound)
            n_aged = 0
            first = math.inf
            for w in sq.ws:
                at = w.queue_order_at
                if at <= start:
                    n_aged += 1
                elif at < first:
                    first = at
            sq.aged_base = (n_aged << SPACE) - (1 << (SPACE - 1))
            if first < math.inf:
                heap.append((first + max(0.0, bound), sq.index))
        heapq.heapify(heap)
    while heap and heap[0][0] <= t:
        _, qidx = heapq.heappop(heap)
        sq = queues[qidx]
        bound = max(0.0, sq.state.spec.aging_bound_s or 0.0)
        h = sq.ages
        if h is None:
            start = sim.now - bound
            h = sq.ages = [
                (w.queue_order_at, li) for li, w in enumerate(sq.ws) if w.queue_order_at > start
            ]
            heapq.heapify(h)
        # One expression for "aged by t" here and in the key pushed back: with
        # ``x <= t - bound`` here and ``x + bound`` there, rounding could make both
        # false and true for one workload -- and the loop never end.
        while h and h[0][0] + bound <= t:
            _, li = heapq.heappop(h)
            aged(sim, sq, li)
        if h:
            heapq.heappush(heap, (h[0][0] + bound, qidx))


def aged(sim: Simulation, sq: SimQueue, li: int) -> None:
    """``sq.ws[li]`` has aged: it goes after those aged before it, before the rest."""
    cy = sim.cy
    w = sq.ws[li]
    if w.id in sim.eta or w.id in cy.admitted_ids:
        return
    old = li << SPACE
    c = sq.cands.pop(old, None)
    if c is not None:
        sim.unpark(sq, c)  # aged, it goes before the head it waited behind
    if c is None:
        if li < sq.nxt:
            return  # set aside, or looked at and gone
        f0 = cy.fail.get(w.id)
        if f0 is not None and f0[0] == F_NEVER:
            return
        qi = cy.quota_of.get(w.id)
        if qi is None:
            qi = cy.tree.index.get(w.quota, -1)
        sq.moved.add(li)
        sq.window += 1
        c = sim.cand_type(w, qi, sq.index, 0, w.id in cy.waiting)
    new = sq.aged_base + sq.aged_n
    sq.aged_n += 1
    c.idx = new
    for qb, b in list(sq.block_at.items()):
        if b == old:
            sq.block_at[qb] = new
    sq.cands[new] = c
    sim._mark(c)


def claims_at(sim: Simulation, t: float) -> Claims | None:
    """What aged heads claim at virtual time ``t`` (:func:`.aging.aged_claims`).

    The heads are read from each queue's window, in its order at ``t`` (:func:`age`
    keys the workloads that aged meanwhile ahead of the rest); own usage is the
    simulation's. A claim grows with its head's wait and lapses when it starts;
    each head whose claim is not yet whole schedules a look at the time it is.
    """
    eta = sim.eta
    queues = []
    # The quota of each head, arrivals and requeued victims included (the cycle's
    # ``quota_of`` knows neither: an arrival at the head of its queue claimed nothing,
    # and the workload behind it claimed in its place).
    quota_of: dict[int, int] = {}
    for sq in sim.queues:
        spec = sq.state.spec
        if spec.aging_bound_s is None or not sq.cands:
            continue
        window = [sq.cands[i] for i in sorted(sq.cands)[:HEAD_SCAN]]
        heads = [x.w for x in window if x.w.id not in eta and not x.first]
        if not heads:
            continue
        for x in window:
            if x.qi >= 0:
                quota_of[x.w.id] = x.qi
        queues.append((spec, heads))
        full = t
        for w in heads:
            at = w.queue_order_at + max(0.0, spec.aging_bound_s)
            if at > t and (full == t or at < full):
                full = at
        if full > t and full not in sim.claim_seen:
            sim.claim_seen.add(full)
            heapq.heappush(sim.claim_times, full)
    if not queues:
        return None
    tree = sim.tree
    used = sim.used
    own_used = [dict(u) for u in used]
    for i, kids in enumerate(tree.children):
        o = own_used[i]
        for c in kids:
            for k, v in used[c].items():
                o[k] = o.get(k, 0) - v
    unusable = {w.id for _, w in sim.unusable_ws}  # (those that still ask too much)
    return aged_claims(tree, queues, quota_of, own_used, t, unusable=unusable)


def passes_hold_at(sim: Simulation, sq: SimQueue, qi: int, b: int, c: SimCand) -> bool:
    """Whether ``c`` goes on behind ``b``, its quota's failing head in its queue.

    A strict-order head holds all the work of its quota behind it; an aged head that
    holds its quota's room (``Cycle.hold_aged``) lets work within the quota's min
    pass while the head still fits under its max beside it, as the cycle does
    (``Cycle.hold_room``), at the simulation's usage. Such work starts when it
    places, not when the head starts.
    """
    head = sq.cands.get(b)
    if head is None or sq.aged_heads.get(qi) != head.w.id:
        return False
    tree = sim.tree
    under_min, under_max = hold_rooms(sim.used[qi], tree.mins[qi], tree.maxes[qi], head.req)
    return passes_hold(c.req, under_min, under_max)


def wake_behind(sim: Simulation, fell: set[int]) -> None:
    """Work waiting behind an aged head whose quota's usage fell is looked at again.

    The cycle asks :func:`passes_hold_at` of it at every cycle; its rooms under the
    min and the max only grow as usage falls, so what now passes goes back to be
    placed, and the rest stays behind the head.
    """
    tree = sim.tree
    for sq in sim.queues:
        if not sq.behind or not sq.aged_heads:
            continue
        woke = False
        for qi in fell & sq.behind.keys():
            b = sq.block_at.get(qi)
            head = None if b is None else sq.cands.get(b)
            if head is None or sq.aged_heads.get(qi) != head.w.id:
                continue
            under_min, under_max = hold_rooms(sim.used[qi], tree.mins[qi], tree.maxes[qi], head.req)
            keep = []
            for j in sq.behind[qi]:
                c = sq.cands.get(j)
                if c is None:
                    continue  # gone, or moved by age (and looked at then)
                if passes_hold(c.req, under_min, under_max):
                    sim.unpark(sq, c)
                    heapq.heappush(sq.dirty, j)
                    woke = True
                else:
                    keep.append(j)
            if keep:
                sq.behind[qi] = keep
            else:
                del sq.behind[qi]
        if woke:
            sim._schedule(sq)
