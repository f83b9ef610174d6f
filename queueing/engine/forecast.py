"""Positions and ETAs for the workloads left waiting after a cycle.

**Position** is the workload's rank (1-based) in its queue and in the global order
the engine would consider it: waiting preemptors first, then the tournament merge of
the queues (queue priority, fair-share score with the candidate's request, workload
priority, queue-order time, id) at the cycle's end state. Only workloads that compete
now get a position; one backing off gets an explanation instead.

**ETA** comes from a forward simulation of the cycle in virtual time. Running and
admitted workloads finish after their expected remaining runtime -- the declared
``expected_runtime_s`` if any, else their queue's observed runtime quantile, else
``default_runtime_s``. The p50 run uses p50 runtimes, the p90 run p90 runtimes. At
each completion the freed quota and node capacity go to the waiting workloads in the
same order and with the same fit rules as the real cycle (quota chain, gang
placement, Block/Intelligent blocking). Simplifications, on purpose:

* no preemption in virtual time (the forecast is pessimistic for high priority);
* each queue looks ``eta_max_depth`` candidates ahead;
* runtime quota is recomputed every so many completions, not at each one;
* preempted victims release at once and compete again with their original order;
* a running workload past its estimate is assumed to need a quarter (p50) or half
  (p90) of the estimate more.

The cost is bounded: the simulation stops at ``now + eta_horizon_s`` and when its
share of ``eta_budget_s`` is spent; workloads not admitted by then get ``None``.

To stay cheap, a candidate that does not fit is *filed* under what blocked it and
only looked at again when that changes: per (quota node, resource) in a heap ordered
by the amount it needs (woken when headroom reaches it), or per (eligible node set,
resource) ordered by the per-pod need (woken when a node there frees enough).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from time import perf_counter
from typing import TYPE_CHECKING

from queueing.engine.fairshare import FairShare
from queueing.engine.nodes import NodeIndex
from queueing.engine.types import PREEMPTED, Eta, Position, WorkloadSpec

if TYPE_CHECKING:
    from queueing.engine.cycle import Cycle, QueueState

__all__ = ["forecast", "positions"]

#: Share of the expected runtime a running workload still needs once past it.
OVERDUE_FACTOR = (0.25, 0.5)


def _order_key(w: WorkloadSpec) -> tuple[int, float, int]:
    return (-w.priority, w.queue_order_at, w.id)


def positions(cy: Cycle) -> dict[int, Position]:
    """Rank of every competing, not admitted workload in its queue and globally."""
    admitted = cy.admitted_ids
    waiting = cy.waiting
    quota_of = cy.quota_of
    score = cy.fair.score
    in_queue: dict[int, int] = {}
    lists: list[list[WorkloadSpec]] = []
    for q in cy.queues:
        lst = [w for w in q.cands if w.id not in admitted]
        for n, w in enumerate(lst, 1):
            in_queue[w.id] = n
        lists.append(lst)
    order: list[int] = []
    first = sorted(
        (w for lst in lists for w in lst if w.id in waiting),
        key=_order_key,
    )
    order.extend(w.id for w in first)
    heap: list[tuple[int, float, int, float, int, int, int]] = []
    push = heapq.heappush
    pop = heapq.heappop

    def advance(qidx: int, pos: int) -> None:
        lst = lists[qidx]
        while pos < len(lst) and lst[pos].id in waiting:
            pos += 1
        if pos < len(lst):
            w = lst[pos]
            push(
                heap,
                (
                    -cy.queues[qidx].spec.priority,
                    score(quota_of[w.id], w._request._d),
                    -w.priority,
                    w.queue_order_at,
                    w.id,
                    qidx,
                    pos,
                ),
            )

    for qidx in range(len(lists)):
        advance(qidx, 0)
    while heap:
        entry = pop(heap)
        order.append(entry[4])
        advance(entry[5], entry[6] + 1)
    return {wid: Position(in_queue[wid], g) for g, wid in enumerate(order, 1)}


def forecast(cy: Cycle) -> tuple[dict[int, Position], dict[int, Eta]]:
    """Positions and p50/p90 ETAs for the waiting workloads of a finished cycle."""
    t0 = perf_counter()
    pos = positions(cy)
    t1 = perf_counter()
    budget = max(0.0, cy.config.eta_budget_s)
    p50 = _Simulation(cy, 0, deadline=t1 + budget / 2).run()
    t2 = perf_counter()
    p90 = _Simulation(cy, 1, deadline=t2 + max(0.0, budget - (t2 - t1))).run()
    etas = {wid: Eta(p50.get(wid), p90.get(wid)) for wid in pos}
    cy.stats["positions_s"] = t1 - t0
    cy.stats["eta_s"] = perf_counter() - t1
    cy.stats["eta_p50_known"] = sum(1 for e in etas.values() if e.p50 is not None)
    cy.stats["eta_p90_known"] = sum(1 for e in etas.values() if e.p90 is not None)
    return pos, etas


class _Cand:
    """A waiting workload inside the simulation."""

    __slots__ = ("filed", "first", "idx", "qi", "queue", "req", "w")

    def __init__(self, w: WorkloadSpec, qi: int, queue: int, idx: int, first: bool) -> None:
        self.w = w
        self.qi = qi
        self.queue = queue
        self.idx = idx  # position in its queue's list
        self.first = first  # a waiting preemptor: goes before everyone
        self.req: Mapping[str, int] = w._request._d
        self.filed = False


class _SimQueue:
    __slots__ = ("behind", "block_at", "cands", "dirty", "in_heap", "nxt", "state", "window")

    def __init__(self, state: QueueState, cands: list[_Cand]) -> None:
        self.state = state
        self.cands = cands
        self.nxt = 0  # next list index not yet in the window
        self.window = 0  # candidates in the window (not admitted)
        self.dirty: list[int] = []  # heap of list indices to (re)check
        self.in_heap = False
        self.block_at: dict[int, int] = {}  # quota -> index of a failing blocking head
        self.behind: dict[int, list[int]] = {}  # quota -> indices waiting for that head


class _Simulation:
    """One forward run (p50 or p90) of the cycle in virtual time."""

    def __init__(self, cy: Cycle, q: int, deadline: float) -> None:
        self.cy = cy
        self.q = q
        self.deadline = deadline
        cfg = cy.config
        self.now = cy.now
        self.end = cy.now + max(0.0, cfg.eta_horizon_s)
        self.depth = max(1, cfg.eta_max_depth)
        self.tree = cy.tree
        self.nodes: NodeIndex = cy.nodes.clone()
        # Reservations are the cycle's business; the simulation starts from true usage.
        self.used = [dict(u) for u in cy.used]
        self.own_demand = [dict(d) for d in cy.own_demand]
        self.runtime = cy.runtime
        self.limit = [dict(x) for x in cy.limit]
        self.history = cy.snapshot.runtime_history
        self.default_runtime = cfg.default_runtime_s
        self.events: list[tuple[float, int, int, Mapping[str, int], dict[int, dict[str, int]]]] = []
        self.seq = 0
        self.eta: dict[int, float] = {}
        self.fair = self._fair()
        self.qheap: list[tuple[tuple[int, float, int, float, int], int]] = []
        self.quota_files: dict[tuple[int, str], list[tuple[int, int, int, _Cand]]] = {}
        self.node_files: dict[tuple[object, str], list[tuple[int, int, int, _Cand]]] = {}
        self.node_keys: dict[int, list[tuple[object, str]]] = {}
        self.recompute_every = 8
        self.steps = 0
        self.queues: list[_SimQueue] = []

    def _fair(self) -> FairShare:
        cy = self.cy
        cfg = cy.config
        return FairShare(
            cfg.fair_share_mode,
            cfg.blend_alpha,
            cfg.usage_half_life_s,
            cfg.entry_penalty_s,
            self.runtime,
            self.used,
            cy.fair.ledger,
            cy.tree.fair_weight,
        )

    # -- runtimes --------------------------------------------------------------------

    def runtime_of(self, w: WorkloadSpec) -> float:
        if w.expected_runtime_s is not None and w.expected_runtime_s > 0:
            return w.expected_runtime_s
        hist = self.history.get(w.queue)
        if hist is not None:
            v = hist[self.q]
            if v and v > 0:
                return float(v)
        return self.default_runtime

    def remaining(self, w: WorkloadSpec) -> float:
        total = self.runtime_of(w)
        start = w.started_at if w.started_at is not None else self.now
        left = start + total - self.now
        if left <= 0:
            declared = w.expected_runtime_s is not None and w.expected_runtime_s > 0
            left = 0.0 if declared else total * OVERDUE_FACTOR[self.q]
        return left

    def add_event(
        self, at: float, qi: int, req: Mapping[str, int], per_node: dict[int, dict[str, int]]
    ) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at, self.seq, qi, req, per_node))

    # -- setup -----------------------------------------------------------------------

    def setup(self) -> list[_SimQueue]:
        cy = self.cy
        nindex = self.nodes.index
        released: list[WorkloadSpec] = []
        requeued = {r.workload_id for r in cy.requeues}
        victims = cy.victim_ids
        for qi, ws in enumerate(cy.holding):
            for w in ws:
                per_node = self._per_node(w, nindex)
                if w.phase == PREEMPTED or w.id in victims or w.id in requeued:
                    # Evicted (or being requeued): capacity comes back at once.
                    self._release(qi, w._request._d, per_node, demand=True)
                    if w.id in victims:
                        released.append(w)
                    continue
                self.add_event(self.now + self.remaining(w), qi, w._request._d, per_node)
        for w in cy.orphans:
            self.add_event(self.now + self.remaining(w), -1, {}, self._per_node(w, nindex))
        by_id = {w.id: w for q in cy.queues for w in q.cands}
        for a in cy.admissions:
            w = by_id[a.workload_id]
            per_node = {nindex[n]: dict(r.raw) for n, r in a.assignment.items()}
            self.add_event(
                self.now + self.runtime_of(w), cy.quota_of[w.id], w._request._d, per_node
            )
        # Victims compete again, in their queue with their original order.
        extra: dict[str, list[WorkloadSpec]] = {}
        qindex = cy.tree.index
        for w in released:
            if w.queue in cy.queue_specs and w.quota in qindex:
                extra.setdefault(w.queue, []).append(w)
                d = self.own_demand[qindex[w.quota]]
                for k, v in w._request._d.items():
                    d[k] = d.get(k, 0) + v
        queues: list[_SimQueue] = []
        admitted = cy.admitted_ids
        waiting = cy.waiting
        quota_of = cy.quota_of
        states = {q.spec.name: q for q in cy.queues}
        from queueing.engine.cycle import QueueState

        for name in sorted(set(states) | set(extra)):
            state = states.get(name) or QueueState(-1, cy.queue_specs[name], [])
            ws = [w for w in state.cands if w.id not in admitted]
            if name in extra:
                ws.extend(extra[name])
                ws.sort(key=_order_key)
            sq_index = len(queues)
            cands = [
                _Cand(w, quota_of.get(w.id, qindex.get(w.quota, -1)), sq_index, i, w.id in waiting)
                for i, w in enumerate(ws)
            ]
            queues.append(_SimQueue(state, cands))
        self.runtime, _ = cy.tree.runtime(self.own_demand, self.nodes.capacity)
        self._limits()
        self.fair = self._fair()
        return queues

    @staticmethod
    def _per_node(w: WorkloadSpec, nindex: Mapping[str, int]) -> dict[int, dict[str, int]]:
        out: dict[int, dict[str, int]] = {}
        for n, r in w.assignment.items():
            i = nindex.get(n)
            if i is not None:
                out[i] = dict(r.raw)
        return out

    def _limits(self) -> None:
        maxes = self.tree.maxes
        self.limit = []
        for i, rt in enumerate(self.runtime):
            lim = dict(rt)
            for k, cap in maxes[i].items():
                if lim.get(k, 0) > cap:
                    lim[k] = cap
            self.limit.append(lim)

    def _release(
        self, qi: int, req: Mapping[str, int], per_node: dict[int, dict[str, int]], *, demand: bool
    ) -> None:
        if qi >= 0:
            for c in self.tree.chains[qi]:
                u = self.used[c]
                for k, v in req.items():
                    u[k] = u.get(k, 0) - v
            if demand:
                d = self.own_demand[qi]
                for k, v in req.items():
                    d[k] = d.get(k, 0) - v
        if per_node:
            self.nodes.release(per_node)

    # -- the run ---------------------------------------------------------------------

    def run(self) -> dict[int, float]:
        queues = self.setup()
        self.queues = queues
        depth = self.depth
        for sq in queues:
            while sq.window < depth and sq.nxt < len(sq.cands):
                heapq.heappush(sq.dirty, sq.nxt)
                sq.nxt += 1
                sq.window += 1
            self._schedule(sq)
        t = self.now
        n_running = len(self.events)
        self.recompute_every = max(8, n_running // 8)
        since = 0
        steps = 0
        while True:
            self._admit_round(t)
            steps += 1
            if not self.events or perf_counter() > self.deadline:
                break
            t = self.events[0][0]
            if t > self.end:
                break
            touched_q: set[tuple[int, str]] = set()
            touched_n: set[int] = set()
            while self.events and self.events[0][0] <= t:
                _, _, qi, req, per_node = heapq.heappop(self.events)
                self._release(qi, req, per_node, demand=True)
                if qi >= 0:
                    for c in self.tree.chains[qi]:
                        for k in req:
                            touched_q.add((c, k))
                touched_n.update(per_node)
                since += 1
            if since >= self.recompute_every:
                since = 0
                self.runtime, _ = self.tree.runtime(self.own_demand, self.nodes.capacity)
                self._limits()
                self.fair = self._fair()
                touched_q = set(self.quota_files)
            self._wake_quota(touched_q)
            self._wake_nodes(touched_n)
        self.steps = steps
        return self.eta

    def _key(self, sq: _SimQueue, c: _Cand) -> tuple[int, float, int, float, int]:
        if c.first:
            return (-(2**62), -math.inf, -c.w.priority, c.w.queue_order_at, c.w.id)
        return (
            -sq.state.spec.priority,
            self.fair.score(c.qi, c.req) if c.qi >= 0 else math.inf,
            -c.w.priority,
            c.w.queue_order_at,
            c.w.id,
        )

    def _schedule(self, sq: _SimQueue) -> None:
        if sq.dirty and not sq.in_heap:
            c = sq.cands[sq.dirty[0]]
            heapq.heappush(self.qheap, (self._key(sq, c), c.queue))
            sq.in_heap = True

    def _mark(self, c: _Cand) -> None:
        c.filed = False
        sq = self.queues[c.queue]
        heapq.heappush(sq.dirty, c.idx)
        self._schedule(sq)

    def _admit_round(self, t: float) -> None:
        qheap = self.qheap
        queues = self.queues
        score = self.fair.score
        tree = self.tree
        used = self.used
        limit = self.limit
        nodes = self.nodes
        eta = self.eta
        depth = self.depth
        while qheap:
            key, qidx = heapq.heappop(qheap)
            sq = queues[qidx]
            sq.in_heap = False
            if not sq.dirty:
                continue
            i = heapq.heappop(sq.dirty)
            c = sq.cands[i]
            w = c.w
            if w.id in eta or c.qi < 0:
                self._schedule(sq)
                continue
            if not c.first:
                s2 = score(c.qi, c.req)
                if s2 > key[1]:
                    heapq.heappush(sq.dirty, i)
                    heapq.heappush(qheap, ((key[0], s2, *key[2:]), qidx))
                    sq.in_heap = True
                    continue
            qi = c.qi
            b = sq.block_at.get(qi)
            if b is not None and b < i:
                sq.behind.setdefault(qi, []).append(i)
                self._schedule(sq)
                continue
            req = c.req
            fail_c = -1
            fail_k = ""
            for node_q in tree.chains[qi]:
                u = used[node_q]
                lim = limit[node_q]
                for k, v in req.items():
                    if u.get(k, 0) + v > lim.get(k, 0):
                        fail_c, fail_k = node_q, k
                        break
                if fail_c >= 0:
                    break
            placed = None
            if fail_c < 0:
                placed = nodes.place(self.cy.reqs(w))
            if placed is not None:
                for node_q in tree.chains[qi]:
                    u = used[node_q]
                    for k, v in req.items():
                        u[k] = u.get(k, 0) + v
                self.fair.admitted(qi, req)
                nodes.commit(placed.per_node)
                eta[w.id] = t
                self.add_event(t + self.runtime_of(w), qi, req, dict(placed.per_node))
                sq.window -= 1
                if sq.block_at.get(qi) == i:
                    del sq.block_at[qi]
                    for j in sq.behind.pop(qi, []):
                        heapq.heappush(sq.dirty, j)
                while sq.window < depth and sq.nxt < len(sq.cands):
                    heapq.heappush(sq.dirty, sq.nxt)
                    sq.nxt += 1
                    sq.window += 1
            else:
                if sq.state.blocks(w) and (b is None or i < b):
                    sq.block_at[qi] = i
                self._file(c, fail_c, fail_k)
            self._schedule(sq)

    def _file(self, c: _Cand, fail_c: int, fail_k: str) -> None:
        # Filing twice is harmless: a stale entry only wakes a candidate for a recheck.
        c.filed = True
        self.seq += 1
        if fail_c >= 0:
            heapq.heappush(
                self.quota_files.setdefault((fail_c, fail_k), []),
                (c.req.get(fail_k, 0), c.w.id, self.seq, c),
            )
            return
        reqs = self.cy.reqs(c.w)
        ps = max(reqs, key=lambda p: (self.nodes._size(p), p.name))
        prim = self.nodes.primary(ps.elig, ps.req)
        if prim is None:
            return
        key = (ps.elig, prim)
        lst = self.node_files.get(key)
        if lst is None:
            lst = self.node_files[key] = []
            for n in self.nodes.eligible(ps.elig):
                self.node_keys.setdefault(n, []).append(key)
        heapq.heappush(lst, (ps.req.get(prim, 0), c.w.id, self.seq, c))

    def _wake_quota(self, touched: set[tuple[int, str]]) -> None:
        files = self.quota_files
        used = self.used
        limit = self.limit
        for key in touched:
            lst = files.get(key)
            if not lst:
                continue
            c_node, k = key
            head = limit[c_node].get(k, 0) - used[c_node].get(k, 0)
            while lst and lst[0][0] <= head:
                cand = heapq.heappop(lst)[3]
                if cand.filed:
                    self._mark(cand)

    def _wake_nodes(self, touched: set[int]) -> None:
        if not touched or not self.node_files:
            return
        free = self.nodes.free
        for n in touched:
            for key in self.node_keys.get(n, ()):
                lst = self.node_files.get(key)
                if not lst:
                    continue
                have = free[n].get(key[1], 0)
                while lst and lst[0][0] <= have:
                    cand = heapq.heappop(lst)[3]
                    if cand.filed:
                        self._mark(cand)
