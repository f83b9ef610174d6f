"""The engine's contract: the snapshot it reads and the decisions it returns.

Everything here is plain, immutable data. The Django side (``queueing/state.py``)
builds a :class:`Snapshot` from the database and applies a :class:`CycleResult`;
the engine never touches either side's storage. The clock is ``Snapshot.now``
(epoch seconds); nothing in the engine reads the wall clock for decisions.

Units: resources are integers in canonical units (see :mod:`queueing.engine.resources`);
times are float epoch seconds; durations are float seconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# The explanation of a waiting workload (its kinds, its sentence, the formatting it uses)
# stands in its own module; importers of this contract find it here as before.
from queueing.engine.explanation import (
    BOUND_CONDITION,
    BY_AGE_NOTE,
    EXPLAIN_BACKOFF,
    EXPLAIN_BEHIND,
    EXPLAIN_DEPTH,
    EXPLAIN_NEVER,
    EXPLAIN_NODES,
    EXPLAIN_POLICY,
    EXPLAIN_PREEMPTING,
    EXPLAIN_QUOTA,
    EXPLAIN_UNKNOWN,
    NO_PREEMPT,
    Explanation,
    covers,
    fmt,
    fmt_amount,
    fmt_time,
)
from queueing.engine.resources import EMPTY, Resources

__all__ = [
    "ACTIVE_PHASES",
    "ADMITTED",
    "BACKOFF",
    "BOUND_CONDITION",
    "BY_AGE_NOTE",
    "EXPLAIN_BACKOFF",
    "EXPLAIN_BEHIND",
    "EXPLAIN_DEPTH",
    "EXPLAIN_NEVER",
    "EXPLAIN_NODES",
    "EXPLAIN_POLICY",
    "EXPLAIN_PREEMPTING",
    "EXPLAIN_QUOTA",
    "EXPLAIN_UNKNOWN",
    "HOLDING_PHASES",
    "NO_PREEMPT",
    "PENDING",
    "PREEMPTED",
    "RUNNING",
    "Admission",
    "CycleResult",
    "EngineConfig",
    "Eta",
    "Explanation",
    "NodeHold",
    "NodeSpec",
    "PodSet",
    "Position",
    "Preemption",
    "QueueSpec",
    "QuotaNode",
    "Requeue",
    "Snapshot",
    "Taint",
    "Toleration",
    "WorkloadSpec",
    "covers",
    "fmt",
    "fmt_amount",
    "fmt_time",
]

# -- phases ---------------------------------------------------------------------------

PENDING = "Pending"
BACKOFF = "Backoff"
ADMITTED = "Admitted"
RUNNING = "Running"
PREEMPTED = "Preempted"

#: Phases that hold quota and node capacity. ``Preempted`` means eviction was
#: requested but the cluster has not confirmed it: the pods may still be running.
HOLDING_PHASES = frozenset({ADMITTED, RUNNING, PREEMPTED})
#: Phases that compete for admission (``Backoff`` only once ``requeue_at <= now``).
ACTIVE_PHASES = frozenset({PENDING, BACKOFF})

# -- policies -------------------------------------------------------------------------

POLICY_PRIORITY = "Priority"
POLICY_BLOCK = "Block"
POLICY_INTELLIGENT = "Intelligent"
POLICY_FIFO = "FIFO"  # kube-queue's name for Block
POLICIES = frozenset({POLICY_PRIORITY, POLICY_BLOCK, POLICY_INTELLIGENT, POLICY_FIFO})

PREEMPT_NEVER = "Never"
PREEMPT_LOWER_PRIORITY = "LowerPriority"
RECLAIM_ANY = "Any"

# Taint effects that keep pods off a node unless tolerated. PreferNoSchedule is a hint.
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def _res(value: Mapping[str, int] | None) -> Resources:
    if value is None:
        return EMPTY
    if isinstance(value, Resources):
        return value
    return Resources(value)


# -- cluster --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint (``key=value:effect``)."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"  # NoSchedule | PreferNoSchedule | NoExecute

    def blocks_scheduling(self) -> bool:
        """Whether an untolerated taint keeps new pods off the node."""
        return self.effect in BLOCKING_EFFECTS

    def to_dict(self) -> dict[str, str]:
        return {"key": self.key, "value": self.value, "effect": self.effect}


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration with Kubernetes semantics.

    * ``operator="Exists"`` matches any value; with an empty ``key`` it matches every taint.
    * ``operator="Equal"`` matches when key and value are equal.
    * An empty ``effect`` matches every effect.
    """

    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """Whether this toleration matches ``taint``."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value

    def to_dict(self) -> dict[str, str]:
        return {
            "key": self.key,
            "operator": self.operator,
            "value": self.value,
            "effect": self.effect,
        }


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A schedulable node as the engine sees it.

    ``reserved`` is the requests of pods the queue does not manage (daemon sets,
    system pods, other schedulers); free capacity for the queue is
    ``allocatable - reserved - held by admitted workloads``. ``held_elsewhere``: the
    part of ``reserved`` that workloads of other quota trees hold (a tree's cycle
    counts them as reserved); it is released as their work ends, the rest is not.
    """

    name: str
    allocatable: Resources
    reserved: Resources = EMPTY
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    held_elsewhere: Resources = EMPTY

    def __post_init__(self) -> None:
        object.__setattr__(self, "allocatable", _res(self.allocatable))
        object.__setattr__(self, "reserved", _res(self.reserved))
        object.__setattr__(self, "held_elsewhere", _res(self.held_elsewhere))


# -- quota and queues -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QuotaNode:
    """One node of an elastic-quota tree (Koordinator ElasticQuota).

    * ``min`` is guaranteed; ``max`` is the ceiling (a resource absent from ``max``
      has no ceiling of its own; it is still bounded by its ancestors and the cluster).
    * ``shared_weight`` splits idle capacity between siblings. A resource absent from
      it defaults, as in Koordinator, to the quota's ``max`` for that resource; where
      ``max`` does not name the resource either, to ``min`` if positive, else 1.
    * ``allow_lent=False`` keeps the whole ``min`` reserved even when not demanded.
    * ``fair_weight`` divides the fair-share score (Kueue's fairSharing weight).

    Several roots (``parent is None``) may share one snapshot; each root's capacity is
    ``min(its max, schedulable cluster capacity)``.
    """

    name: str
    parent: str | None = None
    min: Resources = EMPTY
    max: Mapping[str, int] = field(default_factory=dict)
    shared_weight: Mapping[str, int] = field(default_factory=dict)
    allow_lent: bool = True
    fair_weight: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "min", _res(self.min))

    def weight(self, resource: str) -> int:
        """The shared weight for ``resource`` with Koordinator's default."""
        if resource in self.shared_weight:
            return int(self.shared_weight[resource])
        if resource in self.max:
            return int(self.max[resource])
        m = self.min.get(resource, 0)
        return int(m) if m > 0 else 1

    def ceiling(self, resource: str) -> int | None:
        """``max`` for ``resource``, or None when it has no ceiling of its own."""
        if resource in self.max:
            return int(self.max[resource])
        return None


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """An ordering context (kube-queue / koord-queue Queue).

    ``policy``: ``Priority`` (best effort: a head that does not fit is skipped --
    until it has waited ``aging_bound_s``, then it holds the room it waits for),
    ``Block`` (strict FIFO: a head that does not fit blocks those behind it on the
    same quota), ``Intelligent`` (workloads with priority >= ``priority_threshold``
    block, lower ones may be skipped), ``FIFO`` (alias of Block). ``max_depth``
    bounds how many candidates of the queue get a turn per cycle (0 = all); work
    waiting behind its quota's blocking head gets none and does not count.

    ``aging_bound_s``: the bounded wait against starvation (:mod:`.aging`). A head of
    this queue that fits its quota's max and the cluster claims a growing part of its
    request from its quota's parent, the whole of it after this many seconds of
    waiting, taking back what siblings borrow. ``None`` turns it off (on purpose).
    """

    name: str
    policy: str = POLICY_PRIORITY
    priority: int = 0
    priority_threshold: int = 0
    max_depth: int = 0
    preempt_within_quota: str = PREEMPT_LOWER_PRIORITY  # or "Never"
    reclaim: str = RECLAIM_ANY  # "Never" | "LowerPriority" | "Any"
    admission_timeout_s: float | None = None
    backoff_base_s: float = 10.0
    backoff_max_s: float = 600.0
    backoff_jitter: float = 0.1
    aging_bound_s: float | None = 300.0

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"queue {self.name!r}: unknown policy {self.policy!r}")
        if self.aging_bound_s is not None and not self.aging_bound_s >= 0:
            raise ValueError(f"queue {self.name!r}: aging_bound_s must be >= 0 or None")

    @property
    def blocking(self) -> bool:
        """True for strict FIFO policies (Block and its alias FIFO)."""
        return self.policy in (POLICY_BLOCK, POLICY_FIFO)


# -- workloads ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodSet:
    """``count`` identical pods, each requesting ``requests``."""

    name: str
    count: int
    requests: Resources
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    #: The key of the nodes it may use (``nodes.elig_key``): its sorted node-selector
    #: items and its tolerations, made once (a cycle asks it of every candidate).
    _elig: tuple[tuple[tuple[str, str], ...], tuple[Toleration, ...]] = field(
        init=False, repr=False, compare=False, default=((), ())
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "requests", _res(self.requests))
        if self.count < 0:
            raise ValueError(f"pod set {self.name!r}: negative count")
        sel = self.node_selector
        if sel or self.tolerations:
            elig = (tuple(sorted(sel.items())) if sel else (), self.tolerations)
            object.__setattr__(self, "_elig", elig)

    @property
    def total(self) -> Resources:
        """``count * requests``."""
        return self.requests * self.count


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """One job waiting for or holding admission (kube-queue's QueueUnit).

    Holding phases (Admitted, Running, Preempted) count against quota and nodes via
    ``assignment`` (node -> resources held). Pending competes; Backoff competes once
    ``requeue_at <= now``.

    Added beyond the first contract (all defaulted):

    * ``preempted_by``: for a ``Preempted`` victim, the preemptor's id. Its capacity
      is nominated for that preemptor and it is never chosen as a victim again.
    * ``nominated``: the workload preempted victims in an earlier cycle and has not
      been admitted yet; it goes first while the freed capacity arrives. Feed it back
      from :attr:`CycleResult.nominations`.
    * ``awaiting``: nominated while it awaits work of its quota that ends within the
      preemption grace period -- nothing was evicted for it. Feed it back from
      :attr:`CycleResult.awaiting`.
    * ``preemptible``: False for koord-queue's non-preemptible job (its
      ``quota.scheduling.koordinator.sh/preemptible: "false"`` label): admitted only
      within its quota's min, counting the quota's other non-preemptible holdings, and
      never chosen as a victim.
    """

    id: int
    name: str
    quota: str
    queue: str
    priority: int
    queue_order_at: float
    pod_sets: tuple[PodSet, ...]
    phase: str = PENDING
    requeue_at: float | None = None
    attempts: int = 0
    expected_runtime_s: float | None = None
    admitted_at: float | None = None
    started_at: float | None = None
    assignment: Mapping[str, Resources] = field(default_factory=dict)
    preempted_by: int | None = None
    nominated: bool = False
    preemptible: bool = True
    awaiting: bool = False
    _request: Resources = field(init=False, repr=False, compare=False, default=EMPTY)
    #: The placer's view of its pod sets and their shape key, made by the first cycle
    #: that asks (``CycleState.reqs``, ``CycleState.shape``) and kept with the spec.
    _placer: Any = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        total: dict[str, int] = {}
        for ps in self.pod_sets:
            n = ps.count
            for k, v in ps.requests.raw.items():
                total[k] = total.get(k, 0) + v * n
        object.__setattr__(self, "_request", Resources.from_raw(total))

    @property
    def request(self) -> Resources:
        """Total request: the sum over pod sets of ``count * requests`` (cached)."""
        return self._request

    @property
    def holds(self) -> bool:
        """Whether this workload holds quota and node capacity."""
        return self.phase in HOLDING_PHASES


# -- configuration and snapshot -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Knobs of one cycle; the defaults suit a shared batch/GPU cluster.

    ``fair_share_mode``: ``instant`` (weighted dominant share with the candidate's
    request), ``historical`` (decayed usage ledger, plus the entry penalty of
    admissions made earlier in the same cycle) or ``blended``
    (``blend_alpha * instant + (1 - blend_alpha) * historical``).
    """

    fair_share_mode: str = "blended"
    blend_alpha: float = 0.5
    usage_half_life_s: float = 7 * 24 * 3600
    entry_penalty_s: float = 600.0
    preemption: bool = True
    explain_ahead: int = 5
    eta_horizon_s: float = 24 * 3600
    eta_budget_s: float = 0.25
    default_runtime_s: float = 600.0
    #: Node label whose value names the pool an admission landed in.
    pool_label: str = "koord-queue/pool"
    #: Forecast: candidates looked at per queue at each simulated instant.
    eta_max_depth: int = 4
    #: A running workload expected to finish within this many seconds (declared
    #: runtime, else its queue's p50) is not preempted: waiting costs less than the
    #: work an eviction throws away. 0 disables the rule.
    preempt_grace_s: float = 60.0
    #: How often cycles run (s), for the forecast: work that ends between two cycles is
    #: admitted at the next one. 0: cycles run at every event (no rounding).
    cycle_interval_s: float = 0.0
    #: Work with a declared runtime that ends before a drained gang can start may use
    #: the drain's room (``Cycle.place_backfill``; Slurm's backfill). Off: a drain
    #: holds its room for the rest of the cycle whatever would have ended in time.
    backfill: bool = True

    def __post_init__(self) -> None:
        if self.fair_share_mode not in ("instant", "historical", "blended"):
            raise ValueError(f"unknown fair_share_mode {self.fair_share_mode!r}")
        if not 0.0 <= self.blend_alpha <= 1.0:
            raise ValueError("blend_alpha must be within [0, 1]")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one cycle reads, as of ``now`` (epoch seconds).

    ``ledger``: per quota, decayed consumed resource-seconds at ``now``.
    ``runtime_history``: per queue, observed (p50, p90) runtime in seconds.
    ``unlisted_demand``: per quota, the requests of competing workloads left out of
    ``workloads`` (a caller that lists only the head of each long queue). They count
    towards the demand that runtime quotas are water-filled by, so the decisions about
    the listed ones are those a full snapshot would give as long as the cycle does not
    reach past the listed head of a queue.
    """

    now: float
    quotas: tuple[QuotaNode, ...]
    queues: tuple[QueueSpec, ...]
    workloads: tuple[WorkloadSpec, ...]
    nodes: tuple[NodeSpec, ...]
    ledger: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    runtime_history: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    config: EngineConfig = field(default_factory=EngineConfig)
    unlisted_demand: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    #: Per queue, observed (p50, p90) of actual / declared runtime (a declared runtime
    #: is a limit, work mostly ends before it). Empty: declared runtimes are taken as is.
    runtime_ratio: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    #: The ETAs published by the previous cycle (for hysteresis, see :class:`Eta`).
    previous_etas: Mapping[int, Eta] = field(default_factory=dict)
    #: Measured error of earlier forecasts per class (see :mod:`.calibration`,
    #: ``eta_classes``; "" pools all): the p50's shift (``Residuals.shift``; None where
    #: a class has too few errors for it) and the QBETS upper bound of the p90 of
    #: ``(actual wait - predicted wait) / max(predicted wait, floor)`` over recently
    #: admitted workloads. Empty: not calibrated; the p90 comes from p90 runtimes.
    eta_residuals: Mapping[str, tuple[float | None, float]] = field(default_factory=dict)
    #: Offered load of recent arrivals per queue, priority and resource, as a fraction
    #: of their tree's capacity of that resource (arrival rate x share x runtime; see
    #: :class:`.calibration.ArrivalLoad`). Arrivals that go before a waiting workload
    #: stretch its wait by ``1 / (1 - their load)`` (see :mod:`.eta`). Empty: none.
    arrival_load: Mapping[str, Mapping[int, Mapping[str, float]]] = field(default_factory=dict)
    #: The workloads that arrived in the last ``arrival_span_s`` seconds, as templates
    #: (queue, quota, priority, pod sets, declared runtime; ``queue_order_at``: when
    #: each arrived). The forecast's draws replay arrivals like them at their rate
    #: (see :mod:`.forecast_arrivals`). Empty: none, or no span to read a rate over.
    recent_arrivals: tuple[WorkloadSpec, ...] = ()
    arrival_span_s: float = 0.0
    #: How long the system has seen arrivals (its oldest workload's age): an inflow seen
    #: for that long lasts, by Gott's argument, as long again at the median (see
    #: :mod:`.forecast_arrivals`). Infinite: not known, taken as long established.
    arrival_age_s: float = float("inf")


# -- decisions ------------------------------------------------------------------------


def _res_dict(value: Mapping[str, int]) -> dict[str, int]:
    return {k: int(value[k]) for k in sorted(value) if value[k]}


@dataclass(frozen=True, slots=True)
class Admission:
    """Admit ``workload_id``: unsuspend it with this node/pool assignment."""

    workload_id: int
    quota: str
    queue: str
    assignment: Mapping[str, Resources]
    placements: tuple[tuple[str, str, int], ...]  # (pod_set, node, count)
    pool: str | None = None
    #: The workload had been nominated by an earlier preemption.
    nominated: bool = False
    #: What of its request runs on room lent beyond its quota's share (the most at
    #: any level of its chain, per resource; never more than it asks), and the quotas
    #: that lent it: room no candidate of theirs could use this cycle
    #: (:mod:`.lending`). Empty when it fitted its share.
    lent: Resources = EMPTY
    lent_by: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload_id": self.workload_id,
            "quota": self.quota,
            "queue": self.queue,
            "assignment": {n: _res_dict(r) for n, r in sorted(self.assignment.items())},
            "placements": [list(p) for p in self.placements],
            "pool": self.pool,
            "nominated": self.nominated,
            "lent": _res_dict(self.lent),
            "lent_by": list(self.lent_by),
        }


@dataclass(frozen=True, slots=True)
class Preemption:
    """Evict ``victim_id`` so ``preemptor_id`` can be admitted in a later cycle.

    ``reason``: ``InQueue`` (lower priority, same quota), ``Reclaim`` (the victim's
    quota borrows what the preemptor's quota is guaranteed) or ``FairShare`` (both
    borrow; the preemptor's share after the swap stays at or below the victim's).
    """

    victim_id: int
    preemptor_id: int
    reason: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "victim_id": self.victim_id,
            "preemptor_id": self.preemptor_id,
            "reason": self.reason,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class Requeue:
    """Return an admitted workload to the queue at ``requeue_at`` (Backoff)."""

    workload_id: int
    requeue_at: float
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload_id": self.workload_id,
            "requeue_at": self.requeue_at,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class Position:
    """1-based rank in the workload's queue and in the engine's global order."""

    in_queue: int
    global_: int

    def to_dict(self) -> dict[str, int]:
        return {"in_queue": self.in_queue, "global": self.global_}


@dataclass(frozen=True, slots=True)
class Eta:
    """Forecast admission times (epoch seconds) and why they are what they are.

    ``p50``/``p90``: None when there is no forecast; ``reason`` then says why (beyond
    the horizon, the budget spent). ``moved`` says what the ETA did since the one the
    caller passed back as ``Snapshot.previous_etas``: ``first`` (no earlier one),
    ``kept`` (the new forecast is within the tolerance of the old one: it stays, so it
    does not jitter), ``earlier``/``later`` (the world changed enough to move it, by
    ``delta_s``), ``overdue`` (the old estimate passed while it still waits).
    ``by_age``: in a strict-order queue with aging, its p50 is earlier than that of
    work ahead of it: by then it will have waited past the queue's aging bound, and
    aged work goes first (:func:`.aging.queue_order_key`).
    """

    p50: float | None
    p90: float | None
    reason: str = ""
    moved: str = ""
    delta_s: float = 0.0
    #: The simulation's own start time before calibration (what errors are learnt on).
    forecast: float | None = None
    #: A move held back for one cycle (the p50 this cycle wanted); pass it back in
    #: ``previous_etas`` to confirm it. A caller that keeps only p50/p90 (``moved`` ""
    #: in what it passes back) gets every move at once.
    pending: float | None = None
    by_age: bool = False

    def to_dict(self) -> dict[str, float | str | bool | None]:
        return {
            "p50": self.p50,
            "p90": self.p90,
            "reason": self.reason,
            "moved": self.moved,
            "delta_s": self.delta_s,
            "forecast": self.forecast,
            "pending": self.pending,
            "by_age": self.by_age,
        }


@dataclass(frozen=True, slots=True)
class NodeHold:
    """Free room on a node that the cycle keeps for one waiting workload.

    ``kind`` ``drain``: a head past its aging bound that fits its quota but not the
    nodes (``Cycle.starving``); smaller work may still use the room if it ends before
    the head can start (backfill), or if it is within its own quota's min.
    ``reservation``: a preemptor waiting for its victims to leave or end; this is what
    it needs beyond the room they release. Shown so that the room does not read as
    idle while work waits.
    """

    node: str
    workload_id: int
    kind: str
    resources: Resources

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "workload_id": self.workload_id,
            "kind": self.kind,
            "resources": self.resources.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class CycleResult:
    """Everything one cycle decided. Applying it is the caller's job.

    Added beyond the first contract (defaulted): ``nominations`` -- preemptors whose
    freed capacity is reserved for them; store it and feed it back as
    ``WorkloadSpec.nominated`` next cycle.
    """

    admissions: tuple[Admission, ...]
    preemptions: tuple[Preemption, ...]
    requeues: tuple[Requeue, ...]
    explanations: Mapping[int, Explanation]
    positions: Mapping[int, Position]
    etas: Mapping[int, Eta]
    runtime_quota: Mapping[str, Resources]
    used: Mapping[str, Resources]
    demand: Mapping[str, Resources]
    shares: Mapping[str, float]
    stats: Mapping[str, float]
    nominations: tuple[int, ...] = ()
    #: Of ``nominations``, those that await work ending within the grace period
    #: (nothing evicted for them); store it and feed it back as ``WorkloadSpec.awaiting``.
    awaiting: tuple[int, ...] = ()
    #: Free room kept on nodes for waiting workloads when the cycle ended (drains of
    #: aged heads, reservations of preemptors), by node and workload.
    holds: tuple[NodeHold, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (keys of id maps become strings)."""
        return {
            "admissions": [a.to_dict() for a in self.admissions],
            "preemptions": [p.to_dict() for p in self.preemptions],
            "requeues": [r.to_dict() for r in self.requeues],
            "explanations": {str(k): e.to_dict() for k, e in self.explanations.items()},
            "positions": {str(k): p.to_dict() for k, p in self.positions.items()},
            "etas": {str(k): e.to_dict() for k, e in self.etas.items()},
            "runtime_quota": {k: v.to_dict() for k, v in sorted(self.runtime_quota.items())},
            "used": {k: v.to_dict() for k, v in sorted(self.used.items())},
            "demand": {k: v.to_dict() for k, v in sorted(self.demand.items())},
            "shares": {k: (None if math.isinf(v) else v) for k, v in sorted(self.shares.items())},
            "stats": dict(self.stats),
            "nominations": list(self.nominations),
            "awaiting": list(self.awaiting),
            "holds": [h.to_dict() for h in self.holds],
        }
