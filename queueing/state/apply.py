"""apply(): write a cycle's decisions, then make the cluster follow.

One transaction, in numbered steps (``apply`` below). Every phase change is
conditional: the rows a kind of change touches are read and locked in one query, and
only those still in the phase the decision was made from move, so a decision computed
from a stale snapshot, or by a worker that lost its lease (the fencing token is checked
first), never double-admits. Each kind of change is one statement for the whole cycle,
not one per workload. Cluster calls come after the commit (state.calls).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F

from queueing import events, wake, world
from queueing.choices import HOLDING_PHASES, WAITING_PHASES, Phase
from queueing.cluster.base import Cluster, JobRef
from queueing.engine.types import Admission, CycleResult, Snapshot
from queueing.lease import Fence, Lease, check
from queueing.models import CycleRun, Workload, WorkloadEvent
from queueing.state import placement
from queueing.state.annotate import pending_annotations, write_annotations
from queueing.state.calls import Call, admit_call, run_calls
from queueing.state.quotas import charge_ledgers, publish_quotas, sample_usage, store_quota_state
from queueing.state.snapshot import SnapshotIndex, from_epoch

log = logging.getLogger(__name__)


@dataclass
class ApplyReport:
    cycle_id: int | None = None
    admitted: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    requeued: list[int] = field(default_factory=list)
    #: Admissions withdrawn because another tree took their room on shared nodes.
    displaced: list[int] = field(default_factory=list)
    annotated: int = 0
    conflicts: int = 0
    engine_ms: float = 0.0
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Change:
    """One workload's move: to ``to_phase`` from one of ``expect``, with its fields."""

    workload_id: int
    to_phase: str
    expect: tuple[str, ...]
    fields: Mapping[str, Any]
    reason: str
    message: str = ""
    kind: str = ""  # which list of the ApplyReport a made change goes to


def move(changes: Sequence[Change], now: datetime) -> tuple[list[Change], list[WorkloadEvent]]:
    """Make the changes whose rows are still in an expected phase; the others conflict.

    The rows are read (and locked, where the database locks rows) in one query; each
    kind of change (same target phase and fields) is then one UPDATE for all its rows.
    Returns the changes made and their timeline events (not yet written)."""
    if not changes:
        return [], []
    current = dict(
        Workload.objects.select_for_update()
        .filter(id__in=[c.workload_id for c in changes])
        .values_list("id", "phase")
    )
    made: list[Change] = []
    events_: list[WorkloadEvent] = []
    groups: dict[tuple[str, tuple[str, ...]], list[Workload]] = {}
    for change in changes:
        from_phase = current.get(change.workload_id)
        if from_phase is None or from_phase not in change.expect:
            continue
        current[change.workload_id] = change.to_phase  # a second change sees the first
        row = Workload(id=change.workload_id, phase=change.to_phase, updated_at=now)
        for name, value in change.fields.items():
            setattr(row, name, value)
        names = ("phase", "updated_at", *sorted(change.fields))
        groups.setdefault((change.to_phase, names), []).append(row)
        made.append(change)
        events_.append(
            WorkloadEvent(
                workload_id=change.workload_id,
                at=now,
                from_phase=from_phase,
                to_phase=change.to_phase,
                reason=change.reason,
                message=change.message,
            )
        )
    for (_, names), rows in groups.items():
        Workload.objects.bulk_update(rows, list(names))
    return made, events_


def apply(
    result: CycleResult,
    snapshot: Snapshot,
    index: SnapshotIndex,
    lease: Lease | None,
    cluster: Cluster,
    *,
    engine_ms: float = 0.0,
    full: bool = True,
    annotate: bool = True,
) -> ApplyReport:
    """Write the cycle's decisions, then make the cluster follow. See the module docstring.

    ``annotate=False``: the result has no positions or ETAs (the engine ran without its
    forecast); the waiting keep what they show."""
    now = index.now
    report = ApplyReport(engine_ms=engine_ms)
    if result.admissions:
        placement.ensure_lock_row()
    with transaction.atomic():
        # 1. The fence: the lease is still ours, or nothing of this cycle is written.
        if lease is not None:
            check(lease)

        # 2. Shared nodes: withdraw admissions whose room another tree took meanwhile.
        admissions = _placeable(result, snapshot, index, report)

        # 3. Phases: admissions, preemptions, admission timeouts; one statement per kind.
        wanted = (
            [_admitted(a, index, now) for a in admissions]
            + [
                _preempted(p.victim_id, p.preemptor_id, p.reason, p.message)
                for p in result.preemptions
            ]
            + [_timed_out(r.workload_id, r.requeue_at, r.reason) for r in result.requeues]
        )
        made, timeline = move(wanted, now)
        for change in made:
            getattr(report, change.kind).append(change.workload_id)
        report.conflicts += len(wanted) - len(made)
        WorkloadEvent.objects.bulk_create(timeline)

        # 4. Nominations: workloads the next cycles keep room for (after a preemption).
        if result.nominations:
            Workload.objects.filter(
                id__in=list(result.nominations), phase__in=WAITING_PHASES, nominated=False
            ).update(nominated=True, updated_at=now)

        # 5. What the waiting show: position, ETA, reason (one executemany); not after
        # an engine run without the forecast (state.forecast_due), which keeps them.
        annotated = pending_annotations(result, index, full=full) if annotate else []
        report.annotated = write_annotations(annotated, now)

        # 6. Quotas: usage ledger, runtime quota and usage on the rows, usage samples.
        charge_ledgers(result, index, snapshot.config)
        quota_changes = store_quota_state(result, index)
        sample_usage(result, index)

        # 7. The cycle's record.
        report.cycle_id = _record(result, index, lease, report, engine_ms=engine_ms, full=full)

        # 8. After the commit: the live stream hears what changed (the cycle's own
        # writes wake no cycle); a withdrawn admission wakes this tree again.
        changed = {*report.admitted, *report.preempted, *report.requeued}
        changed.update(workload_id for workload_id, _ in annotated)
        _publish(changed, index, report.cycle_id)
        # The tree's worlds (this process's and any other's) re-read what moved; the
        # world this cycle read takes its annotations in place.
        world.record_cycle(
            index.root,
            [*report.admitted, *report.preempted, *report.requeued, *result.nominations],
            annotated,
            index.world,
        )
        publish_quotas(quota_changes, report.cycle_id)
        if report.displaced:
            wake.wake_on_commit([index.root], reason="displaced")

    # 9. The cluster follows: idempotent calls; what they miss, the next sync repeats.
    # The fence stops them if the lease ran out (another worker may have decided since).
    pools = {a.workload_id: a.pool or "" for a in admissions}
    calls: list[Call] = [
        admit_call(_ref(index.rows[w]), pools.get(w, ""), settings.KQ_POOL_LABEL)
        for w in report.admitted
    ]
    calls += [Call("suspend", _ref(index.rows[w])) for w in report.preempted + report.requeued]
    run_calls(cluster, calls, Fence(lease), report.errors)
    if report.errors:
        CycleRun.objects.filter(pk=report.cycle_id).update(errors=report.errors[:50])
    return report


def _placeable(
    result: CycleResult, snapshot: Snapshot, index: SnapshotIndex, report: ApplyReport
) -> list[Admission]:
    """The admissions that still fit the nodes under the placement lock (state.placement)."""
    if not result.admissions:
        return []
    placement.lock()
    now_elsewhere = placement.held_elsewhere(index.quota_ids.values())
    if not placement.grew(index.elsewhere, now_elsewhere):
        return list(result.admissions)
    out = placement.withdrawn(result.admissions, snapshot, index.elsewhere, now_elsewhere)
    report.displaced = sorted(out)
    report.conflicts += len(out)
    if out:
        log.info(
            "%s: %d admission(s) withdrawn, another tree took their room", index.root, len(out)
        )
    return [a for a in result.admissions if a.workload_id not in out]


def _admitted(admission: Admission, index: SnapshotIndex, now: datetime) -> Change:
    assignment = {node: held.to_dict() for node, held in admission.assignment.items()}
    queued_at = index.rows[admission.workload_id]["queue_order_at"]
    return Change(
        admission.workload_id,
        Phase.ADMITTED,
        tuple(WAITING_PHASES),
        {
            "admitted_at": now,
            "wait_s": max(0.0, (now - queued_at).total_seconds()),
            "assignment": assignment,
            "pool": admission.pool or "",
            "attempts": F("attempts") + 1,
            "requeue_at": None,
            "nominated": False,
            "position": None,
            "global_position": None,
            "eta_p50": None,
            "eta_p90": None,
            "eta": None,
            "explanation": None,
            "reason": "Admitted: within quota and placed on nodes.",
        },
        reason="Admitted",
        message=f"Placed on {', '.join(sorted(assignment)) or 'no node'}.",
        kind="admitted",
    )


def _preempted(victim_id: int, preemptor_id: int, reason: str, message: str) -> Change:
    return Change(
        victim_id,
        Phase.PREEMPTED,
        (Phase.ADMITTED, Phase.RUNNING),
        {
            "preempted_by_id": preemptor_id,
            "message": message,
            "reason": f"Preempted ({reason}): {message}"[:500],
        },
        reason=reason,
        message=message,
        kind="preempted",
    )


def _timed_out(workload_id: int, requeue_at: float | None, reason: str) -> Change:
    # Only an admission whose job never started can time out.
    return Change(
        workload_id,
        Phase.PREEMPTED,
        (Phase.ADMITTED,),
        {"requeue_at": from_epoch(requeue_at), "message": reason, "reason": reason[:500]},
        reason="AdmissionTimeout",
        message=reason,
        kind="requeued",
    )


def _record(
    result: CycleResult,
    index: SnapshotIndex,
    lease: Lease | None,
    report: ApplyReport,
    *,
    engine_ms: float,
    full: bool,
) -> int:
    waiting = sum(1 for row in index.rows.values() if row["phase"] in WAITING_PHASES)
    holding = sum(1 for row in index.rows.values() if row["phase"] in HOLDING_PHASES)
    cycle = CycleRun.objects.create(
        root=index.root,
        started_at=index.now,
        engine_ms=engine_ms,
        admitted=len(report.admitted),
        preempted=len(report.preempted),
        requeued=len(report.requeued),
        pending=waiting + index.unlisted - len(report.admitted),
        running=holding + len(report.admitted),
        conflicts=report.conflicts,
        token=lease.token if lease else 0,
        worker=lease.holder if lease else "",
        stats={
            **{k: float(v) for k, v in result.stats.items()},
            "full": float(full),
            "displaced": float(len(report.displaced)),
        },
    )
    return int(cycle.pk)


def _ref(row: Mapping[str, Any]) -> JobRef:
    return JobRef(row["kind"], row["api_version"], row["namespace"], row["name"], row["object_uid"])


def _publish(ids: Iterable[int], index: SnapshotIndex, cycle_id: int) -> None:
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
