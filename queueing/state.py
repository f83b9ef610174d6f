"""Between the database and the engine: build the Snapshot, apply the decisions.

``build_snapshot`` reads with a fixed number of queries, whatever the number of
workloads. ``apply`` writes decisions with conditional updates (``filter(id=…,
phase=Pending).update(…)`` and a row-count check) inside one transaction that first
re-checks the cycle lease's fencing token, so a decision computed from a stale snapshot,
or by a worker that lost its lease, never double-admits. Cluster calls happen after the
commit and are idempotent; whatever they miss, the next sync repeats.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from queueing import events
from queueing.choices import HOLDING_PHASES, WAITING_PHASES, Phase
from queueing.cluster.base import Cluster, ClusterError, JobNotFound, JobRef, NodeInfo
from queueing.engine import ledger as engine_ledger
from queueing.engine.resources import Resources
from queueing.engine.types import (
    CycleResult,
    EngineConfig,
    NodeSpec,
    PodSet,
    QueueSpec,
    QuotaNode,
    Snapshot,
    Taint,
    Toleration,
    WorkloadSpec,
)
from queueing.lease import Fence, Lease, LeaseLost, check
from queueing.models import (
    CycleRun,
    Queue,
    Quota,
    UsageLedger,
    UsageSample,
    Workload,
    WorkloadEvent,
)

log = logging.getLogger(__name__)

SAMPLE_EVERY = timedelta(seconds=60)
HISTORY_LIMIT = 5000  # finished workloads that feed the runtime quantiles


def epoch(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def from_epoch(value: float | None) -> datetime | None:
    return datetime.fromtimestamp(value, tz=UTC) if value is not None else None


def engine_config() -> EngineConfig:
    return EngineConfig(
        fair_share_mode=settings.KQ_FAIR_SHARE_MODE,
        usage_half_life_s=settings.KQ_USAGE_HALF_LIFE_S,
        pool_label=settings.KQ_POOL_LABEL,
    )


# --- snapshot ------------------------------------------------------------------------

WORKLOAD_FIELDS = (
    "id",
    "name",
    "namespace",
    "kind",
    "api_version",
    "object_uid",
    "tenant_id",
    "quota_id",
    "queue_id",
    "priority",
    "queue_order_at",
    "pod_sets",
    "phase",
    "requeue_at",
    "attempts",
    "expected_runtime_s",
    "admitted_at",
    "started_at",
    "assignment",
    "preempted_by_id",
    "nominated",
    "position",
    "global_position",
    "eta_p50",
    "eta_p90",
    "reason",
)


@dataclass
class SnapshotIndex:
    """What apply() needs beside the snapshot: ids, owners and the stored annotations."""

    root: str
    rows: dict[int, dict[str, Any]]
    quota_ids: dict[str, int]
    queue_ids: dict[str, int]
    quota_names: dict[int, str]
    queue_names: dict[int, str]
    ledgers: dict[str, tuple[dict[str, float], datetime | None]]
    now: datetime
    #: Competing workloads left out of a heads-only snapshot (``head``), not in ``rows``.
    unlisted: int = 0


def subtree(quotas: Sequence[Mapping[str, Any]], root: str | None) -> list[Mapping[str, Any]]:
    """The quotas under ``root`` (inclusive); every quota when root is None."""
    if root is None:
        return list(quotas)
    children: dict[int | None, list[Mapping[str, Any]]] = defaultdict(list)
    for quota in quotas:
        children[quota["parent_id"]].append(quota)
    top = [q for q in quotas if q["name"] == root]
    out: list[Mapping[str, Any]] = []
    stack = list(top)
    while stack:
        quota = stack.pop()
        out.append(quota)
        stack.extend(children.get(quota["id"], ()))
    return out


def roots() -> list[str]:
    return list(Quota.objects.filter(parent__isnull=True).values_list("name", flat=True))


_TOLERATION_KEYS = ("key", "operator", "value", "effect")


def _pod_sets(
    raw: Sequence[Mapping[str, Any]], cache: dict[str, tuple[PodSet, ...]]
) -> tuple[PodSet, ...]:
    # Many workloads share a shape; parse each distinct shape once.
    key = json.dumps(raw, sort_keys=True, separators=(",", ":"))
    found = cache.get(key)
    if found is None:
        found = tuple(
            PodSet(
                name=str(ps.get("name", "main")),
                count=int(ps.get("count", 1)),
                requests=Resources(ps.get("requests") or {}),
                node_selector=dict(ps.get("node_selector") or {}),
                tolerations=tuple(
                    Toleration(**{k: str(t[k]) for k in _TOLERATION_KEYS if t.get(k) is not None})
                    for t in ps.get("tolerations") or ()
                ),
            )
            for ps in raw
        )
        cache[key] = found
    return found


def _runtime_history(queue_ids: Iterable[int]) -> dict[int, tuple[float, float]]:
    rows = (
        Workload.objects.filter(
            queue_id__in=list(queue_ids),
            phase=Phase.SUCCEEDED,
            started_at__isnull=False,
            finished_at__isnull=False,
        )
        .order_by("-finished_at")
        .values_list("queue_id", "started_at", "finished_at")[:HISTORY_LIMIT]
    )
    durations: dict[int, list[float]] = defaultdict(list)
    for queue_id, started, finished in rows:
        if started is not None and finished is not None:
            durations[queue_id].append(max(0.0, (finished - started).total_seconds()))
    out: dict[int, tuple[float, float]] = {}
    for queue_id, values in durations.items():
        if len(values) >= 2:
            deciles = statistics.quantiles(values, n=10, method="inclusive")
            out[queue_id] = (statistics.median(values), deciles[8])
        else:
            out[queue_id] = (values[0], values[0])
    return out


HISTORY_TTL_S = 30.0
_history: dict[frozenset[int], tuple[float, dict[int, tuple[float, float]]]] = {}


def _runtime_history_cached(
    queue_ids: Iterable[int], *, fresh: bool
) -> dict[int, tuple[float, float]]:
    """Full cycles read the runtime history afresh; heads-only cycles reuse what a cycle
    of this process read in the last HISTORY_TTL_S (it is the same for every tree)."""
    key = frozenset(queue_ids)
    hit = _history.get(key)
    if not fresh and hit is not None and time.monotonic() - hit[0] < HISTORY_TTL_S:
        return hit[1]
    value = _runtime_history(key)
    _history.clear()
    _history[key] = (time.monotonic(), value)
    return value


def build_snapshot(
    root: str | None,
    *,
    nodes: Sequence[NodeInfo],
    now: datetime | None = None,
    config: EngineConfig | None = None,
    head: int | None = None,
) -> tuple[Snapshot, SnapshotIndex]:
    """Read the database into a Snapshot of the tree under ``root`` (None: every tree).

    A fixed number of queries: quotas, queues, live workloads, other trees' holdings,
    ledgers, runtime history.

    ``head``: list only the first ``head`` competing workloads of each queue (in the
    engine's queue order) and give the rest as ``unlisted_demand``; waiting workloads
    that do not compete yet (Backoff until later) are left out. The admissions are
    those of a full snapshot while no queue admits past its head (see the engine's
    ``Snapshot``); positions and ETAs cover the listed heads only.
    """
    now = now or timezone.now()
    config = config or engine_config()
    all_quotas = list(
        Quota.objects.values("id", "name", "parent_id", "min", "max", "shared_weight", "allow_lent")
    )
    quotas = subtree(all_quotas, root)
    quota_ids = {q["name"]: q["id"] for q in quotas}
    id_to_quota = {q["id"]: q["name"] for q in all_quotas}

    queue_rows = list(
        Queue.objects.values(
            "id",
            "name",
            "policy",
            "priority",
            "priority_threshold",
            "max_depth",
            "preempt_within_quota",
            "reclaim",
            "admission_timeout_s",
            "backoff_base_s",
            "backoff_max_s",
            "backoff_jitter",
        )
    )
    queue_names = {q["id"]: q["name"] for q in queue_rows}

    in_tree = Workload.objects.filter(quota_id__in=list(quota_ids.values()))
    unlisted_demand: dict[str, dict[str, int]] = {}
    unlisted = 0
    if head is None:
        rows = {
            row["id"]: row
            for row in in_tree.filter(phase__in=[*WAITING_PHASES, *HOLDING_PHASES]).values(
                *WORKLOAD_FIELDS
            )
        }
    else:
        competing = (
            Q(phase=Phase.PENDING)
            | Q(phase=Phase.BACKOFF, requeue_at__isnull=True)
            | Q(phase=Phase.BACKOFF, requeue_at__lte=now)
        )
        rows = {
            row["id"]: row
            for row in in_tree.filter(phase__in=HOLDING_PHASES).values(*WORKLOAD_FIELDS)
        }
        ranked = in_tree.filter(competing).annotate(
            rank=Window(
                RowNumber(),
                partition_by=[F("queue_id")],
                order_by=[F("priority").desc(), F("queue_order_at").asc(), F("id").asc()],
            )
        )
        for row in ranked.filter(rank__lte=head).values(*WORKLOAD_FIELDS):
            rows[row["id"]] = row
        for workload_id, quota_id, request in in_tree.filter(competing).values_list(
            "id", "quota_id", "total_request"
        ):
            if workload_id in rows:
                continue
            unlisted += 1
            bucket = unlisted_demand.setdefault(id_to_quota[quota_id], {})
            for resource, amount in (request or {}).items():
                bucket[resource] = bucket.get(resource, 0) + int(amount)
    # Nodes are shared between trees: what other trees hold is not free for this one.
    elsewhere: dict[str, dict[str, int]] = defaultdict(dict)
    if root is not None:
        for assignment in (
            Workload.objects.filter(phase__in=HOLDING_PHASES)
            .exclude(quota_id__in=list(quota_ids.values()))
            .values_list("assignment", flat=True)
        ):
            for node, held in (assignment or {}).items():
                bucket = elsewhere[node]
                for resource, amount in held.items():
                    bucket[resource] = bucket.get(resource, 0) + int(amount)

    ledgers: dict[str, tuple[dict[str, float], datetime | None]] = {}
    for quota_id, usage, updated in UsageLedger.objects.filter(
        quota_id__in=list(quota_ids.values())
    ).values_list("quota_id", "usage", "updated_at"):
        ledgers[id_to_quota[quota_id]] = (dict(usage), updated)
    history = _runtime_history_cached(queue_names, fresh=head is None)

    used_queue_ids = {row["queue_id"] for row in rows.values()}
    snapshot = Snapshot(
        now=now.timestamp(),
        quotas=tuple(
            QuotaNode(
                name=q["name"],
                parent=id_to_quota.get(q["parent_id"])
                if q["parent_id"] in quota_ids.values()
                else None,
                min=Resources(q["min"] or {}),
                max=dict(q["max"] or {}),
                shared_weight=dict(q["shared_weight"] or {}),
                allow_lent=q["allow_lent"],
            )
            for q in quotas
        ),
        queues=tuple(
            QueueSpec(
                name=q["name"],
                policy=q["policy"],
                priority=q["priority"],
                priority_threshold=q["priority_threshold"],
                max_depth=q["max_depth"],
                preempt_within_quota=q["preempt_within_quota"],
                reclaim=q["reclaim"],
                admission_timeout_s=q["admission_timeout_s"],
                backoff_base_s=q["backoff_base_s"],
                backoff_max_s=q["backoff_max_s"],
                backoff_jitter=q["backoff_jitter"],
            )
            for q in queue_rows
            if q["id"] in used_queue_ids
        ),
        workloads=_workload_specs(rows.values(), id_to_quota, queue_names),
        nodes=tuple(_node_spec(node, elsewhere.get(node.name)) for node in nodes),
        ledger={
            name: engine_ledger.decay(
                usage,
                (now - updated).total_seconds() if updated else 0.0,
                config.usage_half_life_s,
            )
            for name, (usage, updated) in ledgers.items()
        },
        runtime_history={
            queue_names[qid]: value for qid, value in history.items() if qid in queue_names
        },
        config=config,
        unlisted_demand=unlisted_demand,
    )
    index = SnapshotIndex(
        root=root or "*",
        rows=rows,
        quota_ids=quota_ids,
        queue_ids={name: qid for qid, name in queue_names.items()},
        quota_names=id_to_quota,
        queue_names=queue_names,
        ledgers=ledgers,
        now=now,
        unlisted=unlisted,
    )
    return snapshot, index


def _workload_specs(
    rows: Iterable[Mapping[str, Any]],
    quota_names: Mapping[int, str],
    queue_names: Mapping[int, str],
) -> tuple[WorkloadSpec, ...]:
    cache: dict[str, tuple[PodSet, ...]] = {}
    specs = []
    for row in rows:
        specs.append(
            WorkloadSpec(
                id=row["id"],
                name=row["name"],
                quota=quota_names[row["quota_id"]],
                queue=queue_names[row["queue_id"]],
                priority=row["priority"],
                queue_order_at=row["queue_order_at"].timestamp(),
                pod_sets=_pod_sets(row["pod_sets"], cache),
                phase=row["phase"],
                requeue_at=epoch(row["requeue_at"]),
                attempts=row["attempts"],
                expected_runtime_s=row["expected_runtime_s"],
                admitted_at=epoch(row["admitted_at"]),
                started_at=epoch(row["started_at"]),
                assignment={
                    node: Resources(held) for node, held in (row["assignment"] or {}).items()
                },
                preempted_by=row["preempted_by_id"],
                nominated=row["nominated"],
            )
        )
    return tuple(specs)


def _node_spec(node: NodeInfo, elsewhere: Mapping[str, int] | None) -> NodeSpec:
    reserved = dict(node.reserved)
    for resource, amount in (elsewhere or {}).items():
        reserved[resource] = reserved.get(resource, 0) + amount
    return NodeSpec(
        name=node.name,
        allocatable=Resources(node.allocatable),
        reserved=Resources(reserved),
        labels=dict(node.labels),
        taints=tuple(
            Taint(
                key=str(t.get("key", "")),
                value=str(t.get("value", "")),
                effect=str(t.get("effect", "NoSchedule")),
            )
            for t in node.taints
        ),
        unschedulable=node.unschedulable,
    )


# --- apply ---------------------------------------------------------------------------


@dataclass
class ApplyReport:
    cycle_id: int | None = None
    admitted: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    requeued: list[int] = field(default_factory=list)
    annotated: int = 0
    conflicts: int = 0
    engine_ms: float = 0.0
    errors: list[str] = field(default_factory=list)


def _eta_changed(old: datetime | None, new: datetime | None, now: datetime) -> bool:
    """Avoid rewriting every row each cycle for an ETA that moved by a few seconds."""
    if old is None or new is None:
        return old is not new
    tolerance = max(5.0, 0.02 * abs((new - now).total_seconds()))
    return abs((new - old).total_seconds()) > tolerance


# A full cycle reads every live workload of its tree and rewrites the annotations
# (position, ETA, reason, explanation) of all waiting ones. While that is cheap every
# cycle is full. Once a full cycle costs more than FULL_CYCLE_CHEAP_S, full cycles run
# at most FULL_CYCLE_SHARE of the time (per tree, per process); the cycles between read
# only the first HEAD_ROWS competing workloads of each queue (``build_snapshot(head=)``)
# and re-annotate the first ANNOTATE_FRONT of each queue and the workloads that have no
# position yet: what people look at first, and what is new.
FULL_CYCLE_CHEAP_S = 0.25
FULL_CYCLE_SHARE = 0.1
HEAD_ROWS = 128
ANNOTATE_FRONT = 20
_full_cycles: dict[str, tuple[float, float]] = {}  # root -> (monotonic, cost in s)


def full_cycle_due(root: str) -> bool:
    """Whether the next cycle of ``root`` should be full. The trees of a process share
    one budget: each comes round again once all of their full cycles together fit in
    FULL_CYCLE_SHARE of the time since."""
    last = _full_cycles.get(root)
    if last is None:
        return True
    at, cost = last
    if cost <= FULL_CYCLE_CHEAP_S:
        return True
    together = sum(c for _, c in _full_cycles.values())
    return time.monotonic() - at >= together / FULL_CYCLE_SHARE


def full_cycle_done(root: str, cost_s: float) -> None:
    _full_cycles[root] = (time.monotonic(), cost_s)


def _annotations(
    result: CycleResult, index: SnapshotIndex, *, full: bool = True
) -> list[tuple[int, dict[str, Any]]]:
    """Per waiting workload, the stored fields that changed: position, ETA, reason.

    ``full=False`` looks only at the front of each queue and at new workloads."""
    admitted = {a.workload_id for a in result.admissions}
    candidates: list[tuple[int, Mapping[str, Any], Mapping[str, Any]]] = []
    for workload_id, row in index.rows.items():
        if row["phase"] not in WAITING_PHASES or workload_id in admitted:
            continue
        position = result.positions.get(workload_id)
        if (
            not full
            and row["position"] is not None
            and (position is None or position.in_queue > ANNOTATE_FRONT)
        ):
            continue
        eta = result.etas.get(workload_id)
        candidates.append(
            (
                workload_id,
                row,
                {
                    "position": position.in_queue if position else None,
                    # Across queues, a heads-only cycle cannot tell: the full one will.
                    "global_position": (
                        position.global_
                        if position and (full or row["global_position"] is None)
                        else row["global_position"]
                    ),
                    "eta_p50": from_epoch(eta.p50) if eta else None,
                    "eta_p90": from_epoch(eta.p90) if eta else None,
                },
            )
        )
    # The stored explanations, read only for the rows looked at (JSON is not cheap).
    if len(candidates) > 2_000:  # most of the tree: select it by tree, not a huge IN list
        looked_at = Workload.objects.filter(
            phase__in=WAITING_PHASES, quota_id__in=list(index.quota_ids.values())
        )
    else:
        looked_at = Workload.objects.filter(id__in=[c[0] for c in candidates])
    stored = dict(looked_at.values_list("id", "explanation")) if candidates else {}
    changed: list[tuple[int, dict[str, Any]]] = []
    for workload_id, before, fields in candidates:
        new = dict(fields)
        explanation = result.explanations.get(workload_id)
        as_dict = explanation.to_dict() if explanation else None
        new["reason"] = as_dict["sentence"][:500] if as_dict else ""
        new["explanation"] = as_dict
        if (
            new["position"] != before["position"]
            or new["global_position"] != before["global_position"]
            or new["reason"] != before["reason"]
            or new["explanation"] != stored.get(workload_id)
            or _eta_changed(before["eta_p50"], new["eta_p50"], index.now)
            or _eta_changed(before["eta_p90"], new["eta_p90"], index.now)
        ):
            changed.append((workload_id, new))
    return changed


def _write_annotations(changes: Sequence[tuple[int, dict[str, Any]]], now: datetime) -> int:
    """One executemany for all changed rows, guarded by phase so racing moves win."""
    if not changes:
        return 0
    table = Workload._meta.db_table
    json_cast = "::jsonb" if connection.vendor == "postgresql" else ""
    waiting = ", ".join(f"'{phase}'" for phase in WAITING_PHASES)
    sql = (
        f"UPDATE {table} SET position = %s, global_position = %s, eta_p50 = %s, eta_p90 = %s, "
        f"reason = %s, explanation = %s{json_cast}, updated_at = %s "
        f"WHERE id = %s AND phase IN ({waiting})"
    )
    to_db = connection.ops.adapt_datetimefield_value
    params = [
        (
            new["position"],
            new["global_position"],
            to_db(new["eta_p50"]),
            to_db(new["eta_p90"]),
            new["reason"],
            json.dumps(new["explanation"]) if new["explanation"] is not None else None,
            to_db(now),
            workload_id,
        )
        for workload_id, new in changes
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)
    return len(changes)


def _charge_ledgers(result: CycleResult, index: SnapshotIndex, config: EngineConfig) -> None:
    admitted_by_quota: dict[str, dict[str, int]] = defaultdict(dict)
    for admission in result.admissions:
        row = index.rows[admission.workload_id]
        request = _total(row["pod_sets"])
        bucket = admitted_by_quota[admission.quota]
        for resource, amount in request.items():
            bucket[resource] = bucket.get(resource, 0) + amount
    leaves = {name for name in index.quota_ids} - {
        index.quota_names.get(parent_id)
        for parent_id in Quota.objects.filter(id__in=list(index.quota_ids.values())).values_list(
            "parent_id", flat=True
        )
    }
    existing = dict(
        UsageLedger.objects.filter(quota_id__in=[index.quota_ids[n] for n in leaves]).values_list(
            "quota_id", "id"
        )
    )
    for name in leaves:
        usage, updated = index.ledgers.get(name, ({}, None))
        elapsed = (index.now - updated).total_seconds() if updated else 0.0
        used = result.used.get(name)
        values = engine_ledger.charge(
            usage,
            dict(used.raw) if used is not None else {},
            elapsed,
            config.usage_half_life_s,
            admitted=admitted_by_quota.get(name),
            entry_penalty_s=config.entry_penalty_s,
        )
        quota_id = index.quota_ids[name]
        if quota_id in existing:
            UsageLedger.objects.filter(id=existing[quota_id]).update(
                usage=values, updated_at=index.now
            )
        else:
            UsageLedger.objects.create(quota_id=quota_id, usage=values, updated_at=index.now)


def _total(pod_sets: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for ps in pod_sets:
        for resource, amount in (ps.get("requests") or {}).items():
            total[resource] = total.get(resource, 0) + int(amount) * int(ps.get("count", 1))
    return total


def _sample_usage(result: CycleResult, index: SnapshotIndex) -> None:
    latest = (
        UsageSample.objects.filter(quota_id__in=list(index.quota_ids.values()))
        .order_by("-at")
        .values_list("at", flat=True)
        .first()
    )
    if latest is not None and index.now - latest < SAMPLE_EVERY:
        return
    ledgers = dict(
        UsageLedger.objects.filter(quota_id__in=list(index.quota_ids.values())).values_list(
            "quota_id", "usage"
        )
    )
    UsageSample.objects.bulk_create(
        UsageSample(
            quota_id=quota_id,
            at=index.now,
            decayed=ledgers.get(quota_id, {}),
            used=result.used[name].to_dict() if name in result.used else {},
            runtime=result.runtime_quota[name].to_dict() if name in result.runtime_quota else {},
        )
        for name, quota_id in index.quota_ids.items()
    )
    UsageSample.objects.filter(at__lt=index.now - timedelta(days=14)).delete()


def apply(
    result: CycleResult,
    snapshot: Snapshot,
    index: SnapshotIndex,
    lease: Lease | None,
    cluster: Cluster,
    *,
    engine_ms: float = 0.0,
    full: bool = True,
) -> ApplyReport:
    """Write the cycle's decisions, then make the cluster follow. See the module docstring."""
    now = index.now
    report = ApplyReport(engine_ms=engine_ms)
    changed_ids: set[int] = set()
    with transaction.atomic():
        if lease is not None:
            check(lease)  # raises LeaseLost: nothing of this cycle is written
        timeline: list[WorkloadEvent] = []

        for admission in result.admissions:
            assignment = {node: held.to_dict() for node, held in admission.assignment.items()}
            updated = Workload.objects.filter(
                id=admission.workload_id, phase__in=WAITING_PHASES
            ).update(
                phase=Phase.ADMITTED,
                admitted_at=now,
                wait_s=max(
                    0.0, (now - index.rows[admission.workload_id]["queue_order_at"]).total_seconds()
                ),
                assignment=assignment,
                pool=admission.pool or "",
                attempts=F("attempts") + 1,
                requeue_at=None,
                nominated=False,
                position=None,
                global_position=None,
                eta_p50=None,
                eta_p90=None,
                explanation=None,
                reason="Admitted: within quota and placed on nodes.",
                updated_at=now,
            )
            if updated != 1:
                report.conflicts += 1
                continue
            report.admitted.append(admission.workload_id)
            timeline.append(
                WorkloadEvent(
                    workload_id=admission.workload_id,
                    at=now,
                    from_phase=index.rows[admission.workload_id]["phase"],
                    to_phase=Phase.ADMITTED,
                    reason="Admitted",
                    message=f"Placed on {', '.join(sorted(assignment)) or 'no node'}.",
                )
            )

        for preemption in result.preemptions:
            updated = Workload.objects.filter(
                id=preemption.victim_id, phase__in=(Phase.ADMITTED, Phase.RUNNING)
            ).update(
                phase=Phase.PREEMPTED,
                preempted_by_id=preemption.preemptor_id,
                message=preemption.message,
                reason=f"Preempted ({preemption.reason}): {preemption.message}"[:500],
                updated_at=now,
            )
            if updated != 1:
                report.conflicts += 1
                continue
            report.preempted.append(preemption.victim_id)
            timeline.append(
                WorkloadEvent(
                    workload_id=preemption.victim_id,
                    at=now,
                    from_phase=index.rows[preemption.victim_id]["phase"],
                    to_phase=Phase.PREEMPTED,
                    reason=preemption.reason,
                    message=preemption.message,
                )
            )

        for requeue in result.requeues:
            updated = Workload.objects.filter(
                id=requeue.workload_id, phase=Phase.ADMITTED, started_at__isnull=True
            ).update(
                phase=Phase.PREEMPTED,
                requeue_at=from_epoch(requeue.requeue_at),
                message=requeue.reason,
                reason=requeue.reason[:500],
                updated_at=now,
            )
            if updated != 1:
                report.conflicts += 1
                continue
            report.requeued.append(requeue.workload_id)
            timeline.append(
                WorkloadEvent(
                    workload_id=requeue.workload_id,
                    at=now,
                    from_phase=Phase.ADMITTED,
                    to_phase=Phase.PREEMPTED,
                    reason="AdmissionTimeout",
                    message=requeue.reason,
                )
            )

        if result.nominations:
            Workload.objects.filter(
                id__in=list(result.nominations), phase__in=WAITING_PHASES, nominated=False
            ).update(nominated=True)

        WorkloadEvent.objects.bulk_create(timeline)
        annotations = _annotations(result, index, full=full)
        report.annotated = _write_annotations(annotations, now)
        _charge_ledgers(result, index, snapshot.config)
        quota_changes = _store_quota_state(result, index)
        _sample_usage(result, index)

        changed_ids.update(report.admitted, report.preempted, report.requeued)
        changed_ids.update(workload_id for workload_id, _ in annotations)
        cycle = CycleRun.objects.create(
            root=index.root,
            started_at=now,
            engine_ms=engine_ms,
            admitted=len(report.admitted),
            preempted=len(report.preempted),
            requeued=len(report.requeued),
            pending=sum(1 for row in index.rows.values() if row["phase"] in WAITING_PHASES)
            + index.unlisted
            - len(report.admitted),
            running=sum(1 for row in index.rows.values() if row["phase"] in HOLDING_PHASES)
            + len(report.admitted),
            conflicts=report.conflicts,
            token=lease.token if lease else 0,
            worker=lease.holder if lease else "",
            stats={**{k: float(v) for k, v in result.stats.items()}, "full": float(full)},
        )
        report.cycle_id = cycle.pk
        _publish(changed_ids, index, cycle.pk)
        _publish_quotas(quota_changes, cycle.pk)

    # After the commit: make the cluster follow. Idempotent; the next sync retries. The
    # fence stops here if the lease ran out: another worker may have decided since.
    fence = Fence(lease)
    pools = {a.workload_id: a.pool for a in result.admissions}
    calls: list[tuple[int, Any]] = []
    for workload_id in report.admitted:
        pool = pools.get(workload_id)
        selector = {settings.KQ_POOL_LABEL: pool} if pool else {}
        calls.append((workload_id, lambda ref, s=selector: cluster.admit(ref, node_selector=s)))
    calls.extend(
        (workload_id, cluster.suspend) for workload_id in report.preempted + report.requeued
    )
    _cluster_calls(report, [(index.rows[w], call) for w, call in calls], fence, cluster)
    if report.errors:
        CycleRun.objects.filter(pk=report.cycle_id).update(errors=report.errors[:50])
    return report


def _store_quota_state(result: CycleResult, index: SnapshotIndex) -> list[dict[str, Any]]:
    """Keep each quota's runtime quota and usage on its row; return the ones that moved."""
    changed: list[dict[str, Any]] = []
    rows = Quota.objects.filter(id__in=list(index.quota_ids.values())).values(
        "id", "name", "tenant_id", "runtime", "used", "min", "max"
    )
    for row in rows:
        runtime = (
            result.runtime_quota[row["name"]].to_dict()
            if row["name"] in result.runtime_quota
            else {}
        )
        used = result.used[row["name"]].to_dict() if row["name"] in result.used else {}
        if runtime == row["runtime"] and used == row["used"]:
            continue
        Quota.objects.filter(id=row["id"]).update(runtime=runtime, used=used)
        changed.append({**row, "runtime": runtime, "used": used})
    return changed


def _publish_quotas(changed: Sequence[Mapping[str, Any]], cycle_id: int) -> None:
    """The quotas whose runtime quota or usage moved, in the configuration messages'
    shape; a cluster quota's (no tenant) go to the cluster admins only."""
    by_tenant: dict[int | None, list[dict[str, Any]]] = defaultdict(list)
    for row in changed:
        by_tenant[row["tenant_id"]].append(
            {key: row[key] for key in ("id", "name", "runtime", "used", "min", "max")}
        )
    for tenant_id, quotas in by_tenant.items():
        events.publish_on_commit(
            tenant_id, events.config_message("quotas", tenant_id, quotas, cycle_id=cycle_id)
        )


def _ref(row: Mapping[str, Any]) -> JobRef:
    return JobRef(row["kind"], row["api_version"], row["namespace"], row["name"], row["object_uid"])


def _cluster_calls(
    report: ApplyReport,
    calls: Sequence[tuple[Mapping[str, Any], Any]],
    fence: Fence,
    cluster: object,
) -> None:
    """Make the calls, ``write_concurrency`` of the cluster at a time (an API server takes
    concurrent writes; the simulated cluster writes its own rows, one at a time).

    The fence is checked in this thread before each round: a round takes at most one
    call's time, which is what the fence's margin covers."""
    width = max(1, int(getattr(cluster, "write_concurrency", 1) or 1))
    pool = ThreadPoolExecutor(width, thread_name_prefix="kq-write") if width > 1 else None
    try:
        for start in range(0, len(calls), width):
            try:
                fence.check()
            except LeaseLost as exc:
                report.errors.append(str(exc))
                return
            round_ = calls[start : start + width]
            if pool is None:
                for row, call in round_:
                    _cluster_call(report, row, call)
            else:
                for future in [
                    pool.submit(_cluster_call, report, row, call) for row, call in round_
                ]:
                    future.result()
    finally:
        if pool is not None:
            pool.shutdown(wait=True)


def _cluster_call(report: ApplyReport, row: Mapping[str, Any], call: Any) -> None:
    try:
        call(_ref(row))
    except JobNotFound as exc:
        report.errors.append(f"{row['namespace']}/{row['name']}: {exc}")
    except ClusterError as exc:
        report.errors.append(f"{row['namespace']}/{row['name']}: {exc} (will retry at next sync)")
        log.warning("cluster call for %s/%s failed: %s", row["namespace"], row["name"], exc)


def _publish(ids: set[int], index: SnapshotIndex, cycle_id: int) -> None:
    """Announce the changed workloads after the commit: ids and queues from the snapshot
    index, no query. Subscribers read the rows they show themselves (docs/events.md)."""
    events.notify_changes(
        (
            (index.rows[i]["tenant_id"], index.rows[i]["queue_id"], i)
            for i in sorted(ids)
            if i in index.rows
        ),
        cycle_id=cycle_id,
    )
