"""A stand-in for the admission cycle's writes, for dashboard tests and benchmarks.

It does what queueing.state.apply does to the rows the dashboard shows -- update
positions, ETAs and reasons (or admit) inside one transaction, record a CycleRun and
announce the changed workloads with queueing.events after the commit -- without the
engine.
Test code only: the product's only writer of positions is the cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from queueing import events
from queueing.choices import WAITING_PHASES, Phase
from queueing.models import CycleRun, Workload, WorkloadEvent


def _publish(ids: Sequence[int], cycle_id: int) -> None:
    owners = Workload.objects.filter(id__in=list(ids)).values_list("tenant_id", "queue_id", "id")
    events.notify_changes(list(owners), cycle_id=cycle_id)


def rank(
    ordered_ids: Sequence[int],
    *,
    now: datetime | None = None,
    eta_step_s: float = 60.0,
    reason: str = "Waiting for quota: the queue's runtime quota is short.",
    only_changed: bool = True,
) -> int:
    """Give ``ordered_ids`` positions 1.. (and ETAs) like a cycle would; returns the cycle id."""
    now = now or timezone.now()
    with transaction.atomic():
        current = dict(
            Workload.objects.filter(id__in=list(ordered_ids)).values_list("id", "position")
        )
        changed = []
        for index, workload_id in enumerate(ordered_ids):
            position = index + 1
            if only_changed and current.get(workload_id) == position:
                continue
            Workload.objects.filter(id=workload_id, phase__in=WAITING_PHASES).update(
                position=position,
                global_position=position,
                eta_p50=now + timedelta(seconds=eta_step_s * position),
                eta_p90=now + timedelta(seconds=eta_step_s * position * 2),
                reason=reason,
                updated_at=now,
            )
            changed.append(workload_id)
        cycle = CycleRun.objects.create(
            root="cluster", started_at=now, duration_ms=1.0, pending=len(ordered_ids)
        )
        _publish(changed, cycle.pk)
    return cycle.pk


def admit(workload_ids: Sequence[int], *, now: datetime | None = None) -> int:
    """Admit workloads like a cycle would (phase, timeline, cleared position); cycle id."""
    now = now or timezone.now()
    with transaction.atomic():
        admitted = []
        for workload_id in workload_ids:
            old = Workload.objects.filter(id=workload_id).values_list("phase", flat=True).first()
            updated = Workload.objects.filter(id=workload_id, phase__in=WAITING_PHASES).update(
                phase=Phase.ADMITTED,
                admitted_at=now,
                position=None,
                global_position=None,
                eta_p50=None,
                eta_p90=None,
                explanation=None,
                reason="Admitted: within quota and placed on nodes.",
                updated_at=now,
            )
            if updated:
                admitted.append(workload_id)
                WorkloadEvent.objects.create(
                    workload_id=workload_id,
                    at=now,
                    from_phase=old or "",
                    to_phase=Phase.ADMITTED,
                    reason="Admitted",
                )
        cycle = CycleRun.objects.create(
            root="cluster", started_at=now, duration_ms=1.0, admitted=len(admitted)
        )
        _publish(admitted, cycle.pk)
    return cycle.pk
