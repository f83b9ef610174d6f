"""The running time limit of a workload (issue 12 item 7, koord-queue's
``maximumExecutionTimeSeconds``, Kueue's ``kueue.x-k8s.io/max-exec-time-seconds``).

A workload whose job says it may hold its quota at most N seconds
(``koord-queue/maximum-execution-time-seconds`` or ``kube-queue/…`` — carried from a
QueueUnit's ``spec.maximumExecutionTimeSeconds`` too — or Kueue's label) is stopped once
it has been admitted for longer: cancelled, with the reason, through
``actions.cancel_workload`` (its job is deleted, as any cancel; Kueue deactivates its
Workload instead, which this product has no state for). Checked after each sync.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from queueing import actions, compat, faults
from queueing.actions import Actor
from queueing.choices import Phase
from queueing.models import Workload

log = logging.getLogger(__name__)

KEYS = [prefix + compat.MAX_EXEC_KEY for prefix in compat.ANNOTATION_PREFIXES]
# Holding quota and not already being stopped (a preempted one is on its way out).
LIMITED = (Phase.ADMITTED, Phase.RUNNING)


def overrunning(now: datetime) -> list[tuple[Workload, int]]:
    """Workloads holding quota past their limit, with the limit."""
    candidates = Workload.objects.filter(phase__in=LIMITED, admitted_at__isnull=False).filter(
        annotations__has_any_keys=KEYS
    ) | Workload.objects.filter(
        phase__in=LIMITED,
        admitted_at__isnull=False,
        labels__has_key=compat.KUEUE_MAX_EXEC_LABEL,
    )
    out = []
    for workload in candidates.distinct():
        limit = compat.max_execution_s(workload.labels or {}, workload.annotations or {})
        admitted = workload.admitted_at
        if limit is not None and admitted is not None and now - admitted > timedelta(seconds=limit):
            out.append((workload, limit))
    return out


def enforce(now: datetime) -> int:
    """Stop what ran too long; returns how many were stopped."""
    stopped = 0
    for workload, limit in overrunning(now):
        try:
            actions.cancel_workload(
                Actor.system(),
                workload,
                reason=(
                    f"Stopped: it ran past its maximum execution time of {limit} s "
                    f"(admitted at {workload.admitted_at:%Y-%m-%d %H:%M:%S} UTC)."
                ),
            )
            stopped += 1
            faults.reach("maxexec.between")
        except actions.ActionError as exc:  # finished meanwhile, or the cluster refused
            log.info("could not stop %s at its time limit: %s", workload, exc)
    return stopped
