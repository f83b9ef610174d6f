"""The built-in simulated cluster: nodes and jobs stored in the database.

Being DB-backed, web, worker and beat processes share it. A job is created suspended;
once admitted it starts if some schedulable node matches its node selector, runs for its
runtime and then succeeds, or fails at the configured rate. The clock is injectable.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from queueing.choices import SimJobState
from queueing.cluster.base import (
    FAILED,
    RUNNING,
    STARTING,
    SUCCEEDED,
    SUSPENDED,
    ClusterError,
    JobInfo,
    JobNotFound,
    JobRef,
    JobRequest,
    NodeInfo,
)
from queueing.models import SimJob, SimNode

Clock = Callable[[], datetime]


def _matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


#: Annotation of a job: how long it really runs in the simulated cluster (seconds).
SIM_RUNTIME_ANNOTATION = "koord-queue/sim-runtime-s"


class SimulatedCluster:
    """A cluster that lives in the database; see the module docstring."""

    mode = "simulated"
    kind = "Job"
    api_version = "batch/v1"

    def __init__(
        self,
        clock: Clock | None = None,
        failure_rate: float | None = None,
        rng: random.Random | None = None,
        default_runtime_s: float = 60.0,
    ) -> None:
        self.clock: Clock = clock or timezone.now
        self.failure_rate = settings.KQ_SIM_FAILURE_RATE if failure_rate is None else failure_rate
        self.rng = rng or random.Random()
        self.default_runtime_s = default_runtime_s

    # --- reads -----------------------------------------------------------------------
    def nodes(self) -> list[NodeInfo]:
        return [
            NodeInfo(
                name=node.name,
                allocatable=dict(node.allocatable),
                reserved=dict(node.reserved),
                labels=dict(node.labels),
                taints=list(node.taints),
                unschedulable=node.unschedulable,
            )
            for node in SimNode.objects.all()
        ]

    def jobs(self) -> list[JobInfo]:
        return [self._info(job) for job in SimJob.objects.all()]

    def _info(self, job: SimJob) -> JobInfo:
        state = {
            SimJobState.SUSPENDED: SUSPENDED,
            SimJobState.SUCCEEDED: SUCCEEDED,
            SimJobState.FAILED: FAILED,
        }.get(SimJobState(job.state), RUNNING if job.started_at else STARTING)
        return JobInfo(
            ref=self._ref(job),
            state=state,
            suspended=job.suspended,
            pod_sets=job.pod_sets,
            labels=job.labels,
            annotations=job.annotations,
            priority=job.priority,
            priority_class=job.priority_class,
            expected_runtime_s=job.runtime_s,
            created_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            active=1 if state == RUNNING else 0,
            message=job.message,
        )

    def _ref(self, job: SimJob) -> JobRef:
        return JobRef(self.kind, self.api_version, job.namespace, job.name, job.uid)

    # --- writes ----------------------------------------------------------------------
    def create_job(self, request: JobRequest) -> JobRef:
        runtime = request.expected_runtime_s or self.default_runtime_s
        # The demo's jobs run for less than they declare (a declared runtime is a
        # limit); this annotation, when given, is how long the simulated job runs.
        actual = request.annotations.get(SIM_RUNTIME_ANNOTATION)
        if actual is not None:
            try:
                runtime = max(0.0, float(actual))
            except ValueError:
                raise ClusterError(
                    f"{SIM_RUNTIME_ANNOTATION} must be a number of seconds, not {actual!r}",
                    retryable=False,
                    status=422,
                ) from None
        if SimJob.objects.filter(namespace=request.namespace, name=request.name).exists():
            raise ClusterError(
                f"job {request.namespace}/{request.name} already exists in the simulated cluster",
                retryable=False,
                status=409,
            )
        job = SimJob.objects.create(
            uid=str(uuid.uuid4()),
            namespace=request.namespace,
            name=request.name,
            labels=dict(request.labels),
            annotations=dict(request.annotations),
            pod_sets=[dict(ps) for ps in request.pod_sets],
            priority=request.priority,
            priority_class=request.priority_class,
            runtime_s=runtime,
            created_at=self.clock(),
        )
        return self._ref(job)

    def _get(self, ref: JobRef) -> SimJob:
        query = SimJob.objects.filter(namespace=ref.namespace, name=ref.name)
        if ref.uid:
            query = query.filter(uid=ref.uid)
        job = query.first()
        if job is None:
            raise JobNotFound(f"job {ref.namespace}/{ref.name} is not in the simulated cluster")
        return job

    def admit(self, ref: JobRef, *, node_selector: Mapping[str, str]) -> None:
        job = self._get(ref)
        if not job.suspended:
            return  # idempotent: already admitted
        now = self.clock()
        schedulable = any(
            _matches(node_selector, node.labels)
            for node in SimNode.objects.filter(unschedulable=False).only("labels")
        )
        # Conditional update: two racing admits unsuspend it once.
        SimJob.objects.filter(id=job.id, suspended=True).update(
            suspended=False,
            state=SimJobState.RUNNING,
            node_selector=dict(node_selector),
            started_at=now if schedulable else None,
            will_fail=self.rng.random() < self.failure_rate,
            admissions=F("admissions") + 1,
            message="" if schedulable else "no schedulable node matches the node selector",
        )

    def suspend(self, ref: JobRef) -> None:
        job = self._get(ref)
        SimJob.objects.filter(id=job.id, suspended=False, state=SimJobState.RUNNING).update(
            suspended=True, state=SimJobState.SUSPENDED, started_at=None, node_selector={}
        )

    def delete(self, ref: JobRef) -> None:
        query = SimJob.objects.filter(namespace=ref.namespace, name=ref.name)
        if ref.uid:
            query = query.filter(uid=ref.uid)
        query.delete()

    # --- time ------------------------------------------------------------------------
    def next_change_at(self) -> datetime | None:
        """When the next running job finishes (the cycle worker's timer, queueing.wake)."""
        finishes = [
            started + timedelta(seconds=runtime)
            for started, runtime in SimJob.objects.filter(
                state=SimJobState.RUNNING, started_at__isnull=False
            ).values_list("started_at", "runtime_s")
            if started is not None
        ]
        return min(finishes, default=None)

    def tick(self, now: datetime | None = None) -> int:
        """Finish running jobs whose runtime has elapsed; start ones now schedulable.

        Returns how many jobs changed state.
        """
        now = now or self.clock()
        changed = 0
        schedulable_labels = [
            node.labels for node in SimNode.objects.filter(unschedulable=False).only("labels")
        ]
        with transaction.atomic():
            for job in SimJob.objects.filter(state=SimJobState.RUNNING).only(
                "id", "started_at", "runtime_s", "will_fail", "node_selector"
            ):
                if job.started_at is None:
                    if any(_matches(job.node_selector, labels) for labels in schedulable_labels):
                        changed += SimJob.objects.filter(
                            id=job.id, state=SimJobState.RUNNING, started_at=None
                        ).update(started_at=now, message="")
                    continue
                finish = job.started_at + timedelta(seconds=job.runtime_s)
                if finish > now:
                    continue
                state = SimJobState.FAILED if job.will_fail else SimJobState.SUCCEEDED
                changed += SimJob.objects.filter(id=job.id, state=SimJobState.RUNNING).update(
                    state=state,
                    finished_at=finish,
                    message="the simulated job failed" if job.will_fail else "",
                )
        return changed
