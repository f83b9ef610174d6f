"""The running time limit of a workload (issue 12 item 7, koord-queue's
``maximumExecutionTimeSeconds``, Kueue's ``kueue.x-k8s.io/max-exec-time-seconds``).

Two sources, the shorter wins:

* the workload's own: its job says it may hold its quota at most N seconds
  (``koord-queue/maximum-execution-time-seconds`` or ``kube-queue/…`` — carried from a
  QueueUnit's ``spec.maximumExecutionTimeSeconds`` too — or Kueue's label);
* its queue's ``max_execution_s``, a setting of the queue here (koord-queue's Queue has no
  such field; an operator sets one limit for every workload of a queue).

A workload admitted for longer is stopped: cancelled through ``actions.cancel_workload``
with koord-queue's reason ``MaximumExecutionTimeExceeded`` and a message naming the
limit and where it came from (its job is deleted, as any cancel; Kueue deactivates its
Workload instead, which this product has no state for). The time counts from admission,
as Kueue counts it (koord-queue counts from the pods' start). Checked after the syncs
(``kubesync``: whenever one can be due, at least once a second).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db.models import Q

from queueing import actions, compat, faults
from queueing.actions import Actor
from queueing.choices import Phase
from queueing.models import Workload

log = logging.getLogger(__name__)

#: koord-queue's reason on an evicted QueueUnit; the timeline step and Event carry it.
REASON = "MaximumExecutionTimeExceeded"
KEYS = [prefix + compat.MAX_EXEC_KEY for prefix in compat.ANNOTATION_PREFIXES]
# Holding quota and not already being stopped (a preempted one is on its way out).
LIMITED = (Phase.ADMITTED, Phase.RUNNING)


def limit_of(workload: Workload) -> tuple[int, str] | None:
    """The workload's effective limit in seconds and where it comes from, or None."""
    own = compat.max_execution_s(workload.labels or {}, workload.annotations or {})
    queue_limit = workload.queue.max_execution_s if workload.queue_id else None
    if queue_limit is not None and (own is None or queue_limit < own):
        return queue_limit, f"queue {workload.queue.name}'s maximum execution time"
    if own is not None:
        return own, "its maximum execution time"
    return None


def overrunning(now: datetime) -> list[tuple[Workload, int]]:
    """Workloads holding quota past their limit, with the limit."""
    return scan(now)[0]


def scan(now: datetime) -> tuple[list[tuple[Workload, int]], datetime | None]:
    """``overrunning(now)``, and the earliest time one of the other limited workloads
    will run past its limit (None: none holds quota with a limit)."""
    limited = (
        Q(annotations__has_any_keys=KEYS)
        | Q(labels__has_key=compat.KUEUE_MAX_EXEC_LABEL)
        | Q(queue__max_execution_s__isnull=False)
    )
    candidates = (
        Workload.objects.filter(phase__in=LIMITED, admitted_at__isnull=False)
        .filter(limited)
        .select_related("queue")
        .order_by("id")
    )
    out = []
    due: datetime | None = None
    for workload in candidates:
        found = limit_of(workload)
        admitted = workload.admitted_at
        if found is None or admitted is None:
            continue
        ends = admitted + timedelta(seconds=found[0])
        if now > ends:
            out.append((workload, found[0]))
        elif due is None or ends < due:
            due = ends
    return out, due


def enforce(now: datetime, overrun: list[tuple[Workload, int]] | None = None) -> int:
    """Stop what ran too long (``overrun``: ``overrunning(now)``, read already); returns
    how many were stopped."""
    stopped = 0
    for workload, limit in overrunning(now) if overrun is None else overrun:
        found = limit_of(workload)
        source = found[1] if found is not None else "its maximum execution time"
        try:
            actions.cancel_workload(
                Actor.system(),
                workload,
                reason=(
                    f"Stopped: it ran past {source} of {limit} s "
                    f"(admitted at {workload.admitted_at:%Y-%m-%d %H:%M:%S} UTC)."
                ),
                code=REASON,
            )
            stopped += 1
            faults.reach("maxexec.between")
        except actions.ActionError as exc:  # finished meanwhile, or the cluster refused
            log.info("could not stop %s at its time limit: %s", workload, exc)
    return stopped
