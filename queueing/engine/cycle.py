"""One admission cycle: snapshot in, decisions out.

The steps, in order (DESIGN section 3):

1. **Index** the snapshot: quota tree, node free capacity, holdings, the competing
   workloads per queue in queue order (priority, queue-order time, id).
2. **Runtime quota** for every quota node (:mod:`.quota`).
3. **Timeouts**: admitted workloads that never started within their queue's
   ``admission_timeout_s`` are requeued with backoff (they keep holding capacity
   until the caller suspends them).
4. **Nominated first**: preemptors from earlier cycles whose victims have released
   their capacity are admitted before anyone else may take it; those still waiting
   reserve what they will need.
5. **Tournament**: the queues' candidates compete in a heap ordered by queue
   priority, fair-share score, workload priority, queue-order time and id; the
   scores are re-evaluated lazily after every admission. Each candidate must fit its
   quota chain (``used + request <= min(runtime, max)`` at every level) and place
   all its pods at once. A candidate that does not fit may preempt (victims are
   marked Preempted, the preemptor waits for a later cycle with the capacity
   reserved) and, under Block or Intelligent, blocks those behind it on its quota.
6. **Explain** every workload left waiting (:mod:`.explain`).
7. **Positions and ETA** (:mod:`.forecast`), unless ``forecast=False``.

Admissions update the in-memory state as they happen, so the rest of the cycle
sees them. Within a cycle capacity only shrinks (victims keep holding until the
cluster confirms), which makes failures safe to memoise.
"""

from __future__ import annotations

import gc
import heapq
from collections.abc import Mapping
from time import perf_counter
from typing import TYPE_CHECKING, Any

from queueing.engine import backoff
from queueing.engine.fairshare import FairShare
from queueing.engine.nodes import NodeIndex, PodSetReq, elig_key, podset_reqs
from queueing.engine.quota import QuotaTree
from queueing.engine.resources import Resources
from queueing.engine.types import (
    ADMITTED,
    BACKOFF,
    HOLDING_PHASES,
    PENDING,
    POLICY_INTELLIGENT,
    PREEMPTED,
    Admission,
    CycleResult,
    Preemption,
    QueueSpec,
    Requeue,
    Snapshot,
    WorkloadSpec,
)

if TYPE_CHECKING:
    from queueing.engine.preemption import Preemptor

__all__ = ["Cycle", "run_cycle"]

# Failure records (why a candidate was not admitted), kept per workload id.
F_QUOTA = 0  # (F_QUOTA, chain node index)
F_NODES = 1  # (F_NODES, shape key)
F_POLICY = 2  # (F_POLICY, blocking workload id)
F_DEPTH = 3  # (F_DEPTH, 0)
F_WAITING = 4  # (F_WAITING, 0): nominated, victims still releasing
F_NOTREACHED = 5  # (F_NOTREACHED, 0)

ShapeKey = tuple[tuple[frozenset[tuple[str, int]], int, Any], ...]


def _order_key(w: WorkloadSpec) -> tuple[int, float, int]:
    return (-w.priority, w.queue_order_at, w.id)


class QueueState:
    """A queue's candidates for this cycle and how far the cycle got into them."""

    __slots__ = (
        "block_all",
        "blocked",
        "cands",
        "index",
        "intelligent",
        "limit",
        "may_preempt",
        "pos",
        "spec",
        "threshold",
    )

    def __init__(self, index: int, spec: QueueSpec, cands: list[WorkloadSpec]) -> None:
        self.index = index
        self.spec = spec
        self.cands = cands
        self.pos = 0
        depth = spec.max_depth
        self.limit = len(cands) if depth <= 0 else min(depth, len(cands))
        #: quota index -> id of the head that blocks it (Block / Intelligent).
        self.blocked: dict[int, int] = {}
        self.block_all = spec.blocking
        self.intelligent = spec.policy == POLICY_INTELLIGENT
        self.threshold = spec.priority_threshold
        self.may_preempt = not (spec.preempt_within_quota == "Never" and spec.reclaim == "Never")

    def blocks(self, w: WorkloadSpec) -> bool:
        """Whether a failure of ``w`` blocks those behind it on the same quota."""
        return self.block_all or (self.intelligent and w.priority >= self.threshold)


class Cycle:
    """The mutable state of one cycle. Build it, call :meth:`run`, read :meth:`result`.

    Attributes are public so the preemption, explanation and forecast steps (and
    tests) can read them; only this module's methods change them.
    """

    def __init__(self, snapshot: Snapshot) -> None:
        t0 = perf_counter()
        self.snapshot = snapshot
        self.config = cfg = snapshot.config
        self.now = now = snapshot.now
        self.stats: dict[str, float] = {}
        self.tree = tree = QuotaTree(snapshot.quotas)
        self.nodes = nodes = NodeIndex(snapshot.nodes, cfg.pool_label)
        self.queue_specs: dict[str, QueueSpec] = {q.name: q for q in snapshot.queues}
        nq = len(tree)
        qindex = tree.index
        own_used: list[dict[str, int]] = [{} for _ in range(nq)]
        own_pend: list[dict[str, int]] = [{} for _ in range(nq)]
        #: Holding workloads per quota index (victim candidates and forecast input).
        self.holding: list[list[WorkloadSpec]] = [[] for _ in range(nq)]
        #: Holding workloads whose quota is not in the snapshot (still hold nodes).
        self.orphans: list[WorkloadSpec] = []
        #: Preempted victims still releasing, per preemptor id.
        self.inflight: dict[int, list[WorkloadSpec]] = {}
        #: Waiting in Backoff (requeue_at in the future).
        self.backing_off: list[WorkloadSpec] = []
        #: Competing workloads that name an unknown queue or quota.
        self.unknown: list[tuple[WorkloadSpec, str]] = []
        per_queue: dict[str, list[WorkloadSpec]] = {}
        self.quota_of: dict[int, int] = {}
        self.nominated_in: set[int] = set()
        queue_specs = self.queue_specs
        quota_of = self.quota_of
        for w in snapshot.workloads:
            ph = w.phase
            if ph == PENDING or (ph == BACKOFF and (w.requeue_at is None or w.requeue_at <= now)):
                qi = qindex.get(w.quota)
                if qi is None or w.queue not in queue_specs:
                    what = (
                        f"unknown quota {w.quota!r}" if qi is None else f"unknown queue {w.queue!r}"
                    )
                    self.unknown.append((w, what))
                    continue
                quota_of[w.id] = qi
                lst = per_queue.get(w.queue)
                if lst is None:
                    per_queue[w.queue] = [w]
                else:
                    lst.append(w)
                d = own_pend[qi]
                for k, v in w._request._d.items():
                    d[k] = d.get(k, 0) + v
                if w.nominated:
                    self.nominated_in.add(w.id)
            elif ph in HOLDING_PHASES:
                for node_name, amount in w.assignment.items():
                    nodes.hold(node_name, amount.raw)
                qi = qindex.get(w.quota)
                if qi is None:
                    self.orphans.append(w)
                else:
                    self.holding[qi].append(w)
                    d = own_used[qi]
                    for k, v in w._request._d.items():
                        d[k] = d.get(k, 0) + v
                if ph == PREEMPTED and w.preempted_by is not None:
                    self.inflight.setdefault(w.preempted_by, []).append(w)
            elif ph == BACKOFF:
                self.backing_off.append(w)
        for name, extra in snapshot.unlisted_demand.items():
            qi = qindex.get(name)
            if qi is not None:
                d = own_pend[qi]
                for k, v in extra.items():
                    d[k] = d.get(k, 0) + int(v)
        t1 = perf_counter()
        # Step 2: runtime quota.
        own_demand = [dict(u) for u in own_used]
        for i, p in enumerate(own_pend):
            if p:
                d = own_demand[i]
                for k, v in p.items():
                    d[k] = d.get(k, 0) + v
        #: Per quota, usage plus competing requests of workloads attached directly to it.
        self.own_demand = own_demand
        self.runtime, self.demand = tree.runtime(own_demand, nodes.capacity)
        #: Subtree usage of holding workloads plus this cycle's admissions.
        self.used: list[dict[str, int]] = tree.subtree_sums(own_used)
        #: ``used`` plus capacity reserved for waiting preemptors (fit checks use this).
        self.load: list[dict[str, int]] = [dict(u) for u in self.used]
        self.limit: list[dict[str, int]] = []
        for i in range(nq):
            lim = dict(self.runtime[i])
            for k, cap in tree.maxes[i].items():
                if lim.get(k, 0) > cap:
                    lim[k] = cap
            self.limit.append(lim)
        ledger = snapshot.ledger
        self.fair = FairShare(
            cfg.fair_share_mode,
            cfg.blend_alpha,
            cfg.usage_half_life_s,
            cfg.entry_penalty_s,
            self.runtime,
            self.used,
            [ledger.get(name, {}) for name in tree.names],
            tree.fair_weight,
        )
        # Queues in name order; candidates in queue order.
        self.queues: list[QueueState] = []
        for name in sorted(per_queue):
            cands = per_queue[name]
            cands.sort(key=_order_key)
            self.queues.append(QueueState(len(self.queues), queue_specs[name], cands))
        # Decisions and bookkeeping.
        self.admissions: list[Admission] = []
        self.preemptions: list[Preemption] = []
        self.requeues: list[Requeue] = []
        self.admitted_ids: set[int] = set()
        self.admitted_ws: list[WorkloadSpec] = []  # in the order of ``admissions``
        #: Workloads chosen as victims this cycle (never chosen twice).
        self.victim_ids: set[int] = {w.id for ws in self.inflight.values() for w in ws}
        #: Preemptors waiting for capacity: id -> victim ids (in flight or new).
        self.waiting: dict[int, tuple[int, ...]] = {}
        self.fail: dict[int, tuple[int, Any]] = {}
        self.failed_shapes: set[ShapeKey] = set()
        self.preempt_tried: set[tuple[int, int]] = set()  # (queue index, quota index)
        self.preempt_failed: set[tuple[int, int, ShapeKey]] = set()
        #: Per quota, bumped on every admission (lets the tournament skip re-scoring).
        self.qver: list[int] = [0] * nq
        #: Bumped on every change of ``load``; guards the headroom cache.
        self._load_version = 0
        self._headroom: list[tuple[int, dict[str, tuple[int, int]]] | None] = [None] * nq
        self.preemptor: Preemptor | None = None  # victim-search indexes, built on demand
        self._reqs: dict[int, tuple[PodSetReq, ...]] = {}
        self._shape: dict[int, ShapeKey] = {}
        self.stats["index_s"] = t1 - t0
        self.stats["runtime_quota_s"] = perf_counter() - t1

    # -- helpers ---------------------------------------------------------------------

    def _prep(self, w: WorkloadSpec) -> None:
        pod_sets = w.pod_sets
        if len(pod_sets) == 1 and pod_sets[0].count > 0:
            ps = pod_sets[0]
            e = elig_key(ps)
            d = ps.requests._d
            self._reqs[w.id] = (PodSetReq(ps.name, ps.count, d, e),)
            self._shape[w.id] = ((frozenset(d.items()), ps.count, e),)
            return
        reqs = podset_reqs(pod_sets)
        live = [ps for ps in pod_sets if ps.count > 0]
        self._reqs[w.id] = reqs
        self._shape[w.id] = tuple(
            (frozenset(ps.requests._d.items()), ps.count, p.elig)
            for ps, p in zip(live, reqs, strict=True)
        )

    def reqs(self, w: WorkloadSpec) -> tuple[PodSetReq, ...]:
        """The placer's view of ``w``'s pod sets (cached)."""
        got = self._reqs.get(w.id)
        if got is None:
            self._prep(w)
            got = self._reqs[w.id]
        return got

    def shape(self, w: WorkloadSpec) -> ShapeKey:
        """A hashable key of ``w``'s pod sets: equal shapes place alike."""
        got = self._shape.get(w.id)
        if got is None:
            self._prep(w)
            got = self._shape[w.id]
        return got

    def quota_fail(
        self,
        qi: int,
        req: Mapping[str, int],
        freed: Mapping[int, Mapping[str, int]] | None = None,
    ) -> int:
        """A chain node where ``req`` does not fit (the tightest), or -1 when it fits.

        ``freed`` (chain node -> resources) is capacity to treat as released. Without
        it, the per-resource headroom of the chain is cached until the next change of
        load (consecutive candidates of one quota mostly ask the same question).
        """
        if freed:
            load = self.load
            limit = self.limit
            for c in self.tree.chains[qi]:
                lc = load[c]
                lim = limit[c]
                fr = freed.get(c)
                if fr:
                    for k, v in req.items():
                        if lc.get(k, 0) - fr.get(k, 0) + v > lim.get(k, 0):
                            return c
                else:
                    for k, v in req.items():
                        if lc.get(k, 0) + v > lim.get(k, 0):
                            return c
            return -1
        cached = self._headroom[qi]
        if cached is None or cached[0] != self._load_version:
            cached = (self._load_version, {})
            self._headroom[qi] = cached
        head = cached[1]
        for k, v in req.items():
            hk = head.get(k)
            if hk is None:
                hk = self._chain_headroom(qi, k)
                head[k] = hk
            if v > hk[0]:
                return hk[1]
        return -1

    def _chain_headroom(self, qi: int, k: str) -> tuple[int, int]:
        """Smallest ``limit - load`` for resource ``k`` along the chain, and where."""
        load = self.load
        limit = self.limit
        best = -1
        best_at = qi
        first = True
        for c in self.tree.chains[qi]:
            room = limit[c].get(k, 0) - load[c].get(k, 0)
            if first or room < best:
                best, best_at, first = room, c, False
        return best, best_at

    def admit(
        self,
        w: WorkloadSpec,
        qi: int,
        per_node: Mapping[int, Mapping[str, int]],
        placements: tuple[tuple[str, int, int], ...],
        *,
        nominated: bool = False,
    ) -> None:
        """Record an admission and take its quota and node capacity."""
        req = w._request._d
        self._load_version += 1
        for c in self.tree.chains[qi]:
            u = self.used[c]
            ld = self.load[c]
            for k, v in req.items():
                u[k] = u.get(k, 0) + v
                ld[k] = ld.get(k, 0) + v
        self.fair.admitted(qi, req)
        self.qver[qi] += 1
        self.nodes.commit(per_node)
        names = self.nodes.names
        assignment = {names[i]: Resources.from_raw(r) for i, r in sorted(per_node.items())}
        self.admissions.append(
            Admission(
                workload_id=w.id,
                quota=w.quota,
                queue=w.queue,
                assignment=assignment,
                placements=tuple((ps, names[i], k) for ps, i, k in placements),
                pool=self.nodes.pool_of(per_node),
                nominated=nominated,
            )
        )
        self.admitted_ids.add(w.id)
        self.admitted_ws.append(w)

    def reserve(
        self,
        qi: int,
        req: Mapping[str, int],
        freed: Mapping[int, Mapping[str, int]],
        per_node: Mapping[int, Mapping[str, int]] | None,
        node_extra: Mapping[int, Mapping[str, int]],
    ) -> None:
        """Hold back what a waiting preemptor needs beyond what its victims release."""
        self._load_version += 1
        for c in self.tree.chains[qi]:
            fr = freed.get(c, {})
            ld = self.load[c]
            for k, v in req.items():
                extra = v - fr.get(k, 0)
                if extra > 0:
                    ld[k] = ld.get(k, 0) + extra
        if per_node:
            take: dict[int, dict[str, int]] = {}
            for i, amount in per_node.items():
                x = node_extra.get(i, {})
                t = {k: v - x.get(k, 0) for k, v in amount.items() if v - x.get(k, 0) > 0}
                if t:
                    take[i] = t
            if take:
                self.nodes.commit(take)

    def victims_release(
        self, victims: list[WorkloadSpec]
    ) -> tuple[dict[int, dict[str, int]], dict[int, dict[str, int]]]:
        """What ``victims`` free: per quota chain node and per node index."""
        freed: dict[int, dict[str, int]] = {}
        extra: dict[int, dict[str, int]] = {}
        chains = self.tree.chains
        qindex = self.tree.index
        nindex = self.nodes.index
        for v in victims:
            vq = qindex.get(v.quota)
            if vq is not None:
                for c in chains[vq]:
                    f = freed.setdefault(c, {})
                    for k, x in v._request._d.items():
                        f[k] = f.get(k, 0) + x
            for node_name, amount in v.assignment.items():
                i = nindex.get(node_name)
                if i is None:
                    continue
                e = extra.setdefault(i, {})
                for k, x in amount.raw.items():
                    e[k] = e.get(k, 0) + x
        return freed, extra

    # -- steps -----------------------------------------------------------------------

    def run(self) -> None:
        """Steps 3 to 5: timeouts, nominated preemptors, the tournament."""
        t0 = perf_counter()
        self.requeue_timeouts()
        self.admit_nominated()
        t1 = perf_counter()
        self.tournament()
        t2 = perf_counter()
        self.stats["nominated_s"] = t1 - t0
        self.stats["tournament_s"] = t2 - t1
        # The victim-search indexes point back at the cycle; drop them so the cycle is
        # freed by reference counting, not by a later garbage collection.
        self.preemptor = None

    def requeue_timeouts(self) -> None:
        """Admitted workloads that never started within the queue's timeout go back."""
        now = self.now
        specs = self.queue_specs
        for ws in self.holding:
            for w in ws:
                if w.phase != ADMITTED or w.started_at is not None or w.admitted_at is None:
                    continue
                spec = specs.get(w.queue)
                if spec is None or spec.admission_timeout_s is None:
                    continue
                if now - w.admitted_at >= spec.admission_timeout_s:
                    attempts = w.attempts + 1
                    at = backoff.requeue_at(
                        now,
                        attempts,
                        spec.backoff_base_s,
                        spec.backoff_max_s,
                        spec.backoff_jitter,
                        seed=w.id,
                    )
                    self.requeues.append(Requeue(w.id, at, "AdmissionTimeout"))

    def admit_nominated(self) -> None:
        """Step 4: preemptors of earlier cycles go first while their capacity arrives."""
        ids = set(self.nominated_in) | set(self.inflight)
        if not ids:
            return
        cands = []
        for q in self.queues:
            for w in q.cands:
                if w.id in ids:
                    cands.append(w)
        cands.sort(key=_order_key)
        for w in cands:
            qi = self.quota_of[w.id]
            victims = self.inflight.get(w.id, [])
            req = w._request._d
            if not victims:
                # Everything it preempted is gone: admit now if it fits, else compete.
                if self.quota_fail(qi, req) < 0:
                    shape = self.shape(w)
                    if shape not in self.failed_shapes:
                        pl = self.nodes.place(self.reqs(w))
                        if pl is not None:
                            self.admit(w, qi, pl.per_node, pl.placements, nominated=True)
                            continue
                continue
            freed, extra = self.victims_release(victims)
            self.waiting[w.id] = tuple(v.id for v in victims)
            self.fail[w.id] = (F_WAITING, 0)
            if self.quota_fail(qi, req, freed) < 0:
                pl = self.nodes.place(self.reqs(w), extra)
                self.reserve(qi, req, freed, pl.per_node if pl else None, extra)

    def tournament(self) -> None:
        """Step 5: admit across queues in fair-share order, re-ranked after each admission."""
        from queueing.engine.preemption import find_victims

        score = self.fair.score
        quota_of = self.quota_of
        fail = self.fail
        failed_shapes = self.failed_shapes
        nodes = self.nodes
        waiting = self.waiting
        admitted_ids = self.admitted_ids
        quota_fail = self.quota_fail
        heap: list[tuple[int, float, int, float, int, int, int]] = []
        queues = self.queues
        preemption_on = self.config.preemption
        # Nominated workloads that were admitted or are waiting are out of the race.
        skip = admitted_ids | set(waiting)

        preempt_tried = self.preempt_tried
        shape_of = self.shape
        may_fit = nodes.may_fit

        def advance(q: QueueState) -> WorkloadSpec | None:
            """Move ``q`` to its next candidate that may be tried, or None.

            A candidate that cannot fit *now* cannot fit later in the cycle either
            (capacity only shrinks), so when it could not preempt anyway (its queue
            and quota used their one attempt, or preemption is off) it fails right
            here, without a turn in the tournament.
            """
            cands = q.cands
            blocked = q.blocked
            may_preempt = preemption_on and q.may_preempt
            qidx = q.index
            block_all = q.block_all
            intelligent = q.intelligent
            threshold = q.threshold
            headroom = self._headroom
            pos = q.pos
            limit = q.limit
            while pos < limit:
                w = cands[pos]
                wid = w.id
                if wid in skip:
                    if wid in waiting and q.blocks(w):
                        blocked.setdefault(quota_of[wid], wid)
                    pos += 1
                    continue
                qi = quota_of[wid]
                if blocked:
                    b = blocked.get(qi)
                    if b is not None:
                        fail[wid] = (F_POLICY, b)
                        pos += 1
                        continue
                if may_preempt and (qidx, qi) not in preempt_tried:
                    break
                # Fast fail: the quota chain's cached headroom, then the nodes' largest
                # free slot (single pod set), then the memo of failed gang shapes.
                req = w._request._d
                c = -1
                cached = headroom[qi]
                if cached is not None and cached[0] == self._load_version:
                    head = cached[1]
                    for k, v in req.items():
                        hk = head.get(k)
                        if hk is None:
                            c = quota_fail(qi, req)
                            break
                        if v > hk[0]:
                            c = hk[1]
                            break
                else:
                    c = quota_fail(qi, req)
                if c >= 0:
                    fail[wid] = (F_QUOTA, c)
                else:
                    pod_sets = w.pod_sets
                    if len(pod_sets) == 1 and not may_fit(
                        elig_key(pod_sets[0]), pod_sets[0].requests._d
                    ):
                        fail[wid] = (F_NODES, None)
                    else:
                        shape = shape_of(w)
                        if shape not in failed_shapes:
                            break
                        fail[wid] = (F_NODES, shape)
                if block_all or (intelligent and w.priority >= threshold):
                    blocked.setdefault(qi, wid)
                pos += 1
            q.pos = pos
            if pos < limit:
                return cands[pos]
            for w in cands[q.pos :]:
                if w.id not in skip and w.id not in fail:
                    b = q.blocked.get(quota_of[w.id])
                    fail[w.id] = (F_POLICY, b) if b is not None else (F_DEPTH, 0)
            return None

        qver = self.qver

        def entry_for(q: QueueState) -> tuple[int, float, int, float, int, int, int] | None:
            w = advance(q)
            if w is None:
                return None
            qi = quota_of[w.id]
            return (
                -q.spec.priority,
                score(qi, w._request._d),
                -w.priority,
                w.queue_order_at,
                w.id,
                q.index,
                qver[qi],
            )

        for q in queues:
            e = entry_for(q)
            if e is not None:
                heap.append(e)
        heapq.heapify(heap)
        heappop = heapq.heappop
        heappushpop = heapq.heappushpop
        heapreplace = heapq.heapreplace
        entry = heappop(heap) if heap else None
        while entry is not None:
            qp, s, np_, ts, wid, qidx, ver = entry
            q = queues[qidx]
            w = q.cands[q.pos]
            qi = quota_of[wid]
            req = w._request._d
            if qver[qi] != ver:
                # The quota admitted something since: its score can only have grown.
                s2 = score(qi, req)
                if s2 > s:
                    entry = heappushpop(heap, (qp, s2, np_, ts, wid, qidx, qver[qi]))
                    continue
            # Quota fit, then gang fit.
            c = quota_fail(qi, req)
            ok = False
            if c < 0:
                shape = self.shape(w)
                if shape not in failed_shapes:
                    pl = nodes.place(self.reqs(w))
                    if pl is not None:
                        self.admit(w, qi, pl.per_node, pl.placements)
                        ok = True
                    else:
                        failed_shapes.add(shape)
                if not ok:
                    fail[wid] = (F_NODES, shape)
            else:
                fail[wid] = (F_QUOTA, c)
            if not ok:
                if preemption_on and self._may_preempt(q, w, qi):
                    found = find_victims(self, w, qi, q.spec)
                    if found is not None:
                        self._preempt(w, qi, found)
                    else:
                        self.preempt_failed.add((-1 if c < 0 else qi, w.priority, self.shape(w)))
                if q.blocks(w):
                    q.blocked.setdefault(qi, wid)
            q.pos += 1
            # The queue's next candidate goes straight on when it still leads.
            nxt = entry_for(q)
            if nxt is None:
                entry = heappop(heap) if heap else None
            elif heap and heap[0] < nxt:
                entry = heapreplace(heap, nxt)
            else:
                entry = nxt

    def _may_preempt(self, q: QueueState, w: WorkloadSpec, qi: int) -> bool:
        """One victim search per queue and quota per cycle, for its first failing head."""
        if not q.may_preempt:
            return False
        key = (q.index, qi)
        if key in self.preempt_tried:
            return False
        self.preempt_tried.add(key)
        shape = self.shape(w)
        if (qi, w.priority, shape) in self.preempt_failed:
            return False
        # A gang that found no victims on nodes (its quota fitting) will not find them
        # for another quota at the same or lower priority either, as far as nodes go.
        return (-1, w.priority, shape) not in self.preempt_failed

    def _preempt(self, w: WorkloadSpec, qi: int, found: Any) -> None:
        victims, reasons, per_node, freed, extra = found
        for v, (reason, message) in zip(victims, reasons, strict=True):
            self.preemptions.append(Preemption(v.id, w.id, reason, message))
            self.victim_ids.add(v.id)
        self.waiting[w.id] = tuple(v.id for v in victims)
        self.fail[w.id] = (F_WAITING, 0)
        self.reserve(qi, w._request._d, freed, per_node, extra)

    # -- output ----------------------------------------------------------------------

    def result(self, *, forecast: bool = True) -> CycleResult:
        """Steps 6 and 7, and the decisions as a :class:`CycleResult`."""
        from queueing.engine.explain import explain_all

        t0 = perf_counter()
        explanations = explain_all(self)
        t1 = perf_counter()
        positions: dict[int, Any] = {}
        etas: dict[int, Any] = {}
        if forecast:
            from queueing.engine.forecast import forecast as run_forecast

            positions, etas = run_forecast(self)
        t2 = perf_counter()
        tree = self.tree
        names = tree.names
        result = CycleResult(
            admissions=tuple(self.admissions),
            preemptions=tuple(self.preemptions),
            requeues=tuple(self.requeues),
            explanations=explanations,
            positions=positions,
            etas=etas,
            runtime_quota={names[i]: Resources.from_raw(r) for i, r in enumerate(self.runtime)},
            used={names[i]: Resources.from_raw(r) for i, r in enumerate(self.used)},
            demand={names[i]: Resources.from_raw(r) for i, r in enumerate(self.demand)},
            shares={names[i]: self.fair.share(i) for i in range(len(names))},
            stats={},
            nominations=tuple(sorted(self.waiting)),
        )
        stats = dict(self.stats)
        stats.update(
            explain_s=t1 - t0,
            forecast_s=t2 - t1,
            admitted=len(self.admissions),
            preempted=len(self.preemptions),
            requeued=len(self.requeues),
            competing=sum(len(q.cands) for q in self.queues),
            queues=len(self.queues),
            nodes=len(self.nodes.names),
            quotas=len(names),
        )
        object.__setattr__(result, "stats", stats)
        return result


def run_cycle(snapshot: Snapshot, *, forecast: bool = True) -> CycleResult:
    """Run one admission cycle over ``snapshot`` and return its decisions.

    Pure: reads only the snapshot (``snapshot.now`` is the clock) and returns plain
    data; the same snapshot always gives the same decisions (``stats`` timings
    aside). With ``forecast=False`` positions and ETAs are left empty, which is
    what a caller that only needs admissions (or a benchmark of them) wants.
    """
    t0 = perf_counter()
    # The cycle allocates hundreds of thousands of small objects and creates no
    # garbage cycles; generational collections over the snapshot would only cost time.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        cycle = Cycle(snapshot)
        cycle.run()
        result = cycle.result(forecast=forecast)
    finally:
        if gc_was_enabled:
            gc.enable()
    stats = dict(result.stats)
    stats["total_s"] = perf_counter() - t0
    object.__setattr__(result, "stats", stats)
    return result
