"""The one protocol every cluster adapter speaks.

The cycle and the sync talk to "the cluster" only through this interface; the simulated
cluster (the embedded default) and the Kubernetes adapter implement it. Cluster writes
are idempotent: admitting an admitted job, suspending a suspended one or deleting a
missing one succeeds and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable


class ClusterError(Exception):
    """A cluster call failed. ``retryable`` tells the caller whether to try again later."""

    def __init__(self, message: str, *, retryable: bool = True, status: int | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.status = status


class JobNotFound(ClusterError):
    """The object a workload stands for is gone from the cluster."""

    def __init__(self, message: str):
        super().__init__(message, retryable=False, status=404)


@dataclass(frozen=True, slots=True)
class JobRef:
    """Where a workload's object lives in the cluster."""

    kind: str
    api_version: str
    namespace: str
    name: str
    uid: str = ""


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    allocatable: Mapping[str, int]
    reserved: Mapping[str, int]
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Mapping[str, str]] = ()
    unschedulable: bool = False


# Observed job states, common to every kind.
SUSPENDED = "Suspended"  # spec.suspend is true and nothing runs
STARTING = "Starting"  # unsuspended, pods not running yet
RUNNING = "Running"
SUCCEEDED = "Succeeded"
FAILED = "Failed"


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A managed job as the cluster sees it now."""

    ref: JobRef
    state: str
    suspended: bool
    pod_sets: Sequence[Mapping[str, Any]]
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    priority: int | None = None
    priority_class: str = ""
    expected_runtime_s: float | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    active: int = 0
    message: str = ""


@dataclass(frozen=True, slots=True)
class JobRequest:
    """A new job to create suspended in the cluster."""

    namespace: str
    name: str
    pod_sets: Sequence[Mapping[str, Any]]
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    priority: int | None = None
    priority_class: str = ""
    expected_runtime_s: float | None = None
    manifest: Mapping[str, Any] | None = None  # a full Job manifest (kubernetes mode)


@runtime_checkable
class Cluster(Protocol):
    """What the cycle and the sync need from a cluster."""

    mode: str

    def nodes(self) -> list[NodeInfo]:
        """Schedulable view of the nodes: allocatable and what unmanaged pods use."""
        ...

    def jobs(self) -> list[JobInfo]:
        """Every managed job in the managed namespaces."""
        ...

    def create_job(self, request: JobRequest) -> JobRef:
        """Create a job suspended; return where it lives."""
        ...

    def admit(self, ref: JobRef, *, node_selector: Mapping[str, str]) -> None:
        """Unsuspend a job (idempotent), pinning it to the assigned pool."""
        ...

    def suspend(self, ref: JobRef) -> None:
        """Suspend a job (idempotent); its pods stop."""
        ...

    def delete(self, ref: JobRef) -> None:
        """Delete a job (idempotent: a missing job is fine)."""
        ...

    def tick(self, now: datetime) -> int:
        """Advance what the cluster does by itself (the simulated cluster runs jobs).

        Returns how many jobs changed state (0 for a real cluster)."""
        ...


@runtime_checkable
class QueueUnitMirror(Protocol):
    """Adapters that can show phases in kube-queue QueueUnits (``KQ_MIRROR_QUEUEUNITS``)."""

    def mirror_queue_units(self, phases: Mapping[tuple[str, str, str], tuple[str, str]]) -> int:
        """(kind, namespace, name) of a job -> (kube-queue phase, message); returns writes."""
        ...


@runtime_checkable
class FreshReads(Protocol):
    """Adapters whose view may lag behind the cluster (a watch cache): the sync confirms
    with ``fresh_job`` before it gives quota back or cancels a workload."""

    views_may_lag: bool

    def fresh_job(self, ref: JobRef) -> JobInfo:
        """The job as the cluster has it now, not as the view does; JobNotFound if gone."""
        ...


JobKey = tuple[str, str, str]  # (kind, namespace, name)


@runtime_checkable
class ChangeJournal(Protocol):
    """Adapters that know which jobs changed since a cursor, so a sync between full ones
    looks only at those."""

    def changed_jobs(self, cursor: Any) -> tuple[Any, set[JobKey] | None]:
        """(a new cursor, the jobs changed after ``cursor``); None: look at everything."""
        ...

    def job_infos(self, keys: set[JobKey]) -> dict[JobKey, JobInfo | None]:
        """The managed jobs among ``keys`` (None: gone, or not the queue's)."""
        ...


@runtime_checkable
class Timed(Protocol):
    """Adapters that know when their next change happens by itself (the simulated
    cluster's jobs finish after their runtime): the cycle worker sets a timer for it."""

    def next_change_at(self) -> datetime | None:
        """When the next running job finishes; None when nothing runs."""
        ...
