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

**The p50 is a median of starts, not the start with median runtimes.** When the
runtimes vary (a queue's p90 share of its limit above its p50), the p50 simulation is
run again ``DRAWS`` times with runtimes drawn from each workload's law (:class:`_Law`:
the queue's p50 and p90 runtime as its median and 90th percentile, at most a declared
limit; for running work, given the time it has already run) and each waiting
workload's p50 is the median of its starts over the draws. A workload that starts when
several running jobs have ended starts, typically, when the slowest of them ends: the
start with every runtime at its median is earlier than that (two uniform ends on
0-100 s: the later one's median is 70.7 s, not 50 s). And a job that has run ``t``
typically ends later than its median runtime less ``t``: it has not ended yet. Each
workload's draws are its own, the same in every cycle (stratified, seeded by its id):
from one cycle to the next only what happened moves the median, not the dice. The
draws run only while their cost -- that of the first simulation, ``DRAWS`` times --
fits in the forecast's budget; a large world keeps the single simulation. When the
budget ends them early (a live cycle on a loaded machine; longer with arrivals in
them), the draws made stand if there are ``MIN_DRAWS`` of them: the median of fewer
draws, rather than the single simulation's start -- a model that changes from one
cycle to the next moved the ETAs with it.

**The draws replay arrivals.** With a history of recent arrivals
(``Snapshot.recent_arrivals``) each draw also runs work like it arriving at its rate
(:mod:`.forecast_arrivals`): what arrives later and goes first -- higher priority in
the queue, or small jobs in the holes a gang needs -- is in the median start, not only
in the busy-period stretch of :mod:`.eta`, which keeps the starts the replayed
streams do not cover. The draws run then even where no runtime varies.
"""

from __future__ import annotations

import heapq
import math
import random
from time import perf_counter
from typing import TYPE_CHECKING

from queueing.engine.cyclestate import F_NEVER, order_key, runtime_of
from queueing.engine.eta import finish_etas
from queueing.engine.forecast_arrivals import Arrival, arrival_id, draw_arrivals, history
from queueing.engine.forecast_sim import OVERDUE_FACTOR, Event, Simulation
from queueing.engine.types import PREEMPTED, Eta, Position, WorkloadSpec

if TYPE_CHECKING:
    from queueing.engine.cyclestate import CycleState as Cycle

__all__ = ["DRAWS", "MIN_DRAWS", "forecast", "positions"]

#: Runtime draws behind the p50: odd, so that the median is one of them (the middle
#: stratum's, quantile 1/2: see :func:`_uniforms`).
DRAWS = 15
#: Draws that stand when the budget ends the others: a median of fewer is kept (each
#: workload's strata come in an order of its own, so the first draws are a sample of
#: its law), of more than this many only.
MIN_DRAWS = 5


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
    drawn = 0
    spent = perf_counter() - t1
    # Each waiting workload whose p50 is a median over draws with arrivals in them:
    # arrivals are in its p50 already (no busy-period stretch, see .eta).
    with_arrivals: frozenset[int] = frozenset()
    drawn_until: tuple[frozenset[int], float] = (frozenset(), -math.inf)
    # The draws cost about DRAWS more of the run just made (more with arrivals in
    # them); the p90's run (when it is made) keeps the budget's last fifth.
    if not out_of_time and spent * (DRAWS + 2) <= budget:
        got = _median_starts(cy, deadline=t1 + budget * 0.8)
        if got is not None:
            mc, covered, drawn = got
            p50 = {**p50, **mc}
            with_arrivals = frozenset(wid for wid, t in mc.items() if t <= covered)
            drawn_until = (frozenset(mc), covered)
    p90: dict[int, float] = {}
    if not calibrated:
        sim90 = Simulation(cy, 1, p90_events, deadline=t1 + budget)
        p90 = sim90.run()
        out_of_time = out_of_time or sim90.out_of_time
    etas = finish_etas(
        cy,
        pos,
        p50,
        p90,
        out_of_time=out_of_time,
        with_arrivals=with_arrivals,
        drawn_until=drawn_until,
    )
    cy.stats["positions_s"] = t1 - t0
    cy.stats["eta_s"] = perf_counter() - t1
    cy.stats["eta_p50_known"] = sum(1 for e in etas.values() if e.p50 is not None)
    cy.stats["eta_p90_known"] = sum(1 for e in etas.values() if e.p90 is not None)
    cy.stats["eta_draws"] = drawn
    cy.stats["eta_with_arrivals"] = len(with_arrivals)
    return pos, etas


def _median_starts(cy: Cycle, deadline: float) -> tuple[dict[int, float], float, int] | None:
    """Each waiting workload's median start over ``DRAWS`` simulations with drawn
    runtimes and, where there is a history of them, drawn arrivals
    (:mod:`.forecast_arrivals`), until when every draw replayed all that arrives
    (-inf without arrivals), and how many draws it is the median of: fewer when the
    budget ran out, at least ``MIN_DRAWS`` (a draw cut short is not counted). None when
    nothing varies, or when the budget ran out before ``MIN_DRAWS`` draws."""
    laws: dict[int, _Law] = {}
    varies = False

    def law(w: WorkloadSpec) -> _Law:
        nonlocal varies
        got = laws.get(w.id)
        if got is None:
            got = laws[w.id] = _Law(
                runtime_of(cy, w, 0), runtime_of(cy, w, 1), w.expected_runtime_s
            )
            varies = varies or got.hi > got.lo
        return got

    uniforms: dict[int, list[float]] = {}

    def u_of(w: WorkloadSpec, j: int) -> float:
        us = uniforms.get(w.id)
        if us is None:
            us = uniforms[w.id] = _uniforms(w.id)
        return us[j]

    now = cy.now
    holding = _holders(cy)
    for _, w in holding:
        law(w)
    for w in cy.orphans:
        law(w)
    for q in cy.queues:
        for w in q.cands:
            law(w)
    past = history(cy)
    if not varies and not past:
        return None
    starts: dict[int, list[float]] = {}
    covered = math.inf if past else -math.inf
    done = 0
    for j in range(DRAWS):
        events: list[Event] = []
        seq = 0
        for qi, w in holding:
            seq += 1
            start = w.started_at if w.started_at is not None else now
            left = law(w).left(max(0.0, now - start), u_of(w, j))
            events.append((now + left, seq, qi, w, None))
        for w in cy.orphans:
            seq += 1
            events.append((now + law(w).at(u_of(w, j)), seq, -1, w, None))
        heapq.heapify(events)

        arrivals: list[Arrival] = []
        until = math.inf
        if past:
            arrivals, until = draw_arrivals(
                cy, past, j, lambda w, u: law(w).at(u), lasts=_INFLOW[j]
            )
        drawn = {arrival_id(k): r for k, (_, _, r) in enumerate(arrivals)}

        def draw(w: WorkloadSpec, j: int = j, drawn: dict[int, float] = drawn) -> float:
            r = drawn.get(w.id)
            return law(w).at(u_of(w, j)) if r is None else r

        sim = Simulation(cy, 0, events, deadline=deadline, draw=draw, arrivals=arrivals)
        got = sim.run()
        if sim.out_of_time:
            # Out of the budget: the draws made so far stand, if there are enough of
            # them (a live cycle under load; the median of none is the single run's).
            if done < MIN_DRAWS:
                return None
            break
        done += 1
        covered = min(covered, until)
        for wid, t in got.items():
            if wid >= 0:  # not an arrival of the draw's own
                starts.setdefault(wid, []).append(t)
    out: dict[int, float] = {}
    half = done // 2
    for wid, xs in starts.items():
        if len(xs) > half:  # else beyond the horizon in most draws
            xs.sort()
            out[wid] = xs[half]
    return out, covered, done


class _Law:
    """A workload's runtime as the forecast knows it: median ``m`` (the p50 runtime),
    90th percentile ``p90``, at most its declared ``limit``. Its quantile function is
    linear from ``lo`` to ``m`` over the lower half and from ``m`` to ``hi`` over the
    upper half, ``hi`` chosen so that the 90th percentile is ``p90`` (capped at the
    limit) and ``lo`` as far below the median as ``hi`` is above it (at least 0): the
    uniform law when nothing is capped -- the demo's 40-100 % of the limit exactly."""

    __slots__ = ("hi", "limit", "lo", "m")

    def __init__(self, m: float, p90: float, limit: float | None) -> None:
        hi = m + max(0.0, p90 - m) / 0.8
        if limit is not None and limit > 0:
            hi = min(hi, max(limit, m))
        self.m = m
        self.hi = hi
        self.limit = limit or 0.0
        self.lo = max(0.0, m - (hi - m))

    def at(self, u: float) -> float:
        """The runtime at quantile ``u``."""
        if u < 0.5:
            return self.lo + (self.m - self.lo) * u / 0.5
        return self.m + (self.hi - self.m) * (u - 0.5) / 0.5

    def cdf(self, r: float) -> float:
        if r <= self.lo:
            return 0.0
        if r < self.m:
            return 0.5 * (r - self.lo) / (self.m - self.lo)
        if r < self.hi:
            return 0.5 + 0.5 * (r - self.m) / (self.hi - self.m)
        return 1.0

    def left(self, ran: float, u: float) -> float:
        """What a workload that has run ``ran`` still runs, at quantile ``u`` of its
        law given that: past the law's top, the p50 simulation's rule (it ends before
        the limit, uniformly -- at once when past it; without a limit, within half of
        its median more)."""
        if ran < self.hi:
            c = self.cdf(ran)
            return max(0.0, self.at(c + u * (1.0 - c)) - ran)
        if self.limit > 0:
            return u * max(0.0, self.limit - ran)
        return u * 2 * OVERDUE_FACTOR[0] * self.m


#: Each draw's quantile of how long the inflow lasts (``forecast_arrivals.inflow_lasts``):
#: the centres of the ``DRAWS`` strata in an order of their own, so that the draws a
#: budget cuts short are still a sample of the law; the middle draw's is the median.
_INFLOW = [(k + 0.5) / DRAWS for k in random.Random(0x51ED).sample(range(DRAWS), DRAWS)]


def _uniforms(wid: int) -> list[float]:
    """A workload's ``DRAWS`` uniforms: the centres of the ``DRAWS`` strata of [0, 1),
    in an order of its own (Latin hypercube sampling), the same at every cycle. Their
    median is 1/2 exactly: a wait that hangs on one workload's end gets that
    workload's median end."""
    order = random.Random(wid * 0x9E3779B1 + 0x7F4A7C15).sample(range(DRAWS), DRAWS)
    return [(k + 0.5) / DRAWS for k in order]


def _holders(cy: Cycle) -> list[tuple[int, WorkloadSpec]]:
    """(quota index, workload) of what holds capacity and ends in its own time: not
    the preempted, victims or requeued (released at once, see Simulation.setup)."""
    released = cy.victim_ids | {r.workload_id for r in cy.requeues}
    return [
        (qi, w)
        for qi, ws in enumerate(cy.holding)
        for w in ws
        if w.phase != PREEMPTED and w.id not in released
    ]


def _holding_events(cy: Cycle) -> tuple[list[Event], list[Event]]:
    """When each holding workload ends, in the p50 and the p90 view (heapified)."""
    now = cy.now
    ev50: list[Event] = []
    ev90: list[Event] = []
    seq = 0
    for qi, w in _holders(cy):
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
