"""Reconcile the database with the cluster: the cluster's facts drive the phases.

Runs before every cycle. Every step is a conditional update or an idempotent cluster
call, so two workers syncing at once, or a worker dying half-way, leave nothing wrong
that the next sync does not put right:

- a new managed job becomes a Pending workload;
- Admitted + job running -> Running; job finished -> Succeeded / Failed;
- Admitted but the job is still suspended (the admit call was lost) -> admit again;
- Preempted + job suspended and idle -> Pending (Backoff after a timeout);
  Preempted but the job still runs (the suspend call was lost) -> suspend again;
- waiting but the job was unsuspended behind the queue's back -> suspend it;
- the job is gone -> Cancelled.

With ``KQ_MIRROR_QUEUEUNITS`` the phases are then shown in kube-queue QueueUnits.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from queueing import actions, compat
from queueing.choices import ACTIVE_PHASES, Phase
from queueing.cluster import get_cluster
from queueing.cluster.base import (
    FAILED,
    RUNNING,
    SUCCEEDED,
    Cluster,
    ClusterError,
    JobInfo,
    JobNotFound,
    QueueUnitMirror,
)
from queueing.lease import Fence, Lease
from queueing.models import Queue, Quota, Workload

log = logging.getLogger(__name__)

# A workload created moments ago may not be in the cluster's (watch) view yet.
MISSING_GRACE = timedelta(seconds=30)
# Finished workloads keep their QueueUnit phase up to date for this long.
MIRROR_FINISHED_FOR = timedelta(hours=1)


@dataclass
class SyncReport:
    registered: int = 0
    transitions: int = 0
    readmitted: int = 0
    resuspended: int = 0
    cancelled: int = 0
    mirrored: int = 0
    unplaced: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "registered": self.registered,
            "transitions": self.transitions,
            "readmitted": self.readmitted,
            "resuspended": self.resuspended,
            "cancelled": self.cancelled,
            "mirrored": self.mirrored,
            "unplaced": self.unplaced[:20],
            "errors": self.errors[:20],
        }


def pool_selector(workload: Workload) -> dict[str, str]:
    from django.conf import settings

    label = getattr(settings, "KQ_POOL_LABEL", "koord-queue/pool")
    return {label: workload.pool} if workload.pool else {}


def sync_cluster(
    cluster: Cluster | None = None, now: datetime | None = None, lease: Lease | None = None
) -> SyncReport:
    """Bring workloads in line with what the cluster reports. See the module docstring.

    With the sync ``lease``, repairs stop (LeaseLost) once it cannot outlive them."""
    cluster = cluster or get_cluster()
    fence = Fence(lease)
    now = now or timezone.now()
    report = SyncReport()
    cluster.tick(now)
    jobs = cluster.jobs()
    by_uid = {job.ref.uid: job for job in jobs if job.ref.uid}
    by_name = {(job.ref.kind, job.ref.namespace, job.ref.name): job for job in jobs}
    seen: set[tuple[str, str, str]] = set()

    for workload in Workload.objects.filter(phase__in=ACTIVE_PHASES).order_by("id"):
        job = by_uid.get(workload.object_uid) if workload.object_uid else None
        if job is None:
            job = by_name.get((workload.kind, workload.namespace, workload.name))
            if job is not None and workload.object_uid and job.ref.uid != workload.object_uid:
                job = None  # same name, another object: ours was deleted
        if job is not None:
            seen.add((job.ref.kind, job.ref.namespace, job.ref.name))
        try:
            _reconcile(cluster, workload, job, now, report, fence)
        except ClusterError as exc:
            report.errors.append(f"{workload}: {exc}")
            log.warning("sync of %s failed: %s", workload, exc)

    for key, job in by_name.items():
        if key in seen or job.state in (SUCCEEDED, FAILED):
            continue
        try:
            _register(cluster, job, report, fence)
        except ClusterError as exc:
            report.errors.append(f"{job.ref.namespace}/{job.ref.name}: {exc}")

    if settings.KQ_MIRROR_QUEUEUNITS and isinstance(cluster, QueueUnitMirror):
        try:
            report.mirrored = mirror_queue_units(cluster, now)
        except ClusterError as exc:
            report.errors.append(f"QueueUnit mirroring: {exc}")
    return report


def mirror_queue_units(cluster: QueueUnitMirror, now: datetime) -> int:
    """Show each workload's phase, under kube-queue's name, in its job's QueueUnit."""
    rows = Workload.objects.filter(
        Q(phase__in=ACTIVE_PHASES) | Q(finished_at__gte=now - MIRROR_FINISHED_FOR)
    ).values_list("kind", "namespace", "name", "phase", "reason")
    return cluster.mirror_queue_units(
        {
            (kind, namespace, name): (compat.kube_queue_phase(phase), reason[:300])
            for kind, namespace, name, phase, reason in rows
        }
    )


def _finish(workload: Workload, job: JobInfo, report: SyncReport) -> None:
    phase = Phase.SUCCEEDED if job.state == SUCCEEDED else Phase.FAILED
    if actions.transition(
        workload,
        phase,
        reason="Finished" if phase == Phase.SUCCEEDED else "JobFailed",
        message=job.message,
        expect=(workload.phase,),
        finished_at=job.finished_at or timezone.now(),
        started_at=workload.started_at or job.started_at,
    ):
        report.transitions += 1


def _reconcile(
    cluster: Cluster,
    workload: Workload,
    job: JobInfo | None,
    now: datetime,
    report: SyncReport,
    fence: Fence,
) -> None:
    ref = actions.workload_ref(workload)
    if job is None:
        if workload.created_at and now - workload.created_at < MISSING_GRACE:
            return
        if actions.transition(
            workload,
            Phase.CANCELLED,
            reason="Deleted",
            message="The cluster object was deleted.",
            expect=(workload.phase,),
            finished_at=now,
        ):
            report.cancelled += 1
        return

    phase = workload.phase
    if job.state in (SUCCEEDED, FAILED):
        _finish(workload, job, report)
        return
    if phase in (Phase.PENDING, Phase.BACKOFF):
        if not job.suspended:
            fence.check()
            cluster.suspend(ref)  # only the queue may release a job
            report.resuspended += 1
        return
    if phase == Phase.ADMITTED:
        if job.suspended:
            fence.check()
            cluster.admit(ref, node_selector=pool_selector(workload))
            report.readmitted += 1
        elif job.state == RUNNING and actions.transition(
            workload,
            Phase.RUNNING,
            reason="Started",
            expect=(Phase.ADMITTED,),
            started_at=job.started_at or now,
        ):
            report.transitions += 1
        return
    if phase == Phase.RUNNING:
        if job.suspended and job.active == 0:
            _requeue(
                workload, now, report, reason="Suspended", message="Suspended outside the queue."
            )
        return
    if phase == Phase.PREEMPTED:
        if not job.suspended:
            fence.check()
            cluster.suspend(ref)
            report.resuspended += 1
        elif job.active == 0:
            _requeue(workload, now, report, reason="Evicted", message=workload.message)


def _requeue(
    workload: Workload, now: datetime, report: SyncReport, *, reason: str, message: str
) -> None:
    """The cluster confirmed the job is stopped: wait again, keeping the original place."""
    backoff = workload.requeue_at is not None and workload.requeue_at > now
    if actions.transition(
        workload,
        Phase.BACKOFF if backoff else Phase.PENDING,
        reason=reason,
        message=message,
        expect=(workload.phase,),
        assignment={},
        pool="",
        started_at=None,
        admitted_at=None,
        requeue_at=workload.requeue_at if backoff else None,
    ):
        report.transitions += 1


def _register(cluster: Cluster, job: JobInfo, report: SyncReport, fence: Fence) -> None:
    queue_name = compat.queue_name(job.labels, job.annotations)
    quota_name = compat.quota_name(job.labels)
    queue = Queue.objects.filter(name=queue_name).first() if queue_name else None
    quota = Quota.objects.filter(name=quota_name).first() if quota_name else None
    try:
        tenant, quota, queue, _namespace = actions.resolve_placement(
            None,
            namespace=job.ref.namespace,
            queue=queue,
            quota=quota,
        )
    except Exception as exc:  # a job we cannot place stays suspended and is reported
        report.unplaced.append(f"{job.ref.namespace}/{job.ref.name}: {_first_message(exc)}")
        return
    priority = job.priority
    annotated = compat.annotation(job.annotations, compat.PRIORITY_KEY)
    if annotated is not None:
        try:
            priority = int(annotated)
        except ValueError:
            report.unplaced.append(
                f"{job.ref.namespace}/{job.ref.name}: priority {annotated!r} is not a number"
            )
            return
    try:
        pod_sets = actions.parse_pod_sets(list(job.pod_sets), canonical=True)
    except Exception as exc:
        why = job.message if not job.pod_sets and job.message else _first_message(exc)
        report.unplaced.append(f"{job.ref.namespace}/{job.ref.name}: {why}")
        return
    with transaction.atomic():
        try:
            actions.register_cluster_workload(
                tenant=tenant,
                quota=quota,
                queue=queue,
                ref=job.ref,
                pod_sets=pod_sets,
                priority=priority or 0,
                priority_class=job.priority_class,
                expected_runtime_s=job.expected_runtime_s,
                labels=dict(job.labels),
                annotations=dict(job.annotations),
                created_at=job.created_at,
            )
        except Exception as exc:
            report.unplaced.append(f"{job.ref.namespace}/{job.ref.name}: {_first_message(exc)}")
            return
    report.registered += 1
    if not job.suspended:
        fence.check()
        try:
            cluster.suspend(job.ref)
            report.resuspended += 1
        except JobNotFound:
            pass


def _first_message(exc: Exception) -> str:
    messages = getattr(exc, "message_dict", None)
    if isinstance(messages, Mapping):
        for values in messages.values():
            return str(values[0])
    return str(exc)
