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
placement, Block/Intelligent blocking). Simplifications, on purpose:

* preemption in virtual time is the cycle's, simplified (:meth:`_Simulation._preempt`):
  a candidate that does not fit takes lower-priority work of its own quota
  (``preempt_within_quota``) and -- within its quota's ``min`` -- work of quotas of its
  tree above their runtime quota (``reclaim``), lowest priority and latest end first,
  sparing work due to end within ``preempt_grace_s``; it starts a cycle after its
  queue's next victim search (one per queue and quota per cycle). Victims release at
  once and are not simulated again; at most ``MAX_SIM_PREEMPTIONS`` searches per run;
* each queue looks ``eta_max_depth`` candidates ahead (or its ``max_depth``);
* runtime quota is recomputed every so many completions, not at each one;
* preempted victims and requeued workloads release at once; victims compete again
  with their original order; a waiting preemptor fits by the runtime quota without
  aged claims (``limit_base``: preemption judged it by that, and claims stay frozen
  while it waits) -- by the claimed limit it was forecast minutes late in gpu-heavy
  and started within one cycle;
* a running workload past its estimate is assumed to need a quarter (p50) or half
  (p90) of the estimate more; past the typical share of a declared limit, it ends
  between now and the limit (half way at the median);
* with ``cycle_interval_s``, what ends between two cycles is admitted at the next;
* completions within 2 % of their lead time are released together (an ETA two
  hours out is good to about two minutes).

The cost is bounded: the simulation stops at ``now + eta_horizon_s`` and when its
share of ``eta_budget_s`` is spent; workloads not admitted by then get no time and a
reason (:mod:`.eta`).

To stay cheap, the simulation starts from what the cycle learnt: a candidate that
failed on nodes, or whose quota is still short, is *filed* under what blocks it and
looked at again only when that changes -- per (quota node, resource) in a heap
ordered by the amount it needs (woken when headroom reaches it), or per (eligible
node set, resource) ordered by its per-pod need (woken when a node there frees
enough). A release wakes only about as many filed candidates as the freed room could
hold, smallest need first -- an approximation: in a cluster full of small work a
large, high-ranked candidate may be woken later than the real cycle would consider
it. Within one instant, failed gang shapes are memoised (capacity only shrinks until
the next release).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from time import perf_counter
from typing import TYPE_CHECKING

from queueing.engine.cyclestate import (
    F_NEVER,
    F_NODES,
    QueueState,
    nonpreemptible_short,
    order_key,
)
from queueing.engine.eta import finish_etas
from queueing.engine.fairshare import FairShare
from queueing.engine.nodes import NodeIndex
from queueing.engine.types import PREEMPTED, Eta, Position, WorkloadSpec

if TYPE_CHECKING:
    from queueing.engine.cyclestate import CycleState as Cycle

__all__ = ["forecast", "positions"]

#: Share of the expected runtime a running workload still needs once past it.
OVERDUE_FACTOR = (0.25, 0.5)
#: Completions this close (relative to how far ahead they are) are released together.
RESOLUTION = 0.02
#: How many candidates the simulation examines between two looks at the clock.
_CLOCK_EVERY = 64
#: Victim searches one forward run may make (each looks at ``MAX_SIM_VICTIMS`` at most).
MAX_SIM_PREEMPTIONS = 256
MAX_SIM_VICTIMS = 64
#: Gang placements one victim search may try.
_SIM_PLACEMENTS = 4


#: (time, sequence, quota index, workload, what it holds per node index or None to
#: read it from the workload's assignment at release).
Event = tuple[float, int, int, WorkloadSpec, "dict[int, dict[str, int]] | None"]


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
    sim50 = _Simulation(cy, 0, p50_events, deadline=t1 + (budget if calibrated else budget / 2))
    p50 = sim50.run()
    out_of_time = sim50.out_of_time
    p90: dict[int, float] = {}
    if not calibrated:
        sim90 = _Simulation(cy, 1, p90_events, deadline=t1 + budget)
        p90 = sim90.run()
        out_of_time = out_of_time or sim90.out_of_time
    etas = finish_etas(cy, pos, p50, p90, out_of_time=out_of_time)
    cy.stats["positions_s"] = t1 - t0
    cy.stats["eta_s"] = perf_counter() - t1
    cy.stats["eta_p50_known"] = sum(1 for e in etas.values() if e.p50 is not None)
    cy.stats["eta_p90_known"] = sum(1 for e in etas.values() if e.p90 is not None)
    return pos, etas


def _runtime_of(cy: Cycle, w: WorkloadSpec, q: int) -> float:
    if w.expected_runtime_s is not None and w.expected_runtime_s > 0:
        # A declared runtime is a limit; the queue's history says how much of it work
        # uses (p50, p90 of actual / declared).
        ratio = cy.snapshot.runtime_ratio.get(w.queue)
        if ratio is not None:
            return w.expected_runtime_s * min(1.0, max(0.0, ratio[q]))
        return w.expected_runtime_s
    hist = cy.snapshot.runtime_history.get(w.queue)
    if hist is not None:
        v = hist[q]
        if v and v > 0:
            return float(v)
    return cy.config.default_runtime_s


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
                continue  # released at once, see _Simulation.setup
            seq += 1
            start = w.started_at if w.started_at is not None else now
            declared = w.expected_runtime_s is not None and w.expected_runtime_s > 0
            for q, out in ((0, ev50), (1, ev90)):
                left = start + _runtime_of(cy, w, q) - now
                if left <= 0:
                    if declared:
                        # Past its typical runtime but not its limit: it ends between
                        # now and the limit (half way at the median).
                        limit_left = start + (w.expected_runtime_s or 0.0) - now
                        left = max(0.0, limit_left) * (0.5 if q == 0 else 1.0)
                    else:
                        left = _runtime_of(cy, w, q) * OVERDUE_FACTOR[q]
                out.append((now + left, seq, qi, w, None))
    for w in cy.orphans:
        seq += 1
        ev50.append((now + _runtime_of(cy, w, 0), seq, -1, w, None))
        ev90.append((now + _runtime_of(cy, w, 1), seq, -1, w, None))
    heapq.heapify(ev50)
    heapq.heapify(ev90)
    return ev50, ev90


class _Cand:
    """A waiting workload inside the simulation's window of its queue."""

    __slots__ = ("filed", "first", "idx", "qi", "queue", "req", "w")

    def __init__(self, w: WorkloadSpec, qi: int, queue: int, idx: int, first: bool) -> None:
        self.w = w
        self.qi = qi
        self.queue = queue
        self.idx = idx  # position in its queue's list
        self.first = first  # a waiting preemptor: goes before everyone
        self.req: Mapping[str, int] = w._request._d
        self.filed = False


#: A candidate's key in its queue is its list index shifted by this many bits; one
#: that ages in virtual time is given a key between the workloads aged at the start
#: and the rest (``_Simulation._age``).
_SPACE = 24


class _SimQueue:
    __slots__ = (
        "aged_base",
        "aged_n",
        "ages",
        "behind",
        "block_at",
        "cands",
        "dirty",
        "in_heap",
        "index",
        "moved",
        "nxt",
        "state",
        "window",
        "ws",
    )

    def __init__(self, index: int, state: QueueState, ws: list[WorkloadSpec]) -> None:
        self.index = index
        self.state = state
        self.ws = ws  # waiting workloads in queue order
        self.cands: dict[int, _Cand] = {}  # list index -> candidate (the window)
        self.nxt = 0  # next list index not yet in the window
        self.window = 0  # candidates in the window, not admitted
        self.dirty: list[int] = []  # heap of list indices to (re)check
        self.in_heap = False
        self.block_at: dict[int, int] = {}  # quota -> index of a failing blocking head
        self.behind: dict[int, list[int]] = {}  # quota -> indices waiting for that head
        self.ages: list[tuple[float, int]] | None = None  # (queued at, list index), heap
        self.aged_base = 0
        self.aged_n = 0
        self.moved: set[int] = set()  # list indices brought into the window by age


class _Simulation:
    """One forward run (p50 or p90) of the cycle in virtual time."""

    def __init__(self, cy: Cycle, q: int, events: list[Event], deadline: float) -> None:
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
        self.np_used = [dict(u) for u in cy.np_used]
        self.own_demand = [dict(d) for d in cy.own_demand]
        self.runtime = cy.runtime
        self.limit = cy.limit
        # A waiting preemptor was judged by the runtime quota without aged claims, and
        # claims stay frozen while it waits: it fits by that limit, as in the cycle.
        self.limit_base = cy.limit_base
        self.events = events
        self.seq = len(events) + 1
        self.eta: dict[int, float] = {}
        self.fair = self._fair()
        self.qheap: list[tuple[tuple[int, float, int, float, int], int]] = []
        self.quota_files: dict[tuple[int, str], list[tuple[int, int, int, _Cand]]] = {}
        self.node_files: dict[tuple[object, str], list[tuple[int, int, int, _Cand]]] = {}
        self.node_keys: dict[int, list[tuple[object, str]]] = {}
        self.failed_shapes: set[object] = set()
        self.node_how: dict[object, tuple[tuple[object, str], int] | None] = {}
        self.queues: list[_SimQueue] = []
        self.examined = 0
        self.out_of_time = False
        # Preemption in virtual time: what runs, per quota (id -> (workload, what it
        # holds per node or None, end time)); evicted ids whose end events are void.
        self.running: dict[
            int, dict[int, tuple[WorkloadSpec, dict[int, dict[str, int]] | None, float]]
        ] = {}
        self.evicted: set[int] = set()
        self.preempt_failed: set[tuple[int, int, object]] = set(cy.preempt_failed)
        self.preempts_left = MAX_SIM_PREEMPTIONS
        self.next_search: dict[tuple[int, int], float] = {}
        #: (time its next workload ages, queue index), built at the first step.
        self.age_heap: list[tuple[float, int]] | None = None
        tick = cfg.cycle_interval_s
        self.tick = tick if tick > 0 else 1.0

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

    # -- setup -----------------------------------------------------------------------

    def setup(self) -> None:
        cy = self.cy
        nindex = self.nodes.index
        for at, _, qi, w, held in self.events:
            if qi >= 0 and w.preemptible:
                self.running.setdefault(qi, {})[w.id] = (w, held, at)
        requeued = {r.workload_id for r in cy.requeues}
        victims = cy.victim_ids
        back: dict[str, list[WorkloadSpec]] = {}
        for qi, ws in enumerate(cy.holding):
            for w in ws:
                if w.phase == PREEMPTED or w.id in victims or w.id in requeued:
                    # Evicted (or being requeued): capacity comes back at once.
                    self._release(qi, w, None, demand=True)
                    if w.id in victims and w.queue in cy.queue_specs:
                        back.setdefault(w.queue, []).append(w)
                        d = self.own_demand[qi]
                        for k, v in w._request._d.items():
                            d[k] = d.get(k, 0) + v
        for a, w in zip(cy.admissions, cy.admitted_ws, strict=True):
            per_node = {nindex[n]: dict(r.raw) for n, r in a.assignment.items()}
            self._start(self.now, cy.quota_of[w.id], w, per_node)
        admitted = cy.admitted_ids
        states = {q.spec.name: q for q in cy.queues}
        for name in sorted(set(states) | set(back)):
            state = states.get(name) or QueueState(-1, cy.queue_specs[name], [])
            ws = state.cands  # admitted ones are skipped as the window fills
            if name in back:
                ws = sorted([w for w in ws if w.id not in admitted] + back[name], key=order_key)
            self.queues.append(_SimQueue(len(self.queues), state, ws))

    def _fill(self, sq: _SimQueue, *, initial: bool = False) -> None:
        """Bring candidates into the queue's window, filed or dirty.

        At the start, what the cycle learnt is reused: a candidate it failed to place
        waits for nodes, one whose quota is still short waits for that quota node, one
        behind a failing Block/Intelligent head waits for that head.
        """
        cy = self.cy
        depth = self.depth
        spec_depth = sq.state.spec.max_depth
        if spec_depth > 0:
            depth = min(depth, spec_depth)
        quota_of = cy.quota_of
        qindex = cy.tree.index
        waiting = cy.waiting
        fail = cy.fail
        blocks = sq.state.blocks
        admitted = cy.admitted_ids
        ws = sq.ws
        n = len(ws)
        while sq.window < depth and sq.nxt < n:
            li = sq.nxt
            w = ws[li]
            sq.nxt += 1
            if w.id in admitted or li in sq.moved:
                continue
            i = li << _SPACE
            f0 = fail.get(w.id)
            if f0 is not None and f0[0] == F_NEVER:
                continue
            sq.window += 1
            qi = quota_of.get(w.id)
            if qi is None:
                qi = qindex.get(w.quota, -1)
            c = _Cand(w, qi, sq.index, i, w.id in waiting)
            sq.cands[i] = c
            if initial and not c.first:
                b = sq.block_at.get(qi)
                if b is not None:
                    sq.behind.setdefault(qi, []).append(i)
                    continue
                f = fail.get(w.id)
                if f is not None and f[0] == F_NODES:
                    # The cycle just failed to place it; it waits for nodes to free up
                    # -- unless it gets in by preempting at one of the next cycles.
                    if self._preempt(sq, c, self.now, -1):
                        del sq.cands[i]
                        sq.window -= 1
                        continue
                    self._file(c, -1, "")
                    if blocks(w):
                        sq.block_at[qi] = i
                    continue
                fc, fk = self._quota_fail(qi, c.req, w=w)
                if fc >= 0:
                    if self._preempt(sq, c, self.now, fc):
                        del sq.cands[i]
                        sq.window -= 1
                        continue
                    self._file(c, fc, fk)
                    if blocks(w):
                        sq.block_at[qi] = i
                    continue
            heapq.heappush(sq.dirty, i)

    def _quota_fail(
        self,
        qi: int,
        req: Mapping[str, int],
        limit: list[dict[str, int]] | None = None,
        w: WorkloadSpec | None = None,
    ) -> tuple[int, str]:
        used = self.used
        if limit is None:
            limit = self.limit
        for node_q in self.tree.chains[qi]:
            u = used[node_q]
            lim = limit[node_q]
            for k, v in req.items():
                if u.get(k, 0) + v > lim.get(k, 0):
                    return node_q, k
        if w is not None and not w.preemptible:
            # The cycle's rule for a non-preemptible workload (within its quota's min).
            k = nonpreemptible_short(self.tree.mins[qi], self.np_used[qi], req)
            if k:
                return qi, k
        return -1, ""

    def _release(
        self,
        qi: int,
        w: WorkloadSpec,
        per_node: dict[int, dict[str, int]] | None,
        *,
        demand: bool,
        into: dict[int, dict[str, int]] | None = None,
    ) -> set[int]:
        """Give back what ``w`` held; node capacity goes to ``into`` when batching."""
        req = w._request._d
        if qi >= 0:
            for c in self.tree.chains[qi]:
                u = self.used[c]
                for k, v in req.items():
                    u[k] = u.get(k, 0) - v
                if not w.preemptible:
                    npu = self.np_used[c]
                    for k, v in req.items():
                        npu[k] = npu.get(k, 0) - v
            if demand:
                d = self.own_demand[qi]
                for k, v in req.items():
                    d[k] = d.get(k, 0) - v
        if per_node is None:
            nindex = self.nodes.index
            per_node = {}
            for n, r in w.assignment.items():
                i = nindex.get(n)
                if i is not None:
                    per_node[i] = dict(r.raw)
        if per_node:
            if into is None:
                self.nodes.release(per_node)
            else:
                for i, amount in per_node.items():
                    acc = into.get(i)
                    if acc is None:
                        into[i] = dict(amount)
                    else:
                        for k, v in amount.items():
                            acc[k] = acc.get(k, 0) + v
        return set(per_node)

    # -- the run ---------------------------------------------------------------------

    def run(self) -> dict[int, float]:
        if perf_counter() > self.deadline:
            return self.eta
        self.setup()
        for sq in self.queues:
            self._fill(sq, initial=True)
            self._schedule(sq)
        t = self.now
        n_running = len(self.events)
        recompute_every = max(64, n_running // 4)
        since = 0
        tree = self.tree
        while True:
            self._admit_round(t)
            if self.out_of_time or not self.events or perf_counter() > self.deadline:
                break
            t = self.events[0][0]
            if t > self.end:
                break
            # Completions within RESOLUTION of the lead time are released together: a
            # 2 % error on "in two hours" buys one admission pass instead of dozens.
            window = t + RESOLUTION * (t - self.now)
            tick = self.cy.config.cycle_interval_s
            if tick > 0:
                # Cycles run every ``tick``: what ends between two of them is admitted
                # at the next one, all at once.
                t = self.now + math.ceil((t - self.now) / tick - 1e-9) * tick
                window = max(window, t)
            touched_q: set[tuple[int, str]] = set()
            touched_n: set[int] = set()
            freed: dict[int, dict[str, int]] = {}
            while self.events and self.events[0][0] <= window:
                at, _, qi, w, held = heapq.heappop(self.events)
                if w.id in self.evicted:
                    self.evicted.discard(w.id)
                    continue
                if qi >= 0:
                    got = self.running.get(qi)
                    if got is not None:
                        got.pop(w.id, None)
                t = max(t, at)
                touched_n |= self._release(qi, w, held, demand=True, into=freed)
                if qi >= 0:
                    for c in tree.chains[qi]:
                        for k in w._request._d:
                            touched_q.add((c, k))
                since += 1
            if freed:
                self.nodes.release(freed)
            self.failed_shapes.clear()  # capacity grew: old failures may fit now
            self.preempt_failed.clear()
            if since >= recompute_every:
                since = 0
                self.runtime, _ = tree.runtime(self.own_demand, self.nodes.capacity)
                self._limits()
                self.fair = self._fair()
                touched_q = set(self.quota_files)
            self._wake_quota(touched_q)
            self._wake_nodes(touched_n)
            self._age(t)
        return self.eta

    def _age(self, t: float) -> None:
        """Workloads that reach their queue's ``aging_bound_s`` by ``t`` go first in it.

        As :func:`.aging.queue_order_key` orders a queue: the aged ahead of the rest, in
        the order they queued (which is the order they age in). Each is given a key
        after those aged at the start and before the others, brought into the window if
        it was beyond it, and looked at again.
        """
        queues = self.queues
        heap = self.age_heap
        if heap is None:
            # Per queue, when its next workload ages (one pass, no sorting): a queue's
            # own heap is built only once the simulation reaches that time.
            heap = self.age_heap = []
            for sq in queues:
                bound = sq.state.spec.aging_bound_s
                if bound is None:
                    continue
                start = self.now - max(0.0, bound)
                aged = 0
                first = math.inf
                for w in sq.ws:
                    at = w.queue_order_at
                    if at <= start:
                        aged += 1
                    elif at < first:
                        first = at
                sq.aged_base = (aged << _SPACE) - (1 << (_SPACE - 1))
                if first < math.inf:
                    heap.append((first + max(0.0, bound), sq.index))
            heapq.heapify(heap)
        while heap and heap[0][0] <= t:
            _, qidx = heapq.heappop(heap)
            sq = queues[qidx]
            bound = max(0.0, sq.state.spec.aging_bound_s or 0.0)
            h = sq.ages
            if h is None:
                start = self.now - bound
                h = sq.ages = [
                    (w.queue_order_at, li) for li, w in enumerate(sq.ws) if w.queue_order_at > start
                ]
                heapq.heapify(h)
            cutoff = t - bound
            while h and h[0][0] <= cutoff:
                _, li = heapq.heappop(h)
                self._aged(sq, li)
            if h:
                heapq.heappush(heap, (h[0][0] + bound, qidx))

    def _aged(self, sq: _SimQueue, li: int) -> None:
        """``sq.ws[li]`` has aged: it goes after those aged before it, before the rest."""
        cy = self.cy
        w = sq.ws[li]
        if w.id in self.eta or w.id in cy.admitted_ids:
            return
        old = li << _SPACE
        c = sq.cands.pop(old, None)
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
            c = _Cand(w, qi, sq.index, 0, w.id in cy.waiting)
        new = sq.aged_base + sq.aged_n
        sq.aged_n += 1
        c.idx = new
        for qb, b in list(sq.block_at.items()):
            if b == old:
                sq.block_at[qb] = new
        sq.cands[new] = c
        self._mark(c)

    def _limits(self) -> None:
        maxes = self.tree.maxes
        limit = []
        for i, rt in enumerate(self.runtime):
            lim = dict(rt)
            for k, cap in maxes[i].items():
                if lim.get(k, 0) > cap:
                    lim[k] = cap
            limit.append(lim)
        self.limit = self.limit_base = limit

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
        if sq.in_heap:
            return
        while sq.dirty and sq.dirty[0] not in sq.cands:
            heapq.heappop(sq.dirty)  # moved by age, or gone
        if sq.dirty:
            c = sq.cands[sq.dirty[0]]
            heapq.heappush(self.qheap, (self._key(sq, c), sq.index))
            sq.in_heap = True

    def _mark(self, c: _Cand) -> None:
        c.filed = False
        sq = self.queues[c.queue]
        heapq.heappush(sq.dirty, c.idx)
        self._schedule(sq)

    def _admit_round(self, t: float) -> None:
        qheap = self.qheap
        queues = self.queues
        nodes = self.nodes
        eta = self.eta
        cy = self.cy
        failed_shapes = self.failed_shapes
        deadline = self.deadline
        while qheap:
            self.examined += 1
            if self.examined % _CLOCK_EVERY == 0 and perf_counter() > deadline:
                self.out_of_time = True
                return
            key, qidx = heapq.heappop(qheap)
            sq = queues[qidx]
            sq.in_heap = False
            if not sq.dirty:
                continue
            i = heapq.heappop(sq.dirty)
            c = sq.cands.get(i)
            if c is None or c.w.id in eta or c.qi < 0:
                self._schedule(sq)
                continue
            w = c.w
            if not c.first:
                s2 = self.fair.score(c.qi, c.req)
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
            fail_c, fail_k = self._quota_fail(qi, req, self.limit_base if c.first else None, w)
            placed = None
            if fail_c < 0:
                shape = cy.shape(w)
                if shape not in failed_shapes:
                    placed = nodes.place(cy.reqs(w))
                    if placed is None:
                        failed_shapes.add(shape)
            if placed is not None:
                self._take(qi, w, req, placed.per_node)
                eta[w.id] = t
                self._start(t, qi, w, dict(placed.per_node))
                self._admitted(sq, i, qi)
            elif not c.first and self._preempt(sq, c, t, fail_c):
                self._admitted(sq, i, qi)
            else:
                if sq.state.blocks(w) and (b is None or i < b):
                    sq.block_at[qi] = i
                self._file(c, fail_c, fail_k)
            self._schedule(sq)

    def _admitted(self, sq: _SimQueue, i: int, qi: int) -> None:
        del sq.cands[i]
        sq.window -= 1
        if sq.block_at.get(qi) == i:
            del sq.block_at[qi]
            for j in sq.behind.pop(qi, []):
                heapq.heappush(sq.dirty, j)
        self._fill(sq)

    def _take(
        self,
        qi: int,
        w: WorkloadSpec,
        req: Mapping[str, int],
        per_node: Mapping[int, Mapping[str, int]],
    ) -> None:
        """Count an admission in virtual time: usage along its quota chain (and the
        non-preemptible usage), fair share, and its place on the nodes."""
        used = self.used
        for node_q in self.tree.chains[qi]:
            u = used[node_q]
            for k, v in req.items():
                u[k] = u.get(k, 0) + v
            if not w.preemptible:
                npu = self.np_used[node_q]
                for k, v in req.items():
                    npu[k] = npu.get(k, 0) + v
        self.fair.admitted(qi, req)
        self.nodes.commit(per_node)

    def _start(
        self, t: float, qi: int, w: WorkloadSpec, per_node: dict[int, dict[str, int]]
    ) -> None:
        """``w`` starts at ``t`` holding ``per_node``: its end is an event."""
        end = t + _runtime_of(self.cy, w, self.q)
        self.seq += 1
        heapq.heappush(self.events, (end, self.seq, qi, w, per_node))
        if qi >= 0 and w.preemptible:
            self.running.setdefault(qi, {})[w.id] = (w, per_node, end)

    def _preempt(self, sq: _SimQueue, c: _Cand, t: float, fail_c: int) -> bool:
        """Whether ``c`` gets in by preempting, as the cycle would (simplified).

        The cycle's rules, cheaply: in-quota victims of lower priority (its queue's
        ``preempt_within_quota``), and -- when its quota stays within its ``min`` --
        work of other quotas of the tree using more than their runtime quota
        (``reclaim``; of lower priority only under ``LowerPriority``). Victims expected
        to end within ``preempt_grace_s`` are awaited, not evicted. Lowest priority
        first, latest end first; enough to fit the quota chain and place the gang. The
        victims release at once (they are not simulated again: they were running, and
        have no ETA of their own); the preemptor starts a cycle after its queue's next
        victim search (one per queue and quota per cycle, as in the cycle).
        """
        cy = self.cy
        spec = sq.state.spec
        if not cy.config.preemption or not sq.state.may_preempt or self.preempts_left <= 0:
            return False
        w = c.w
        qi = c.qi
        shape = cy.shape(w)
        memo = (qi, w.priority, shape)
        if memo in self.preempt_failed or (-1, w.priority, shape) in self.preempt_failed:
            return False
        self.preempts_left -= 1
        self.preempt_failed.add(memo)  # cleared when capacity frees up (see run)
        tree = self.tree
        req = c.req
        chain = tree.chains[qi]
        used = self.used
        limit = self.limit_base
        need: dict[int, dict[str, int]] = {}
        for node_q in chain:
            u = used[node_q]
            lim = limit[node_q]
            for k, amount in req.items():
                d = u.get(k, 0) + amount - lim.get(k, 0)
                if d > 0:
                    need.setdefault(node_q, {})[k] = d
        grace = cy.config.preempt_grace_s
        pool: list[tuple[int, float, int, int]] = []
        if spec.preempt_within_quota != "Never":
            for vid, (v, _, end) in self.running.get(qi, {}).items():
                if v.priority < w.priority and end - t > grace:
                    pool.append((v.priority, -end, vid, qi))
        if spec.reclaim != "Never" and (not need or any(x != qi for x in need)):
            mins = tree.mins[qi]
            if all(used[qi].get(k, 0) + x <= mins.get(k, 0) for k, x in req.items()):
                lower = spec.reclaim == "LowerPriority"
                root = chain[-1]
                runtime = self.runtime
                chain_set = set(chain)
                for vq, members in self.running.items():
                    if vq in chain_set or tree.chains[vq][-1] != root or not members:
                        continue
                    u = used[vq]
                    rt = runtime[vq]
                    if not any(u.get(k, 0) > rt.get(k, 0) for k in req):
                        continue
                    for vid, (v, _, end) in members.items():
                        if (not lower or v.priority < w.priority) and end - t > grace:
                            pool.append((v.priority, -end, vid, vq))
        if not pool:
            return False
        pool = heapq.nsmallest(MAX_SIM_VICTIMS, pool)
        chains = tree.chains
        freed: dict[int, dict[str, int]] = {}
        extra: dict[int, dict[str, int]] = {}
        chosen: list[tuple[WorkloadSpec, int, dict[int, dict[str, int]]]] = []
        nindex = self.nodes.index
        reqs = cy.reqs(w)
        tries = _SIM_PLACEMENTS
        placed = None
        quota_short = bool(need)
        for _, _, vid, vq in pool:
            v, held, _ = self.running[vq][vid]
            vreq = v._request._d
            missing = [
                (node_q, k)
                for node_q in chains[vq]
                if node_q in need
                for k, d in need[node_q].items()
                if freed.get(node_q, {}).get(k, 0) < d
            ]
            if quota_short and not any(vreq.get(k, 0) > 0 for _, k in missing):
                continue  # it does not lower what is missing
            for node_q in chains[vq]:
                if node_q in need:
                    got = freed.setdefault(node_q, {})
                    for k, x in vreq.items():
                        got[k] = got.get(k, 0) + x
            per_node = held
            if per_node is None:
                per_node = {}
                for n, r in v.assignment.items():
                    ni = nindex.get(n)
                    if ni is not None:
                        per_node[ni] = dict(r.raw)
            chosen.append((v, vq, per_node))
            for ni, holds in per_node.items():
                acc = extra.setdefault(ni, {})
                for k, x in holds.items():
                    acc[k] = acc.get(k, 0) + x
            quota_short = any(
                freed.get(node_q, {}).get(k, 0) < d
                for node_q, miss in need.items()
                for k, d in miss.items()
            )
            if quota_short:
                continue
            placed = self.nodes.place(reqs, extra)
            if placed is not None:
                break
            tries -= 1
            if tries <= 0:
                return False
        if placed is None:
            return False
        # Evict: quota usage and node capacity come back now (their end events are void).
        for v, vq, per_node in chosen:
            self.evicted.add(v.id)
            del self.running[vq][v.id]
            self._release(vq, v, per_node, demand=True)
        self.preempt_failed.discard(memo)
        self._take(qi, w, req, placed.per_node)
        # The cycle at ``t`` (or, at the forecast's own instant, the next one) searches;
        # one search per queue and quota per cycle; the preemptor starts a cycle later.
        tick = self.tick
        at = t if t > self.now else self.now + tick
        skey = (sq.index, qi)
        at = max(at, self.next_search.get(skey, at))
        self.next_search[skey] = at + tick
        start = at + tick
        self.eta[w.id] = start
        self._start(start, qi, w, dict(placed.per_node))
        return True

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
        shape = self.cy.shape(c.w)
        how = self.node_how.get(shape)
        if how is None:
            reqs = self.cy.reqs(c.w)
            ps = max(reqs, key=lambda p: (self.nodes._size(p), p.name)) if reqs else None
            prim = self.nodes.primary(ps.elig, ps.req) if ps is not None else None
            how = self.node_how[shape] = (
                None if ps is None or prim is None else ((ps.elig, prim), ps.req.get(prim, 0))
            )
        if how is None:
            return
        key, need = how
        lst = self.node_files.get(key)
        if lst is None:
            lst = self.node_files[key] = []
            for n in self.nodes.eligible(key[0]):  # type: ignore[arg-type]
                self.node_keys.setdefault(n, []).append(key)
        heapq.heappush(lst, (need, c.w.id, self.seq, c))

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
            self._wake(lst, head)

    def _wake_nodes(self, touched: set[int]) -> None:
        if not touched or not self.node_files:
            return
        free = self.nodes.free
        for n in touched:
            for key in self.node_keys.get(n, ()):
                lst = self.node_files.get(key)
                if not lst:
                    continue
                self._wake(lst, free[n].get(key[1], 0))

    def _wake(self, lst: list[tuple[int, int, int, _Cand]], room: int) -> None:
        """Wake filed candidates whose need fits ``room``, smallest need first.

        Only about as many as ``room`` could hold (twice over) are woken: waking every
        small candidate of a full cluster for each freed slot would make one simulated
        instant as costly as a whole cycle. The rest stay filed for the next release.
        """
        budget = 2 * room
        woken = 0
        while lst and lst[0][0] <= room:
            need = lst[0][0]
            if woken and need > budget:
                break
            cand = heapq.heappop(lst)[3]
            if cand.filed:
                self._mark(cand)
                woken += 1
                budget -= max(need, 1)
