"""No starvation of work that fits: aging of a queue head's claim on its quota.

Koordinator's water-filling splits a parent's idle capacity among its children by
weight, each capped by its demand. A gang larger than its quota's share -- but within
its ``max`` -- can therefore wait for ever while a heavier sibling keeps borrowing:
the share it would need is never offered. Slurm answers the same problem for priority
with an age factor; here the age raises the head's *claim*:

* The head of each queue (per quota, in queue order) claims ``used + its request`` of
  its quota, capped by the quota's max. Its claim beyond the quota's guaranteed base
  grows linearly with its wait, reaching the whole of it after the queue's
  ``aging_bound_s`` (``None`` turns aging off for that queue, on purpose).
* In the runtime quota split (:meth:`.quota.QuotaTree.runtime`) claims are served
  after every child's ``min`` and before the weighted water-filling, so aging never
  takes a guaranteed minimum from anyone; it takes the borrowed share of siblings,
  who then cannot admit more and give the capacity back as their work ends (or are
  reclaimed by preemption where the queue allows it).
* A head that has reached its full claim and still does not place on nodes because
  smaller work keeps filling them holds back its scarcest resource for the rest of the
  cycle on just the nodes where it can start soonest (by when the work on them ends,
  at the latest its declared runtime: ``Cycle.reservation``), as a backfill
  reservation does: nothing else takes that room until the gang fits, and work goes
  on on the other nodes -- except work with a declared runtime that ends before the
  gang can start there, which backfills it (``Cycle.place_backfill``).
* Across queues, the first aged candidate of each queue and quota goes before work
  that has not aged (of the same queue priority), once per cycle, the oldest first;
  the rest goes by fair share. Ranked by fair share only, an aged gang's turn came
  after younger gangs of other queues had taken the nodes that freed, cycle after
  cycle, and its drain held nothing (the demo's analytics-adhoc: 1,794 s). Once per
  cycle and queue, not every aged workload: a tenant whose backlog is older than the
  bound does not take every slot before a light tenant's new job.
* In a queue whose policy does not block (Priority, Intelligent below its threshold)
  the aged head of each quota holds its room as a strict-order head does
  (``Cycle.hold_aged``): short of quota, the work of its quota behind it in its queue
  waits; short of nodes, the nodes it needs are held back as above. Without it smaller
  work of its own quota took every slot and share that freed (the live demo's 128-cpu
  gangs of analytics-adhoc and nlp-research: 1,023 s). Work within the quota's
  guaranteed min still goes on behind it while the head fits under its quota's max
  with that work admitted (``Cycle.hold_room``): the min is not left unused for it.
* Age also orders a queue (:func:`queue_order_key`): a workload that has waited
  ``aging_bound_s`` goes ahead of every workload that has not, whatever their
  priorities; among themselves the aged go in the order they queued. Without it, a queue fed
  higher-priority work faster than it drains never reaches its lower-priority work
  (the demo's vision-dev: 9000-priority gangs and 5500 mediums kept a 5000-priority
  job waiting for over 14 minutes in a strict-order queue). A higher-priority workload
  is held back at most ``aging_bound_s`` by this: once it has waited as long, it is
  aged too and goes first again. Heads-only cycles list each queue's first workloads
  in this same order (:func:`order_key`), so an aged workload far down by priority is
  seen by every cycle, not only by full ones.

The wait is counted from ``queue_order_at`` (when the workload joined its queue, kept
across evictions), which the engine knows without memory of earlier cycles.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from operator import attrgetter
from typing import Protocol

from queueing.engine.quota import Claims, QuotaTree
from queueing.engine.types import QueueSpec, WorkloadSpec

__all__ = [
    "Queued",
    "admitted_ahead",
    "admitted_by_age_ahead",
    "aged_before",
    "aged_claims",
    "aged_cutoff",
    "aging_fraction",
    "claim_full_at",
    "order_key",
    "queue_order_key",
    "sort_in_queue_order",
]

#: How many candidates of a queue are looked at to find the head of each of its quotas
#: (a queue shared by several quotas has one head per quota).
HEAD_SCAN = 8


def aging_fraction(spec: QueueSpec, w: WorkloadSpec, now: float) -> float:
    """How far ``w``'s claim has aged, from 0 (just queued) to 1 (full claim)."""
    bound = spec.aging_bound_s
    if bound is None:
        return 0.0
    if bound <= 0:
        return 1.0
    waited = now - w.queue_order_at
    if waited <= 0:
        return 0.0
    return min(1.0, waited / bound)


OrderKey = tuple[int, int, float, int]


class Queued(Protocol):
    """What the queue order reads of a workload (a :class:`WorkloadSpec`, or the
    database side's stand-in for a row it has not turned into one)."""

    @property
    def id(self) -> int: ...
    @property
    def priority(self) -> int: ...
    @property
    def queue_order_at(self) -> float: ...


def queue_order_key(spec: QueueSpec, now: float) -> Callable[[Queued], OrderKey]:
    """The order of ``spec``'s queue at ``now``: aged first, then priority, time, id."""
    return order_key(spec.aging_bound_s, now)


def order_key(aging_bound_s: float | None, now: float) -> Callable[[Queued], OrderKey]:
    """The order of a queue with ``aging_bound_s`` at ``now``: aged first, then
    priority, queue-order time, id.

    A workload is aged once it has waited ``aging_bound_s`` (counted from
    ``queue_order_at``); the aged go first in the order they queued. With aging off
    (``None``) the order is priority, queue-order time, id, as before. The one
    definition of a queue's order: the engine sorts its candidates by it and the
    heads-only snapshot (``queueing.world``, ``queueing.state.snapshot``) lists each
    queue's first workloads by it.
    """
    cutoff = aged_cutoff(aging_bound_s, now)
    if cutoff == -math.inf:
        return _plain_key

    def key(w: Queued) -> OrderKey:
        if w.queue_order_at <= cutoff:
            return (0, 0, w.queue_order_at, w.id)
        return (1, -w.priority, w.queue_order_at, w.id)

    return key


_by_time = attrgetter("queue_order_at", "id")
_by_priority = attrgetter("priority")
_time = attrgetter("queue_order_at")


def sort_in_queue_order(ws: list[WorkloadSpec], aging_bound_s: float | None, now: float) -> None:
    """Sort ``ws`` in place into :func:`order_key`'s order, without a key per workload
    built in Python (the 60k cycle sorts 60,000 candidates so).

    By queue-order time and id first: the aged are then a prefix, already in their
    order; the rest is sorted by priority, highest first -- a stable sort keeps time
    and id order among equal priorities (``reverse=True`` keeps it too).
    """
    ws.sort(key=_by_time)
    n = bisect_right(ws, aged_cutoff(aging_bound_s, now), key=_time)
    if n == 0:
        ws.sort(key=_by_priority, reverse=True)
    elif n < len(ws):
        rest = ws[n:]
        rest.sort(key=_by_priority, reverse=True)
        ws[n:] = rest


def aged_before(spec: QueueSpec, now: float) -> float:
    """Workloads of ``spec``'s queue queued at or before this are aged at ``now``."""
    return aged_cutoff(spec.aging_bound_s, now)


def admitted_by_age_ahead(
    vspec: QueueSpec | None,
    v: WorkloadSpec,
    w: WorkloadSpec,
    w_aged: bool,
    admitted_at: float | None = None,
) -> bool:
    """Whether running ``v`` was admitted by age ahead of waiting ``w`` (``w_aged``:
    whether ``w`` has aged now), so that preemption never takes it for ``w``.
    ``admitted_at``: when ``v`` was admitted, if not ``v.admitted_at`` (the forecast's
    virtual time, :mod:`.forecast_preempt`).

    An aged workload goes ahead of every one that has not aged, the aged in the order
    they queued; evicting it for a fresher one of higher priority would undo that (the
    live demo admitted an aged 128-cpu gang and evicted it a second later for a fresh
    one, past ten minutes). Only a workload that had aged when it was admitted is
    spared: one admitted at once keeps its priority's terms.
    """
    if admitted_at is None:
        admitted_at = v.admitted_at
    if vspec is None or admitted_at is None:
        return False
    if v.queue_order_at > aged_before(vspec, admitted_at):
        return False  # it was not admitted by age: priority decides
    return not w_aged or v.queue_order_at <= w.queue_order_at


def admitted_ahead(
    vspec: QueueSpec | None,
    spec: QueueSpec,
    v: WorkloadSpec,
    w: WorkloadSpec,
    w_aged: bool,
    admitted_at: float | None = None,
) -> str:
    """Why running ``v`` (of queue ``vspec``) ranks ahead of waiting ``w`` (of queue
    ``spec``) in the order the cycle admits in, so that in-quota and fair-share
    preemption never take it for ``w``: ``"queue"`` when ``v``'s queue has the higher
    queue priority, ``"aged"`` when it was admitted by age ahead of ``w``
    (:func:`admitted_by_age_ahead`), else ``""``. Reclaiming a guaranteed min takes
    it all the same.

    Queue priority goes first across queues, before fair share and workload priority
    (:meth:`.cycle.Cycle.tournament`): work of a queue of higher queue priority is
    admitted ahead of waiting work of higher workload priority in another queue of the
    same quota. Evicting it for that work the next cycle undid the order one cycle
    later (the demo: a 128-cpu gang of nlp-shared, queue priority 5, admitted and
    evicted two seconds later for one of nlp-research, queue priority 0, twice in one
    waves world; a watch of the live demo saw the same gangs of nlp-prod's quota
    admitted and evicted within a second).
    """
    if vspec is not None and vspec.priority > spec.priority:
        return "queue"
    if admitted_by_age_ahead(vspec, v, w, w_aged, admitted_at):
        return "aged"
    return ""


def aged_cutoff(aging_bound_s: float | None, now: float) -> float:
    """Workloads of a queue with ``aging_bound_s`` queued at or before this are aged at
    ``now`` (-inf: aging off)."""
    if aging_bound_s is None:
        return -math.inf
    return now - max(0.0, aging_bound_s)


def _plain_key(w: Queued) -> OrderKey:
    return (1, -w.priority, w.queue_order_at, w.id)


def claim_full_at(spec: QueueSpec, w: WorkloadSpec) -> float | None:
    """When ``w``'s claim reaches its whole request (epoch seconds), or None (no aging)."""
    if spec.aging_bound_s is None:
        return None
    return w.queue_order_at + max(0.0, spec.aging_bound_s)


def aged_claims(
    tree: QuotaTree,
    queues: Sequence[tuple[QueueSpec, Sequence[WorkloadSpec]]],
    quota_of: Mapping[int, int],
    own_used: Sequence[Mapping[str, int]],
    now: float,
    frozen: set[int] | None = None,
    unusable: AbstractSet[int] = frozenset(),
    quotas_in: Sequence[int] | None = None,
) -> Claims | None:
    """Per quota, what its aged heads claim (own usage included), or None if nothing.

    ``queues``: each queue's spec and its competing workloads in queue order. The
    claim of a quota is its own usage plus the largest aged part of a head's request
    (``fraction * request``, rounded down; one head per queue), capped by every
    ``max`` on its chain.

    ``frozen``: quotas of a tree with a preemption under way (victims releasing for a
    waiting preemptor, or gone and the preemptor still to be admitted). Their heads
    claim nothing until it completes: a claim there would move the runtime quota the
    preemption was decided on, the preemptor would no longer fit, and its victims
    would come back (ping-pong).

    ``unusable``: workloads that ask more than their quota can get while its
    siblings' demand holds their mins (``CycleState.unusable_ids``). Such a head
    claims nothing for its quota in its queue: its claim could not be met, and served
    within the quota's min (bases passing the parent's room) it took room a sibling's
    head could use (the liveness scan, seed 260).

    ``quotas_in`` (per queue, how many quotas its candidates belong to): each queue is
    read until the head of every one of them is found, however deep. Without it, the
    first ``HEAD_SCAN`` candidates: a quota whose head waited behind nine of another
    quota's in a shared queue never claimed (the liveness scan, seed 7790).
    """
    # One head per quota: the first in queue order of the quota's most urgent queue
    # head (aged first, then highest priority, then longest waiting). A lower-priority head of another
    # queue claiming for the same quota would let it in ahead of the urgent one -- and
    # a victim evicted for that one would come straight back (ping-pong).
    heads: dict[int, tuple[OrderKey, QueueSpec, WorkloadSpec]] = {}
    for n, (spec, cands) in enumerate(queues):
        if spec.aging_bound_s is None or not cands:
            continue
        order = queue_order_key(spec, now)
        seen: set[int] = set()
        wanted = quotas_in[n] if quotas_in is not None else 0
        for w in cands if wanted else cands[:HEAD_SCAN]:
            qi = quota_of.get(w.id)
            if qi is None or qi in seen:
                continue
            seen.add(qi)
            if not (frozen and qi in frozen) and w.id not in unusable:
                key = order(w)
                best = heads.get(qi)
                if best is None or key < best[0]:
                    heads[qi] = (key, spec, w)
            if len(seen) == wanted:
                break  # every quota of the queue has its head
    if not heads:
        return None
    claims: list[dict[str, int]] = [{} for _ in range(len(tree))]
    since = [math.inf] * len(tree)
    claimants: list[WorkloadSpec | None] = [None] * len(tree)
    chains = tree.chains
    maxes = tree.maxes
    any_claim = False
    for qi, (_, spec, w) in heads.items():
        frac = aging_fraction(spec, w, now)
        if frac <= 0.0:
            continue
        used = own_used[qi]
        mine = claims[qi]
        for k, v in w.request.raw.items():
            want = int(v * frac)
            if want <= 0:
                continue
            cap: int | None = None
            for c in chains[qi]:
                m = maxes[c].get(k)
                if m is not None and (cap is None or m < cap):
                    cap = m
            want += used.get(k, 0)
            if cap is not None and want > cap:
                want = cap
            mine[k] = want
            any_claim = True
            since[qi] = w.queue_order_at
            claimants[qi] = w
    return Claims(claims, since, claimants) if any_claim else None
