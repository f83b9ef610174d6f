"""From the forward simulation's start times to the ETAs people are shown.

The simulation (:mod:`.forecast`) gives, per waiting workload, when it would start
if runtimes were their medians and nothing new arrived. Three corrections make that a
promise one can hold the engine to:

0. **Arrivals.** Work arriving while a workload waits that goes before it -- higher
   priority in its own queue, or any work of a queue of higher queue priority (the
   engine ranks queues by fair share before workload priority, so a sibling queue's
   urgent work does not overtake it) -- stretches its wait: with
   ``Snapshot.arrival_load`` (offered load per queue and priority, from recent
   history) the simulated wait ``d`` becomes ``d / (1 - rho)``, ``rho`` that load as a
   share of the capacity serving its quota -- the completion time of low-priority work
   in a priority queue (a busy period; Cobham), at most ``MAX_STRETCH`` times.
   ``rho`` is the one-sigma lower bound of the load (a load of ``n`` arrivals is known
   to about ``1/sqrt(n)`` of itself, and ``1 / (1 - rho)`` magnifies that error near
   saturation).
1. **Calibration.** With ``Snapshot.eta_residuals`` (the measured error of earlier
   forecasts, see :mod:`.calibration`), the predicted wait ``d`` becomes
   ``p50 = d + s * e50`` and ``p90 = d + s * e90`` with ``s = max(d, floor)``: the
   error of the past, in proportion to the wait. Without it (a cold start), the p90
   comes from a second simulation with p90 runtimes.
2. **Hysteresis.** Against ``Snapshot.previous_etas``, a new p50 within the tolerance
   (a quarter of the remaining wait, ``TOLERANCE``, at least ``MIN_TOLERANCE_S``) of the old one keeps
   the old one (``moved="kept"``); beyond it, the ETA moves and says so
   (``earlier``/``later`` with ``delta_s``) once two forecasts in a row agree it must
   (the first is held as ``pending``), or at once as ``overdue`` when the old one
   passed.
3. **Order.** In a strict-order queue a workload cannot start before one ahead of it
   on the same quota: its ETA is at least theirs. A kept ETA later than its own fresh
   forecast that would hold one behind it is released first (:func:`_release_stale`).
4. **The class ahead (Gott).** Nor, in any queue, before an older workload of its own
   class (same quota, priority and shape: it fails wherever that one fails). When the
   oldest of them has waited ``t``, Gott's Copernican argument puts that one's start
   beyond ``now + 9 t`` with probability 0.1, so the p90 is at least ``now + 9 t``: a
   bound in absolute time, which is what a class held back until a higher-priority
   inflow ends needs (Kueue's burst: its wait is constant in clock time, no multiple
   of the simulated wait fits it). Only the p90: the p50 keeps what the simulation
   knows (Gott's median, ``now + t``, ignores that the head may be about to start).
   **Under overload** -- the work that goes first arriving at least as fast as the
   capacity serving the queue (``rho >= 1``, its load known to within half of itself)
   -- no busy period ends while the inflow lasts: the wait is the simulated ``d`` plus
   everything that arrives ahead meanwhile, ``d + rho L`` for an inflow lasting ``L``
   more. The older workload of its class has been held back ``t``, so the overload has
   lasted at least that, and Gott bounds ``L`` by ``9 t``: the p90 is at least
   ``now + d + 9 rho t`` (Kueue's burst: the small jobs of its first seconds).

A competing workload the simulation did not reach gets a reason instead of a time.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from queueing.engine.aging import aged_cutoff
from queueing.engine.calibration import (
    ARRIVALS,
    FLOOR_S,
    SQUARES,
    Residuals,
    banded,
    eta_classes,
)
from queueing.engine.types import Eta, Position, WorkloadSpec

if TYPE_CHECKING:
    from queueing.engine.cyclestate import CycleState as Cycle

__all__ = ["finish_etas", "mark_by_age"]

#: A new ETA closer than this to the previous one (or a quarter of the wait, ``TOLERANCE``) keeps it.
MIN_TOLERANCE_S = 5.0
TOLERANCE = 0.25
#: Higher-priority arrivals stretch a wait at most this many times (a load near or above
#: the capacity would stretch it without bound; the measured error takes over there).
MAX_STRETCH = 3.0
#: Gott's Copernican bound: what has lasted ``t`` lasts at most ``9 t`` more with
#: probability 0.9 (J. R. Gott, Nature 363, 1993).
GOTT_P90 = 9.0
#: The priority an aged workload has against arrivals of its own queue: above all.
_AGED = 2**62
#: A load ahead is taken as an overload (at or above the capacity serving the queue)
#: only when its estimate is known to within this share of itself (its compound-Poisson
#: sampling error; four alike arrivals or more): a single large arrival is no rate.
OVERLOAD_MAX_ERROR = 0.5


def finish_etas(
    cy: Cycle,
    pos: Mapping[int, Position],
    p50: Mapping[int, float],
    p90: Mapping[int, float],
    *,
    out_of_time: bool,
    with_arrivals: frozenset[int] = frozenset(),
    drawn_until: tuple[frozenset[int], float] = (frozenset(), -math.inf),
) -> dict[int, Eta]:
    """Calibrated, steady, order-respecting ETAs for every positioned workload.

    ``with_arrivals``: workloads whose ``p50`` already counts drawn arrivals
    (:mod:`.forecast_arrivals`); their p50 is not stretched again. ``drawn_until``: the
    workloads whose ``p50`` is a median of draws with arrivals, and until when every
    draw had them; one that starts later counts the arrivals up to then, and only the
    rest of its wait is stretched."""
    now = cy.now
    snap = cy.snapshot
    res = snap.eta_residuals
    prev = snap.previous_etas
    no_eta = (
        "the forecast ran out of its time budget before reaching it"
        if out_of_time
        else f"not admitted within the forecast horizon ({_duration(cy.config.eta_horizon_s)})"
    )
    classes: dict[int, tuple[str, ...]] = {}
    stretch: dict[int, float] = {}
    # The load ahead of workloads whose work ahead arrives at least as fast as it is
    # served (an overload, see below).
    flooded: dict[int, float] = {}
    # How long the oldest workload of the same class ahead of each one has waited: same
    # queue, quota, priority and request -- it starts no earlier than that workload.
    # Only for workloads with a simulated start, and only their (quota, priority) pairs
    # are keyed by shape (a shape is costly for work the cycle never looked at).
    ahead_wait: dict[int, float] = {}
    quota_of = cy.quota_of
    for q in cy.queues:
        wanted = {(quota_of[cw.id], cw.priority) for cw in q.cands if cw.id in p50}
        if not wanted:
            continue
        oldest: dict[tuple[int, int, object], float] = {}
        for cw in q.cands:
            if cw.id not in pos:
                continue
            qp = (quota_of[cw.id], cw.priority)
            if qp not in wanted:
                continue
            ck = (*qp, cy.shape(cw))
            first = oldest.get(ck)
            if first is None:
                oldest[ck] = cw.queue_order_at
            elif first < cw.queue_order_at:
                ahead_wait[cw.id] = now - first
    load = snap.arrival_load
    if res or load:
        above = _load_above(cy, load) if load else None
        for q in cy.queues:
            for cw in q.cands:
                if cw.id not in pos:
                    continue
                if res:
                    classes[cw.id] = eta_classes(cw.queue, cw.priority)
                if above is not None:
                    # Aged by its simulated start, it goes before every arrival of its
                    # own queue then (none of them has aged); other queues' still may.
                    a = p50.get(cw.id)
                    aged = a is not None and cw.queue_order_at <= aged_cutoff(
                        q.spec.aging_bound_s, a
                    )
                    low, rho = above(
                        q.spec.name, q.spec.priority, cw.priority, cy.quota_of[cw.id], cw, aged
                    )
                    if low > 0:
                        stretch[cw.id] = 1.0 / max(1.0 - low, 1.0 / MAX_STRETCH)
                    if rho >= 1.0 and rho - low <= OVERLOAD_MAX_ERROR * rho:
                        flooded[cw.id] = rho
    drawn, until = drawn_until
    if until > now:
        # A median of draws that starts after the draws' arrivals end counted those up
        # to then: the stretch is the busy period's for the rest of the wait only
        # (stretched whole, what the draws had replayed was counted twice: gpu-heavy's
        # waits beyond the streams' ten minutes).
        for wid in drawn:
            f = stretch.get(wid)
            a = p50.get(wid)
            if f is None or a is None or wid in with_arrivals or a <= until:
                continue
            stretch[wid] = ((until - now) + (a - until) * f) / (a - now)
    stretched = _stretched(cy, pos, p50, stretch) if stretch else None
    model: dict[int, float] = {}
    raw: dict[int, tuple[float, float]] = {}
    for wid in pos:
        a = p50.get(wid)
        if a is None:
            continue
        # Higher-priority arrivals during the wait stretch it (a busy period), unless
        # the draws had arrivals in them.
        if wid in with_arrivals:
            d = max(0.0, a - now)
        elif stretched is not None:
            d = stretched.get(wid, max(0.0, a - now) * stretch.get(wid, 1.0))
        else:
            d = max(0.0, a - now)
        model[wid] = now + d
        # The p90's error from the finest class measured; the p50's shift from the
        # finest class measured enough for it (none: no shift).
        err = None
        e50 = None
        e90_of_shift = None
        for key in banded(classes.get(wid, ()), d):
            got = res.get(key)
            if got is None:
                continue
            if err is None:
                err = got
            if got[0] is not None:
                e50, e90_of_shift = got
                break
        if err is not None:
            s = max(d, FLOOR_S)
            e90 = err[1]
            if e90 <= (e50 or 0.0):
                # A class too little measured for a shift of its own, whose bound is
                # not above the shift from a coarser one, would publish p50 = p90: a
                # few dozen waits of one wave that all started early (in the demo,
                # "~2": every forecast beyond 2 min had started in under 60 % of it,
                # and the next wave's started after theirs). The p90 comes from the class
                # the p50's shift came from (with none, the prior's).
                e90 = e90_of_shift if e90_of_shift is not None else Residuals.PRIOR[1]
            lo = now + max(0.0, d + s * (e50 or 0.0))
            hi = now + max(0.0, d + s * e90)
        else:
            lo = now + d
            hi = now + max(0.0, p90.get(wid, a) - now) * stretch.get(wid, 1.0)
        span = ahead_wait.get(wid)
        if span is not None:
            hi = max(hi, now + GOTT_P90 * span)
            over = flooded.get(wid)
            if over is not None:
                # Overload: what goes first arrives at rho >= 1 times the capacity
                # serving the queue, so no busy period ends while the inflow lasts; the
                # wait is the simulated one plus all that arrives ahead meanwhile,
                # ``d + rho L`` for an inflow lasting ``L`` more. The older workload of
                # its class has been held back ``span``: the overload has lasted at
                # least that, and Gott puts ``L <= 9 span`` with probability 0.9.
                hi = max(hi, max(a, now) + over * GOTT_P90 * span)
        raw[wid] = (lo, max(hi, lo))
    _order(cy, raw)
    etas: dict[int, Eta] = {}
    for wid in pos:
        got = raw.get(wid)
        if got is None:
            etas[wid] = Eta(None, None, reason=no_eta)
            continue
        lo, hi = got
        sim = model.get(wid)
        old = prev.get(wid)
        if old is None or old.p50 is None or old.p90 is None:
            etas[wid] = Eta(lo, hi, moved="first", forecast=sim)
            continue
        if old.p50 < now:
            etas[wid] = Eta(lo, hi, moved="overdue", delta_s=lo - old.p50, forecast=sim)
            continue
        tol = max(MIN_TOLERANCE_S, TOLERANCE * (old.p50 - now))
        if abs(lo - old.p50) <= tol and abs(hi - old.p90) <= max(tol, TOLERANCE * (old.p90 - now)):
            etas[wid] = Eta(old.p50, old.p90, moved="kept", forecast=sim)
        elif old.moved and not _confirmed(old, lo, tol):
            # A first jump is held for one cycle: it is published when the next
            # forecast agrees (a spike of one cycle -- one job's end reordered -- is not).
            etas[wid] = Eta(old.p50, old.p90, moved="kept", forecast=sim, pending=lo)
        else:
            etas[wid] = Eta(
                lo,
                hi,
                moved="earlier" if lo < old.p50 else "later",
                delta_s=lo - old.p50,
                forecast=sim,
            )
    # Hysteresis may keep an old value behind a moved one: order again. A value kept
    # later than its own fresh forecast would hold the fresh ones behind it to a start
    # the forecast no longer sees (live, one stale head's p50 raised the first forecasts
    # of the rows behind it from 25 s to 165 s; they started in 38): such a row ahead
    # publishes its fresh forecast instead (:func:`_release_stale`), then the order
    # holds.
    kept: dict[int, tuple[float, float]] = {
        w: (e.p50, e.p90) for w, e in etas.items() if e.p50 is not None and e.p90 is not None
    }
    for w in _release_stale(cy, raw, kept):
        lo, hi = raw[w]
        delta = lo - kept[w][0]
        etas[w] = Eta(lo, hi, moved="earlier", delta_s=delta, forecast=etas[w].forecast)
        kept[w] = (lo, hi)
    if _order(cy, kept):
        for w, (lo, hi) in kept.items():
            e = etas[w]
            if (lo, hi) != (e.p50, e.p90):
                etas[w] = Eta(lo, hi, moved=e.moved, delta_s=e.delta_s, forecast=e.forecast)
    return etas


def _release_stale(
    cy: Cycle, raw: Mapping[int, tuple[float, float]], kept: Mapping[int, tuple[float, float]]
) -> list[int]:
    """The rows of strict-order queues whose kept ETA (hysteresis) is later than their
    own fresh forecast and than the fresh forecast of a row behind them on their quota:
    :func:`_order` would hold that row to a start no forecast sees any more. Released
    to their fresh forecasts (ordered already by the first :func:`_order`), they raise
    nothing behind them. (A row behind aged by its p50 is held only to older rows; it
    is counted all the same: at worst a row ahead publishes its fresh forecast one
    cycle before hysteresis would have, and the check stays one pass.)"""
    out: list[int] = []
    quota_of = cy.quota_of
    for q in cy.queues:
        if not q.spec.blocking:
            continue
        behind: dict[int, float] = {}  # per quota: the earliest fresh p50 behind
        for w in reversed(q.cands):
            fresh = raw.get(w.id)
            if fresh is None:
                continue
            qi = quota_of[w.id]
            earliest = behind.get(qi, math.inf)
            now_kept = kept.get(w.id)
            if (
                now_kept is not None
                and now_kept[0] > fresh[0] + 1e-6
                and earliest < now_kept[0] - 1e-6
            ):
                out.append(w.id)
            behind[qi] = min(earliest, fresh[0])
    return out


def mark_by_age(cy: Cycle, etas: dict[int, Eta]) -> None:
    """Sets ``by_age`` (in place) on the published ETAs of strict-order queues with
    aging whose p50 is earlier than that of work ahead of them on their quota: aged by
    then, they go first (:func:`_order` holds them only to older work), and a page that
    lists them below later ETAs says why. Run on the ETAs as published (after
    :func:`bound_etas`)."""
    out: list[int] = []
    quota_of = cy.quota_of
    for q in cy.queues:
        bound = q.spec.aging_bound_s
        if not q.spec.blocking or bound is None:
            continue
        latest: dict[int, float] = {}
        for w in q.cands:
            e = etas.get(w.id)
            if e is None or e.p50 is None:
                continue
            qi = quota_of[w.id]
            ahead = latest.get(qi)
            if (
                ahead is not None
                and e.p50 < ahead
                and w.queue_order_at <= aged_cutoff(bound, e.p50)
            ):
                out.append(w.id)
            latest[qi] = e.p50 if ahead is None else max(ahead, e.p50)
    for wid in out:
        etas[wid] = dataclasses.replace(etas[wid], by_age=True)


def _stretched(
    cy: Cycle,
    pos: Mapping[int, Position],
    p50: Mapping[int, float],
    stretch: Mapping[int, float],
) -> dict[int, float]:
    """Stretched waits, with strict order: behind a blocking head only the gap stretches.

    A workload behind a head that blocks its quota (Block, or Intelligent at or above
    its threshold) starts when that head has started and then when its own turn comes.
    Arrivals that go before it but not before the head are queued between the two: they
    delay it only after the head has started, so they stretch the *gap* the simulation
    put between the head's start and its own, not the whole wait -- the part spent
    waiting for the head is stretched by what goes before the head. Each wait is
    ``D = D_head + max(0, d - d_head) * stretch``, ``D_head`` the head's stretched wait,
    along the queue's order. Stretching the whole wait by the blocked workload's larger
    load put it a minute after a head it starts with (the demo's analytics-etl: 2-cpu
    jobs behind a 128-cpu one, simulated together at +22 s, published at +37 s and +59 s;
    they started together at +14 s).
    """
    now = cy.now
    quota_of = cy.quota_of
    out: dict[int, float] = {}
    for q in cy.queues:
        if not (q.block_all or q.intelligent):
            continue
        head: dict[int, tuple[float, float]] = {}  # quota -> (d, D) of its blocking head
        bound = q.spec.aging_bound_s
        for w in q.cands:
            wid = w.id
            a = p50.get(wid)
            if a is None or wid not in pos:
                continue
            if w.queue_order_at <= aged_cutoff(bound, a):
                # Aged by its simulated start, it goes before every head that has not
                # aged by then (the simulation put it there): its wait is its own.
                continue
            d = max(0.0, a - now)
            s = stretch.get(wid, 1.0)
            qi = quota_of[wid]
            got = head.get(qi)
            big = d * s if got is None else got[1] + max(0.0, d - got[0]) * s
            if got is not None:
                out[wid] = big
            if q.blocks(w):
                head[qi] = (d, big)
    return out


def _load_above(
    cy: Cycle, load: Mapping[str, Mapping[int, Mapping[str, float]]]
) -> Callable[[str, int, int, int, WorkloadSpec, bool], tuple[float, float]]:
    """The offered load of arrivals that go before a workload, as a share of the
    capacity serving its queue (in the resource where that share is largest): its
    one-sigma lower bound (what the stretch uses) and its estimate.

    What goes first: higher-priority work of the same queue, and all work of queues of
    higher queue priority (the engine orders queues by queue priority, then fair share,
    and only then by workload priority -- so a higher-priority arrival in a sibling
    queue does not overtake it). For a workload ``aged`` by its start, no work of its
    own queue: it goes before every workload that has not aged (:mod:`.aging`).
    ``load`` is per queue, priority and resource, each a share of its tree's capacity
    of that resource (:class:`.calibration.ArrivalLoad`).
    The capacity serving the queue is what its tree leaves after the other queues'
    offered load -- at least its quota's ``min`` (fair share guarantees it), at most
    its ``max``.
    """
    tree = cy.tree
    cap = cy.nodes.capacity
    qprio = {name: spec.priority for name, spec in cy.queue_specs.items()}
    root_of_queue: dict[str, int] = {}
    for w in cy.snapshot.workloads:
        if w.queue not in root_of_queue:
            qi = tree.index.get(w.quota)
            if qi is not None:
                root_of_queue[w.queue] = tree.chains[qi][-1]
    # Per queue and resource: its whole load; per root and resource: the tree's.
    per_queue: dict[str, dict[str, float]] = {}
    total: dict[int, dict[str, float]] = {}
    for queue, bands in load.items():
        acc = per_queue.setdefault(queue, {})
        for work in bands.values():
            for k, v in work.items():
                acc[k] = acc.get(k, 0.0) + v
        acc.pop(ARRIVALS, None)
        r = root_of_queue.get(queue)
        if r is not None:
            t = total.setdefault(r, {})
            for k, v in acc.items():
                t[k] = t.get(k, 0.0) + v
    tree_cap: dict[int, dict[str, int]] = {}
    memo: dict[tuple[str, int, int, tuple[str, ...]], tuple[float, float]] = {}

    def above(
        queue: str, queue_prio: int, prio: int, qi: int, w: WorkloadSpec, aged: bool = False
    ) -> tuple[float, float]:
        req = w._request._d
        if aged:
            prio = _AGED
        key = (queue, prio, qi, tuple(k for k, v in req.items() if v > 0))
        got = memo.get(key)
        if got is not None:
            return got
        root = tree.chains[qi][-1]
        tc = tree_cap.get(root)
        if tc is None:
            tc = tree_cap[root] = {k: min(v, tree.maxes[root].get(k, v)) for k, v in cap.items()}
        first: dict[str, float] = {}
        for p, work in load.get(queue, {}).items():
            if p > prio:
                for k, v in work.items():
                    first[k] = first.get(k, 0.0) + v
        for other, bands in load.items():
            if other != queue and qprio.get(other, 0) > queue_prio:
                for work in bands.values():
                    for k, v in work.items():
                        first[k] = first.get(k, 0.0) + v
        # An offered load is an estimate from the arrivals of a window: the sum of n
        # shares x_i (size x runtime over the window), whose sampling error (compound
        # Poisson) is sqrt(sum x_i^2) -- 1/sqrt(n) of the load when the arrivals are
        # alike, all of it when one arrival dominates (an hour-long 32-GPU gang in a
        # 5-minute window reads as twice the tree's capacity by itself). 1 / (1 - rho)
        # magnifies that error without bound near saturation: the stretch uses the
        # one-sigma lower bound, of the load that goes first and of the other queues'
        # (which leave the queue less capacity the larger they are). Without the squares
        # (a caller that counts arrivals only) the bound is rho (1 - 1/sqrt(n)); without
        # a count the load is trusted as it stands.
        n = first.pop(ARRIVALS, None)
        trust = 1.0 if n is None else max(0.0, 1.0 - 1.0 / math.sqrt(n)) if n > 0 else 0.0
        own = per_queue.get(queue, {})
        tree_load = total.get(root, {})
        rho = low = 0.0
        for k in key[3]:
            c = tc.get(k, 0)
            ahead = first.get(k, 0.0)
            if c <= 0 or ahead <= 0:
                continue
            sq = SQUARES + k
            others = max(0.0, tree_load.get(k, 0.0) - own.get(k, 0.0))
            if sq in first:
                ahead_low = max(0.0, ahead - math.sqrt(first[sq]))
                others_sq = max(0.0, tree_load.get(sq, 0.0) - own.get(sq, 0.0))
                others_low = max(0.0, others - math.sqrt(others_sq))
            else:
                ahead_low, others_low = trust * ahead, others
            lo_k = tree.mins[qi].get(k, 0)
            hi_k = min(tree.maxes[qi].get(k, c), c)
            serve = min(max(c * max(0.0, 1.0 - others), lo_k), hi_k)
            rho = max(rho, ahead * c / serve if serve > 0 else 1.0)
            serve = min(max(c * max(0.0, 1.0 - others_low), lo_k), hi_k)
            low = max(low, ahead_low * c / serve if serve > 0 else 1.0)
        memo[key] = got = (low, rho)
        return got

    return above


def _confirmed(old: Eta, lo: float, tol: float) -> bool:
    """Whether the previous cycle already wanted to move the ETA the same way."""
    if old.pending is None or old.p50 is None:
        return False
    before = old.pending - old.p50
    now = lo - old.p50
    return abs(before) > tol and (before > 0) == (now > 0)


def _order(cy: Cycle, etas: dict[int, tuple[float, float]]) -> bool:
    """In strict-order queues no ETA is before one ahead of it on the same quota --
    as the queue will be ordered then.

    Age reorders a queue (:func:`.aging.queue_order_key`): a workload aged by its
    start goes before every workload that has not aged by then, the aged among
    themselves in the order they queued. So a workload aged by its p50 is held only to
    the ETAs of those ahead of it that are aged by then too (older than it); any other
    is held to every ETA ahead of it. Held to the ETAs of workloads it passes by age,
    the demo's vision-dev published starts 30 minutes to 2 hours away for jobs that
    started at their 300-s aging bound, behind a backlog of higher-priority work.
    """
    changed = False
    quota_of = cy.quota_of
    for q in cy.queues:
        if not q.spec.blocking:
            continue
        bound = q.spec.aging_bound_s
        # Per quota: the ETAs seen so far by when their workloads queued (aging on),
        # and the latest of them.
        older: dict[int, _AgedMax] = {}
        latest: dict[int, tuple[float, float]] = {}
        rank: dict[int, int] = {}
        if bound is not None:
            timed = sorted((w.queue_order_at, w.id) for w in q.cands if w.id in etas)
            rank = {wid: i for i, (_, wid) in enumerate(timed)}
        for w in q.cands:
            got = etas.get(w.id)
            if got is None:
                continue
            qi = quota_of[w.id]
            if bound is not None and w.queue_order_at <= aged_cutoff(bound, got[0]):
                # Aged by its p50: only the older ones ahead of it go first then.
                seen = older.get(qi)
                before = seen.upto(rank[w.id]) if seen is not None else None
            else:
                before = latest.get(qi)
            if before is not None and (got[0] < before[0] or got[1] < before[1]):
                got = (max(got[0], before[0]), max(got[1], before[1]))
                etas[w.id] = got
                changed = True
            was = latest.get(qi)
            latest[qi] = got if was is None else (max(was[0], got[0]), max(was[1], got[1]))
            if bound is not None:
                seen = older.get(qi)
                if seen is None:
                    seen = older[qi] = _AgedMax(len(rank))
                seen.add(rank[w.id], got)
    return changed


class _AgedMax:
    """The latest (p50, p90) of the ETAs added at or before a rank (the rank of when a
    workload queued): a Fenwick tree of maxima, log n a call."""

    __slots__ = ("_hi", "_lo")

    def __init__(self, n: int) -> None:
        self._lo = [-math.inf] * (n + 1)
        self._hi = [-math.inf] * (n + 1)

    def add(self, rank: int, eta: tuple[float, float]) -> None:
        i = rank + 1
        lo, hi = self._lo, self._hi
        while i < len(lo):
            if eta[0] > lo[i]:
                lo[i] = eta[0]
            if eta[1] > hi[i]:
                hi[i] = eta[1]
            i += i & -i

    def upto(self, rank: int) -> tuple[float, float] | None:
        """Over the ETAs added at ranks up to ``rank`` (its own included)."""
        i = rank + 1
        a = b = -math.inf
        lo, hi = self._lo, self._hi
        while i > 0:
            a = max(a, lo[i])
            b = max(b, hi[i])
            i -= i & -i
        return None if a == -math.inf else (a, b)


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:g} h"
    if seconds >= 60:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"
