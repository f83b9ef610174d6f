"""Positions and ETAs for the workloads left waiting after a cycle.

**Position** is the workload's rank (1-based) in its queue and in the global order
the engine would consider it: waiting preemptors first, then the tournament merge of
the queues (queue priority, fair-share score with the candidate's request, workload
priority, queue-order time, id) at the cycle's end state. A k-way merge that always
takes the smallest head equals a stable sort by each element's *prefix maximum* key
along its queue, so the merge is one C-speed sort. Only workloads that compete now
get a position; one backing off gets an explanation instead.

**ETA** comes from a forward simulation of the cycle in virtual time. Running and
admitted workloads finish after their expected remaining runtime -- the declared
``expected_runtime_s`` (a limit) times the share of it their queue's work uses
(``Snapshot.runtime_ratio``), else their queue's observed runtime quantile, else
``default_runtime_s``. The p50 run uses p50 runtimes; the p90 run (p90 runtimes) is
made only while no measured error calibrates the p90 (see :mod:`.eta`). At
each completion the freed quota and node capacity go to the waiting workloads in the
same order and with the same fit rules as the real cycle (quota chain, gang
placement, Block/Intelligent blocking): :mod:`.forecast_sim`, which lists what it
simplifies and how its cost is bounded.
"""

from __future__ import annotations

import heapq
from time import perf_counter
from typing import TYPE_CHECKING

from queueing.engine.cyclestate import F_NEVER, order_key, runtime_of
from queueing.engine.eta import finish_etas
from queueing.engine.forecast_sim import OVERDUE_FACTOR, Event, Simulation
from queueing.engine.types import PREEMPTED, Eta, Position, WorkloadSpec

if TYPE_CHECKING:
    from queueing.engine.cyclestate import CycleState as Cycle

__all__ = ["forecast", "positions"]


def positions(cy: Cycle) -> dict[int, Position]:
    """Rank of every competing, not admitted workload in its queue and globally."""
    admitted = cy.admitted_ids
    waiting = cy.waiting
    quota_of = cy.quota_of
    score = cy.fair.score
    fail = cy.fail
    cache: dict[tuple[int, object], float] = {}
    in_queue: dict[int, int] = {}
    first: list[WorkloadSpec] = []
    keyed: list[tuple[tuple[int, float, int, float, int], int, int]] = []
    for q in cy.queues:
        qp = -q.spec.priority
        env: tuple[int, float, int, float, int] | None = None
        n = 0
        for w in q.cands:
            wid = w.id
            if wid in admitted:
                continue
            f = fail.get(wid)
            if f is not None and f[0] == F_NEVER:
                continue  # set aside: it does not compete
            n += 1
            in_queue[wid] = n
            if wid in waiting:
                first.append(w)
                continue
            qi = quota_of[wid]
            ck = (qi, w._request)
            s = cache.get(ck)
            if s is None:
                s = cache[ck] = score(qi, w._request._d)
            key = (qp, s, -w.priority, w.queue_order_at, wid)
            if env is None or key > env:
                env = key
            keyed.append((env, n, wid))
    keyed.sort()
    first.sort(key=order_key)
    order = [w.id for w in first]
    order.extend(wid for _, _, wid in keyed)
    return {wid: Position(in_queue[wid], g) for g, wid in enumerate(order, 1)}


def forecast(cy: Cycle) -> tuple[dict[int, Position], dict[int, Eta]]:
    """Positions and p50/p90 ETAs for the waiting workloads of a finished cycle."""
    t0 = perf_counter()
    pos = positions(cy)
    t1 = perf_counter()
    budget = max(0.0, cy.config.eta_budget_s)
    p50_events, p90_events = _holding_events(cy)
    calibrated = bool(cy.snapshot.eta_residuals)
    sim50 = Simulation(cy, 0, p50_events, deadline=t1 + (budget if calibrated else budget / 2))
    p50 = sim50.run()
    out_of_time = sim50.out_of_time
    p90: dict[int, float] = {}
    if not calibrated:
        sim90 = Simulation(cy, 1, p90_events, deadline=t1 + budget)
        p90 = sim90.run()
        out_of_time = out_of_time or sim90.out_of_time
    etas = finish_etas(cy, pos, p50, p90, out_of_time=out_of_time)
    cy.stats["positions_s"] = t1 - t0
    cy.stats["eta_s"] = perf_counter() - t1
    cy.stats["eta_p50_known"] = sum(1 for e in etas.values() if e.p50 is not None)
    cy.stats["eta_p90_known"] = sum(1 for e in etas.values() if e.p90 is not None)
    return pos, etas


def _holding_events(cy: Cycle) -> tuple[list[Event], list[Event]]:
    """When each holding workload ends, in the p50 and the p90 view (heapified)."""
    now = cy.now
    released = cy.victim_ids | {r.workload_id for r in cy.requeues}
    ev50: list[Event] = []
    ev90: list[Event] = []
    seq = 0
    for qi, ws in enumerate(cy.holding):
        for w in ws:
            if w.phase == PREEMPTED or w.id in released:
                continue  # released at once, see Simulation.setup
            seq += 1
            start = w.started_at if w.started_at is not None else now
            declared = w.expected_runtime_s is not None and w.expected_runtime_s > 0
            for q, out in ((0, ev50), (1, ev90)):
                left = start + runtime_of(cy, w, q) - now
                if left <= 0:
                    if declared:
                        # Past its typical runtime but not its limit: it ends between
                        # now and the limit (half way at the median).
                        limit_left = start + (w.expected_runtime_s or 0.0) - now
                        left = max(0.0, limit_left) * (0.5 if q == 0 else 1.0)
                    else:
                        left = runtime_of(cy, w, q) * OVERDUE_FACTOR[q]
                out.append((now + left, seq, qi, w, None))
    for w in cy.orphans:
        seq += 1
        ev50.append((now + runtime_of(cy, w, 0), seq, -1, w, None))
        ev90.append((now + runtime_of(cy, w, 1), seq, -1, w, None))
    heapq.heapify(ev50)
    heapq.heapify(ev90)
    return ev50, ev90
