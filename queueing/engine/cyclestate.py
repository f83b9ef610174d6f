"""The state one cycle works on, shared by its steps.

The cycle (:mod:`.cycle`) builds a :class:`CycleState` from a snapshot and runs its
steps; the step modules (:mod:`.preemption`, :mod:`.explain`, :mod:`.forecast`,
:mod:`.aging`) read it from here and never import the cycle back.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator, Mapping
from operator import attrgetter
from time import perf_counter
from typing import TYPE_CHECKING, Any

from queueing.engine.aging import aged_before, aged_claims, sort_in_queue_order
from queueing.engine.fairshare import FairShare
from queueing.engine.holds import nonpreemptible_short, room_under_min
from queueing.engine.nodes import EligKey, NodeIndex, PodSetReq, podset_reqs
from queueing.engine.quota import QuotaTree
from queueing.engine.reservations import Reservation, reservation
from queueing.engine.resources import EMPTY, Resources
from queueing.engine.types import (
    BACKOFF,
    HOLDING_PHASES,
    PENDING,
    POLICY_INTELLIGENT,
    PREEMPTED,
    Admission,
    Preemption,
    QueueSpec,
    Requeue,
    Snapshot,
    WorkloadSpec,
)
from queueing.engine.unusable import blocked_behind, unusable_demand

if TYPE_CHECKING:
    from queueing.engine.preemption import Preemptor

__all__ = [
    "F_DEPTH",
    "F_NEVER",
    "F_NODES",
    "F_NOTREACHED",
    "F_NPMIN",
    "F_POLICY",
    "F_QUOTA",
    "F_WAITING",
    "CycleState",
    "QueueState",
    "ShapeKey",
    "order_key",
    "runtime_of",
]

# Failure records (why a candidate was not admitted), kept per workload id.
F_QUOTA = 0  # (F_QUOTA, chain node index)
F_NODES = 1  # (F_NODES, shape key)
F_POLICY = 2  # (F_POLICY, blocking workload id)
F_DEPTH = 3  # (F_DEPTH, 0)
F_WAITING = 4  # (F_WAITING, 0): nominated, victims still releasing
F_NOTREACHED = 5  # (F_NOTREACHED, 0)
F_NEVER = 6  # (F_NEVER, reason): can never fit as specified; set aside, blocks nobody
F_NPMIN = 7  # (F_NPMIN, quota index): non-preemptible, beyond its quota's min

ShapeKey = tuple[tuple[frozenset[tuple[str, int]], int, Any], ...]


_quota_name = attrgetter("quota")


class SortedAsRead:
    """Items in ascending order, sorted only as far as they are read: a heap behind
    the sorted prefix read so far. A drain's sweep (``Drains.reservation``) reads the
    first few of ~20k end events (14 at most at 60k pending), a thousand times a cycle."""

    __slots__ = ("_done", "_heap")

    def __init__(self, items: list[tuple[float, int, int]]) -> None:
        heapq.heapify(items)
        self._heap = items
        self._done: list[tuple[float, int, int]] = []

    def __iter__(self) -> Iterator[tuple[float, int, int]]:
        done = self._done
        heap = self._heap
        i = 0
        while True:
            if i < len(done):
                yield done[i]
            elif heap:
                item = heapq.heappop(heap)
                done.append(item)
                yield item
            else:
                return
            i += 1


def runtime_of(cy: CycleState, w: WorkloadSpec, q: int) -> float:
    """How long ``w`` typically runs (``q`` 0) or at most as the history goes (``q`` 1):
    its declared runtime (a limit) times its queue's p50 or p90 share of it
    (``Snapshot.runtime_ratio``), else its queue's p50 or p90 runtime, else the
    default. The forecast's runtimes and the drains' typical ends."""
    if w.expected_runtime_s is not None and w.expected_runtime_s > 0:
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


def order_key(w: WorkloadSpec) -> tuple[int, float, int]:
    """Priority order: higher priority first, then earlier queue-order time, then id.

    A queue's own order also puts its aged workloads first
    (:func:`.aging.queue_order_key`); ``QueueState.cands`` is in that order
    (:func:`.aging.sort_in_queue_order`).
    """
    return (-w.priority, w.queue_order_at, w.id)


class QueueState:
    """A queue's candidates for this cycle and how far the cycle got into them."""

    __slots__ = (
        "aged_before",
        "aged_heads",
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

    def __init__(
        self, index: int, spec: QueueSpec, cands: list[WorkloadSpec], now: float = 0.0
    ) -> None:
        self.index = index
        #: Workloads queued at or before this are aged (first in the queue's order).
        self.aged_before = aged_before(spec, now)
        self.spec = spec
        self.cands = cands
        self.pos = 0
        depth = spec.max_depth
        self.limit = len(cands) if depth <= 0 else min(depth, len(cands))
        #: quota index -> id of the head that blocks it (Block / Intelligent, or an
        #: aged head short of quota).
        self.blocked: dict[int, int] = {}
        #: quota index -> id of its aged head that failed, in a queue whose policy does
        #: not block it (Priority, Intelligent below the threshold): the one workload
        #: of the quota in this queue that holds room for itself (:meth:`holds`).
        self.aged_heads: dict[int, int] = {}
        self.block_all = spec.blocking
        self.intelligent = spec.policy == POLICY_INTELLIGENT
        self.threshold = spec.priority_threshold
        self.may_preempt = not (spec.preempt_within_quota == "Never" and spec.reclaim == "Never")

    def blocks(self, w: WorkloadSpec) -> bool:
        """Whether a failure of ``w`` blocks those behind it on the same quota."""
        return self.block_all or (self.intelligent and w.priority >= self.threshold)

    def aged(self, w: WorkloadSpec) -> bool:
        """Whether ``w`` has waited its queue's ``aging_bound_s`` (first in its order)."""
        return w.queue_order_at <= self.aged_before

    def holds(self, w: WorkloadSpec, qi: int) -> bool:
        """Whether ``w`` holds room for itself until it starts, so that aging's bound
        applies to it: a strict-order head (:meth:`blocks`), or the aged head of its
        quota in any queue (:mod:`.aging`)."""
        return self.blocks(w) or self.aged_heads.get(qi) == w.id


class CycleState:
    """The mutable state of one cycle and the primitives that change it.

    :class:`~.cycle.Cycle` runs the steps over it; the preemption, explanation and
    forecast steps (and tests) read its public attributes and call its primitives
    (``quota_fail``, ``admit``, ``reserve``, ``victims_release``) -- never the cycle.
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
        own_np: list[dict[str, int]] = [{} for _ in range(nq)]
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
        #: Competing workloads that can never fit as specified (beyond a max on their
        #: chain or the schedulable cluster): set aside with the limit they exceed, they
        #: neither compete, nor count as demand, nor block a strict-order queue.
        self.never: list[tuple[WorkloadSpec, int, str, str, Resources]] = []
        per_queue: dict[str, list[WorkloadSpec]] = {}
        #: Competing workloads per quota index.
        in_quota: list[list[WorkloadSpec]] = [[] for _ in range(nq)]
        self.quota_of: dict[int, int] = {}
        self.nominated_in: set[int] = set()
        #: Of those, the ones that await work ending within the grace period.
        self.awaiting_in: set[int] = set()
        queue_specs = self.queue_specs
        quota_of = self.quota_of
        caps: list[dict[str, int] | None] = [None] * nq
        capacity = nodes.capacity
        holding = self.holding
        nominated_in = self.nominated_in
        inflight = self.inflight
        held: list[WorkloadSpec] = []  # every holding workload, for the nodes
        # (Hot: ~80k workloads at 60k pending. Module constants are bound locally.)
        pending_, backoff_, holding_, preempted_ = PENDING, BACKOFF, HOLDING_PHASES, PREEMPTED
        for w in snapshot.workloads:
            ph = w.phase
            if ph == pending_ or (ph == backoff_ and (w.requeue_at is None or w.requeue_at <= now)):
                qi = qindex.get(w.quota)
                if qi is None or w.queue not in queue_specs:
                    what = (
                        f"unknown quota {w.quota!r}" if qi is None else f"unknown queue {w.queue!r}"
                    )
                    self.unknown.append((w, what))
                    continue
                ccap = caps[qi]
                if ccap is None:
                    ccap = tree.ceiling(qi, capacity, caps)
                # The chain-cap check and the quota's pending sum in one pass; a
                # workload set aside (rare) has its part taken back out again.
                req = w._request._d
                d = own_pend[qi]
                for k, v in req.items():
                    if v > ccap.get(k, 0):
                        self._set_aside(w, qi, k, capacity)
                        for k2, v2 in req.items():
                            if k2 == k:
                                break
                            left = d[k2] - v2
                            if left:
                                d[k2] = left
                            else:
                                del d[k2]  # (requests are positive: it was absent)
                        break
                    d[k] = d.get(k, 0) + v
                else:
                    quota_of[w.id] = qi
                    in_quota[qi].append(w)
                    lst = per_queue.get(w.queue)
                    if lst is None:
                        per_queue[w.queue] = [w]
                    else:
                        lst.append(w)
                    if w.nominated:
                        nominated_in.add(w.id)
                        if w.awaiting:
                            self.awaiting_in.add(w.id)
            elif ph in holding_:
                held.append(w)
                qi = qindex.get(w.quota)
                if qi is None:
                    self.orphans.append(w)
                else:
                    holding[qi].append(w)
                    req = w._request._d
                    d = own_used[qi]
                    for k, v in req.items():
                        d[k] = d.get(k, 0) + v
                    if not w.preemptible:
                        d = own_np[qi]
                        for k, v in req.items():
                            d[k] = d.get(k, 0) + v
                if ph == preempted_ and w.preempted_by is not None:
                    inflight.setdefault(w.preempted_by, []).append(w)
            elif ph == backoff_:
                self.backing_off.append(w)
        nodes.hold_all(held)
        for name, extra in snapshot.unlisted_demand.items():
            qi = qindex.get(name)
            if qi is not None:
                d = own_pend[qi]
                for k, v in extra.items():
                    d[k] = d.get(k, 0) + int(v)
        t1 = perf_counter()
        # Queues in name order; candidates in queue order (the aged first, see
        # :func:`.aging.queue_order_key`).
        self.queues: list[QueueState] = []
        for name in sorted(per_queue):
            cands = per_queue[name]
            sort_in_queue_order(cands, queue_specs[name].aging_bound_s, now)
            self.queues.append(QueueState(len(self.queues), queue_specs[name], cands, now))
        # Step 2: runtime quota, with the aged claims of long-waiting heads.
        own_demand = [dict(u) for u in own_used]
        for i, p in enumerate(own_pend):
            if p:
                d = own_demand[i]
                for k, v in p.items():
                    d[k] = d.get(k, 0) + v
        #: Per quota, usage plus competing requests of workloads attached directly to it.
        self.own_demand = own_demand
        #: Per quota, the competing requests of its workloads that ask more than it can
        #: get while its siblings' present demand holds their mins (``quota.Rooms``):
        #: they keep their quota's min but take no share of the weights. The workloads
        #: (with their quota's index) in ``unusable_ws``, their ids in ``unusable_ids``.
        self.unusable, self.unusable_ws = unusable_demand(
            tree, own_demand, own_pend, caps, capacity, in_quota
        )
        self.unusable_ids = frozenset(w.id for _, w in self.unusable_ws)
        #: Per unusable head that blocks its quota in its queue: (quota index, the
        #: requests of the work behind it there). That work cannot start before the
        #: head either: it takes no share of the weights while the head cannot start.
        self.unusable_behind: dict[int, tuple[int, dict[str, int]]] = {}
        if self.unusable_ids:
            in_queues = {w.queue for _, w in self.unusable_ws}
            self.unusable_behind = blocked_behind(
                self.queues, quota_of, self.unusable_ids, in_queues
            )
            if self.unusable_behind:
                total = {qi: dict(d) for qi, d in (self.unusable or {}).items()}
                for qi, behind in self.unusable_behind.values():
                    d = total.setdefault(qi, {})
                    for k, v in behind.items():
                        d[k] = d.get(k, 0) + v
                self.unusable = total
        #: Per quota, what its aged heads claim (usage included), or None (:mod:`.aging`).
        # While victims release, and once they are gone and the preemptor is still to be
        # admitted, nothing in the preemptor's whole tree claims by age: a claim would
        # move the runtime quota the preemption was decided on -- a cousin's as well as
        # a sibling's (the property test, seed 24620: frozen among siblings only, a
        # cousin's head aged while the victim left and claimed the preemptor's room;
        # the victim was admitted again into its own room and evicted again) -- and a
        # reclaim takes from any quota that borrows, so the victim, back in its queue
        # with its old timestamp, would age its room back before the preemptor got it.
        # A preemptor that awaits work ending within the grace period evicted nothing,
        # and its search is made again every cycle: it freezes nothing. (It froze the
        # whole tree for as long as it waited, up to the grace period: in a replayed
        # 36-minute live run for up to a minute at a time, while the demo's aged 128-cpu
        # gangs of analytics-adhoc waited up to 1,077 s, their stated bound moving 9
        # minutes later. Polled live, 76 of 81 sightings of a nominated preemptor were
        # of one that awaited.)
        frozen: set[int] = set()
        awaiting_in = self.awaiting_in
        for wid in (*self.nominated_in, *self.inflight):
            pq = quota_of.get(wid)
            if pq is None or (wid in awaiting_in and wid not in self.inflight):
                continue
            root = tree.root_of(pq)
            if root not in frozen:  # (a tree is frozen whole: once for its preemptors)
                frozen.update(tree.subtree(root))
        self.claims = aged_claims(
            tree,
            [(q.spec, q.cands) for q in self.queues],
            quota_of,
            own_used,
            now,
            frozen,
            self.unusable_ids,
            # (Names, one per quota index: read as attributes, not looked up by id.)
            [len(set(map(_quota_name, q.cands))) for q in self.queues],
        )
        #: Runtime quota without aged claims. Preemption judges borrowing by it: aging
        #: takes back what siblings borrow as their work ends, it never evicts (a claim
        #: lapses once its head is admitted, and eviction by it would ping-pong).
        self.runtime_base, self.demand = tree.runtime(
            own_demand, nodes.capacity, unusable=self.unusable
        )
        self.runtime = self.runtime_base
        claims = self.claims
        if claims is not None and any(
            v > self.runtime_base[i].get(k, 0) for i, c in enumerate(claims) for k, v in c.items()
        ):
            # Some aged claim is not met by water-filling alone: split again with claims.
            self.runtime, _ = tree.runtime(
                own_demand, nodes.capacity, claims, unusable=self.unusable
            )
        else:
            self.claims = None
        #: Subtree usage of holding workloads plus this cycle's admissions.
        self.used: list[dict[str, int]] = tree.subtree_sums(own_used)
        #: Subtree usage of non-preemptible holdings (and admissions): what
        #: :func:`nonpreemptible_short` checks against each quota's min.
        self.np_used: list[dict[str, int]] = tree.subtree_sums(own_np)
        #: ``used`` plus capacity reserved for waiting preemptors (fit checks use this).
        self.load: list[dict[str, int]] = [dict(u) for u in self.used]
        self.limit: list[dict[str, int]] = []
        for i in range(nq):
            lim = dict(self.runtime[i])
            for k, cap in tree.maxes[i].items():
                if lim.get(k, 0) > cap:
                    lim[k] = cap
            self.limit.append(lim)
        #: ``limit`` without aged claims: what preemption decides by (see runtime_base).
        self.limit_base = self.limit
        if self.claims is not None:
            self.limit_base = []
            for i in range(nq):
                lim = dict(self.runtime_base[i])
                for k, cap in tree.maxes[i].items():
                    if lim.get(k, 0) > cap:
                        lim[k] = cap
                self.limit_base.append(lim)
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
        # Decisions and bookkeeping.
        self.admissions: list[Admission] = []
        self.preemptions: list[Preemption] = []
        self.requeues: list[Requeue] = []
        self.admitted_ids: set[int] = set()
        self.admitted_ws: list[WorkloadSpec] = []  # in the order of ``admissions``
        #: Workloads chosen as victims this cycle (never chosen twice).
        self.victim_ids: set[int] = {w.id for ws in self.inflight.values() for w in ws}
        #: Per node index, what waiting preemptors' reservations take of the room their
        #: victims in flight will release (the rest of that room is nobody's yet).
        self.inflight_claimed: dict[int, dict[str, int]] = {}
        #: Preemptors waiting for capacity: id -> victim ids (in flight or new).
        self.waiting: dict[int, tuple[int, ...]] = {}
        #: Preemptors waiting instead for work that ends within the grace period
        #: (nothing evicted): id -> the ids of that work (for their explanation).
        self.awaiting: dict[int, tuple[int, ...]] = {}
        #: ... and until when at the latest (then what still runs may be evicted).
        self.awaited_until: dict[int, float] = {}
        self.fail: dict[int, tuple[int, Any]] = {}
        self.failed_shapes: set[ShapeKey] = set()
        #: (queue index, quota index, kind): one victim search each per cycle.
        self.preempt_tried: set[tuple[int, int, int]] = set()
        self.preempt_failed: set[tuple[int, int, ShapeKey]] = set()
        #: Per quota, bumped on every admission (lets the tournament skip re-scoring).
        self.qver: list[int] = [0] * nq
        #: Bumped on every change of ``load``; guards the headroom cache.
        self._load_version = 0
        self._headroom: list[tuple[int, dict[str, tuple[int, int]]] | None] = [None] * nq
        self.preemptor: Preemptor | None = None  # victim-search indexes, built on demand
        #: Aged heads of queues that do not block holding their quota's room in their
        #: queue (short of quota): id -> request (``Cycle.hold_room``).
        self.holding_quota: dict[int, Mapping[str, int]] = {}
        #: ``holder_ends``, made when a drain first asks.
        self._holder_ends: list[tuple[int, float, float, Mapping[str, int]]] | None = None
        #: ``end_events`` per (eligibility key, resource).
        self._end_events: dict[tuple[EligKey, str, bool], SortedAsRead] = {}
        #: Aged heads holding back their scarcest resource on nodes: id -> resource.
        self.draining: dict[int, str] = {}
        #: What the drains took from the nodes, per head (less what work within its
        #: min or backfill took since; the forecast gives it back).
        self.drained: dict[int, dict[int, dict[str, int]]] = {}
        #: What waiting preemptors hold back on nodes beyond what their victims release
        #: (:meth:`reserve`; the forecast gives it back, then holds each again for all
        #: but its own preemptor: ``reservations``).
        self.reserved: list[dict[int, dict[str, int]]] = []
        #: Per waiting preemptor, what :meth:`reserve` held back for it (per quota of
        #: its chain, beyond what its victims release, and per node index) and what
        #: from. The forecast holds it again for it (``forecast_sim.Simulation``):
        #: until its victims are gone, work behind it does not take that room in
        #: virtual time either; and it grows as awaited victims end.
        self.reservations: dict[int, Reservation] = {}
        #: The drains of heads whose claim is beyond their quota's min (the same dicts
        #: as in ``drained``): work within its own min may place on their room
        #: (``Cycle.place_within_min``), a guarantee before an aged claim.
        self.yielding: list[dict[int, dict[str, int]]] = []
        #: Shapes that did not place even on that room (within a cycle, free plus the
        #: room of yielding drains only shrinks: a new drain moves room from one to the
        #: other).
        self.yield_failed: set[ShapeKey] = set()
        #: When each drain's head can start (parallel to ``drained``): the earlier of
        #: at the latest and typically. Work that ends by then at the latest may use
        #: the drain's room (a backfill, ``Cycle.place_backfill``): the head's start is
        #: not delayed, even when the work before it ends as it typically does.
        #: ``backfill_until``: the latest of them.
        self.drain_until: list[float] = []
        self.backfill_until = -math.inf
        #: Per shape, the earliest end with which it did not place on drained room:
        #: the room work ending later may use is a subset of it (within a cycle).
        self.backfill_failed: dict[ShapeKey, float] = {}
        self._never_nodes: dict[ShapeKey, str | None] = {}
        self.stats["index_s"] = t1 - t0
        self.stats["runtime_quota_s"] = perf_counter() - t1

    # -- helpers ---------------------------------------------------------------------

    def _set_aside(self, w: WorkloadSpec, qi: int, k: str, capacity: Mapping[str, int]) -> None:
        """Record ``w`` as inadmissible: it asks more ``k`` than its chain, the room its
        siblings leave it (:meth:`.QuotaTree.ceiling`) or the cluster."""
        v = w._request._d[k]
        tree = self.tree
        for c in tree.chains[qi]:
            m = tree.maxes[c].get(k)
            if m is not None and v > m and m <= capacity.get(k, 0):
                self.never.append((w, c, "max", k, Resources.from_raw({k: v - m})))
                return
        if v <= capacity.get(k, 0):
            caps: list[dict[str, int] | None] = [None] * len(tree.names)
            for c in reversed(tree.chains[qi]):  # from the root down: where the room ends
                room = tree.ceiling(c, capacity, caps).get(k, 0)
                if v > room:
                    self.never.append((w, c, "lent", k, Resources.from_raw({k: v - room})))
                    return
        self.never.append((w, -1, "cluster", k, Resources.from_raw({k: v - capacity.get(k, 0)})))

    @staticmethod
    def _prep(w: WorkloadSpec) -> tuple[tuple[PodSetReq, ...], ShapeKey]:
        """``w``'s placer view and shape key, made once and kept with the spec."""
        pod_sets = w.pod_sets
        got: tuple[tuple[PodSetReq, ...], ShapeKey]
        if len(pod_sets) == 1 and pod_sets[0].count > 0:
            ps = pod_sets[0]
            e = ps._elig
            d = ps.requests._d
            got = ((PodSetReq(ps.name, ps.count, d, e),), ((frozenset(d.items()), ps.count, e),))
        else:
            reqs = podset_reqs(pod_sets)
            live = [ps for ps in pod_sets if ps.count > 0]
            shape = tuple(
                (frozenset(ps.requests._d.items()), ps.count, p.elig)
                for ps, p in zip(live, reqs, strict=True)
            )
            got = (reqs, shape)
        object.__setattr__(w, "_placer", got)
        return got

    @staticmethod
    def reqs(w: WorkloadSpec) -> tuple[PodSetReq, ...]:
        """The placer's view of ``w``'s pod sets (made once per spec)."""
        got = w._placer
        if got is None:
            got = CycleState._prep(w)
        return got[0]

    @staticmethod
    def shape(w: WorkloadSpec) -> ShapeKey:
        """A hashable key of ``w``'s pod sets: equal shapes place alike (made once)."""
        got = w._placer
        if got is None:
            got = CycleState._prep(w)
        return got[1]

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

    def np_short(self, w: WorkloadSpec, qi: int) -> str:
        """For a non-preemptible ``w``: the resource beyond quota ``qi``'s min, or ""."""
        if w.preemptible:
            return ""
        return nonpreemptible_short(self.tree.mins[qi], self.np_used[qi], w._request._d)

    def within_min(self, qi: int, req: Mapping[str, int]) -> bool:
        """Whether quota ``qi`` stays within its min with ``req``, in every resource of
        ``req`` its min names (and it names one): a guaranteed claim (see
        :mod:`.preemption`)."""
        m = self.tree.mins[qi]
        used = self.load[qi]
        named = False
        for k, v in req.items():
            mk = m.get(k, 0)
            if mk > 0:
                named = True
                if used.get(k, 0) + v > mk:
                    return False
        return named

    def min_room(self, qi: int) -> dict[str, int]:
        """Per resource quota ``qi``'s min names (> 0): ``min - load``.

        ``within_min(qi, req)`` is: some resource of ``req`` is in it, and none asks
        more than its room (for callers that ask it of many requests at one load).
        """
        return room_under_min(self.load[qi], self.tree.mins[qi])

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
        lent: Resources = EMPTY,
        lent_by: tuple[str, ...] = (),
    ) -> None:
        """Record an admission and take its quota and node capacity (``lent``, ``lent_by``:
        what it borrowed beyond its quota's share and from whom, :mod:`.lending`)."""
        req = w._request._d
        self._load_version += 1
        for c in self.tree.chains[qi]:
            u = self.used[c]
            ld = self.load[c]
            for k, v in req.items():
                u[k] = u.get(k, 0) + v
                ld[k] = ld.get(k, 0) + v
        if not w.preemptible:
            for c in self.tree.chains[qi]:
                npu = self.np_used[c]
                for k, v in req.items():
                    npu[k] = npu.get(k, 0) + v
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
                lent=lent,
                lent_by=lent_by,
            )
        )
        self.admitted_ids.add(w.id)
        self.admitted_ws.append(w)

    def latest_end(self, w: WorkloadSpec) -> float:
        """When a workload holding capacity is expected to end at the latest: its start
        (now, if it has not started) plus a runtime it is not expected to exceed --
        declared, else its queue's p90. Before now for work past that already."""
        start = w.started_at if w.started_at is not None else self.now
        if w.expected_runtime_s is not None and w.expected_runtime_s > 0:
            return start + w.expected_runtime_s
        hist = self.snapshot.runtime_history.get(w.queue)
        if hist is not None and hist[1] > 0:
            return start + float(hist[1])
        return start + self.config.default_runtime_s

    def holder_ends(self) -> list[tuple[int, float, float, Mapping[str, int]]]:
        """Per node a capacity holder uses: (node index, when the holder is expected to
        end at the latest and typically -- :meth:`latest_end` and :func:`runtime_of`,
        never after the latest, ``now`` for work past that already -- and what it
        holds there). Made once per cycle, when a drain first asks."""
        holders = self._holder_ends
        if holders is not None:
            return holders
        now = self.now
        index = self.nodes.index
        holders = self._holder_ends = []
        add = holders.append
        for ws in (*self.holding, self.orphans):
            for w in ws:
                if not w.assignment:
                    continue
                start = w.started_at if w.started_at is not None else now
                latest = max(now, self.latest_end(w))
                typical = max(now, min(latest, start + runtime_of(self, w, 0)))
                for node, amount in w.assignment.items():
                    i = index.get(node)
                    if i is not None:
                        add((i, latest, typical, amount._d))
        return holders

    def end_events(self, elig: EligKey, resource: str, typical: bool = False) -> SortedAsRead:
        """The ends of the work on the nodes of eligibility key ``elig``, in time order:
        (expected end at the latest, or ``typical``, node index, ``resource`` it frees).
        Made once per cycle and key (both orders at once) from :meth:`holder_ends`."""
        key = (elig, resource, typical)
        got = self._end_events.get(key)
        if got is None:
            eligible = self.nodes.eligible_set(elig)
            latest_ends: list[tuple[float, int, int]] = []
            typical_ends: list[tuple[float, int, int]] = []
            for i, latest, typ, amount in self.holder_ends():
                if i in eligible:
                    v = amount.get(resource, 0)
                    if v > 0:
                        latest_ends.append((latest, i, v))
                        typical_ends.append((typ, i, v))
            a = self._end_events[(elig, resource, False)] = SortedAsRead(latest_ends)
            b = self._end_events[(elig, resource, True)] = SortedAsRead(typical_ends)
            got = b if typical else a
        return got

    def reserve(
        self,
        wid: int,
        qi: int,
        req: Mapping[str, int],
        freed: Mapping[int, Mapping[str, int]],
        per_node: Mapping[int, Mapping[str, int]] | None,
        node_extra: Mapping[int, Mapping[str, int]],
    ) -> None:
        """Hold back what waiting preemptor ``wid`` needs beyond what its victims release."""
        self._load_version += 1
        r = reservation(self.tree.chains[qi], qi, req, freed, per_node, node_extra)
        for c, amounts in r.held.items():
            ld = self.load[c]
            for k, v in amounts.items():
                ld[k] = ld.get(k, 0) + v
        if r.take:
            self.nodes.commit(r.take)
            self.reserved.append(r.take)
        self.reservations[wid] = r

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
