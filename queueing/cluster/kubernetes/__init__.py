"""The Kubernetes adapter: the Cluster protocol over the Kubernetes API.

A package of small parts, as healthchecks' transports and Kueue's job integrations are:

- ``client``: the only importer of the ``kubernetes`` client; raw JSON requests, retries,
  errors, ``connect``.
- ``kinds``: the job kinds as plain dict code (suspend flag, pod templates, status).
- ``informers``: list + watch (``Informer``, ``ClusterWatcher``).
- ``reader``: the view the sync and the cycle read (listed, or from the watch cache).
- ``writer``: admit, suspend, delete, create; idempotent and retried.
- ``queueunits``: kube-queue's QueueUnits, read as hints and written back.

``KubernetesCluster`` below only wires them together; see docs/kubernetes.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime

from queueing.cluster.base import JobInfo, JobKey, JobRef, JobRequest, NodeInfo
from queueing.cluster.events import KubeEvent
from queueing.cluster.kubernetes.client import (
    ApiCallError,
    ApiClient,
    Obj,
    Rest,
    RetryPolicy,
    connect,
    ensure_pool,
    record_api_error,
)
from queueing.cluster.kubernetes.events import EventRecorder
from queueing.cluster.kubernetes.informers import ClusterWatcher, Informer
from queueing.cluster.kubernetes.kinds import KINDS, Kind, pod_requests
from queueing.cluster.kubernetes.queueunits import QueueUnitMirror
from queueing.cluster.kubernetes.quotaobjects import ElasticQuotaObjects
from queueing.cluster.kubernetes.reader import CACHE_STALE_S, Reader, View
from queueing.cluster.kubernetes.writer import Writer

__all__ = [
    "CACHE_STALE_S",
    "KINDS",
    "WRITE_ROUNDS_AT_ONCE",
    "ApiCallError",
    "ClusterWatcher",
    "Informer",
    "KubernetesCluster",
    "RetryPolicy",
    "connect",
    "pod_requests",
]


# Rounds of ``write_concurrency`` calls one process may have on their way at once (the
# sync's repairs and state.calls.BACKGROUND_WIDTH trees' calls).
WRITE_ROUNDS_AT_ONCE = 3


class KubernetesCluster:
    """The Cluster protocol (and its FreshReads, ChangeJournal and QueueUnitMirror
    capabilities) over the Kubernetes API."""

    mode = "kubernetes"

    def __init__(
        self,
        api: ApiClient,
        *,
        namespaces: Sequence[str] = (),
        kinds: Sequence[str] = tuple(KINDS),
        job_image: str = "busybox:1.36",
        mirror_queue_units: bool = False,
        timeout_s: float = 30.0,
        policy: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        on_error: Callable[[str, str], None] = record_api_error,
        watch_cache: bool = False,
        write_concurrency: int = 1,
    ) -> None:
        self.api = api
        # Admissions and preemptions of one cycle are sent this many at a time.
        self.write_concurrency = max(1, int(write_concurrency))
        # state.calls sends the sync's repairs and two trees' calls at once, each this
        # wide, besides the caller's reads: a narrower pool discards the connections it
        # has no room for ("Connection pool is full") and opens new ones the next time.
        ensure_pool(api, WRITE_ROUNDS_AT_ONCE * self.write_concurrency + 2)
        self.rest = Rest(api, timeout_s=timeout_s, policy=policy, sleep=sleep, on_error=on_error)
        self.reader = Reader(
            self.rest,
            namespaces=namespaces,
            kinds=kinds,
            queue_units=mirror_queue_units,
            watch_cache=watch_cache,
        )
        self.writer = Writer(self.rest, self.reader, job_image=job_image)
        self.queue_unit_mirror = QueueUnitMirror(self.rest, self.reader)
        self.event_recorder = EventRecorder(self.rest)
        # The ElasticQuotas written for quotas managed here (queueing.kubequotas).
        self.quota_objects = ElasticQuotaObjects(self.rest)

    @classmethod
    def from_settings(cls) -> KubernetesCluster:
        from django.conf import settings

        return cls(
            connect(settings.KQ_KUBECONFIG or None),
            namespaces=settings.KQ_NAMESPACES,
            kinds=settings.KQ_KINDS,
            job_image=settings.KQ_JOB_IMAGE,
            mirror_queue_units=settings.KQ_MIRROR_QUEUEUNITS,
            timeout_s=settings.KQ_KUBE_TIMEOUT_S,
            policy=RetryPolicy(budget_s=settings.KQ_KUBE_RETRY_S),
            watch_cache=settings.KQ_KUBE_WATCH_CACHE,
            write_concurrency=settings.KQ_KUBE_WRITE_CONCURRENCY,
        )

    # --- what the watcher and the importer read ------------------------------------------

    @property
    def kinds(self) -> list[Kind]:
        return self.reader.kinds

    @property
    def namespaces(self) -> list[str]:
        return self.reader.namespaces

    @namespaces.setter
    def namespaces(self, value: Sequence[str]) -> None:
        self.reader.namespaces = list(value)

    def scopes(self) -> list[str | None]:
        return self.reader.scopes()

    def list_objects(
        self, group: str, version: str, plural: str, *, cluster_scoped: bool = False
    ) -> list[Obj]:
        return self.reader.list_objects(group, version, plural, cluster_scoped=cluster_scoped)

    # --- reads ---------------------------------------------------------------------------

    @property
    def views_may_lag(self) -> bool:
        """True when reads come from a watch cache, which may be a moment behind the API
        server (and behind what another worker's cache showed): the sync then confirms a
        job stopped with ``fresh_job`` before it gives its quota back."""
        return self.reader.watch_cache

    def tick(self, now: datetime | None = None) -> int:
        """A real cluster runs jobs by itself; a tick only takes a fresh look at it."""
        self.reader.refresh()
        return 0

    def refresh(self) -> View:
        return self.reader.refresh()

    def nodes(self) -> list[NodeInfo]:
        return self.reader.nodes()

    def jobs(self) -> list[JobInfo]:
        return self.reader.jobs()

    def queue_units(self) -> list[Obj]:
        return self.reader.queue_units()

    def fresh_job(self, ref: JobRef) -> JobInfo:
        return self.reader.fresh_job(ref)

    def changed_jobs(
        self, cursor: tuple[int, int] | None
    ) -> tuple[tuple[int, int], set[JobKey] | None]:
        return self.reader.changed_jobs(cursor)

    def job_infos(self, keys: set[JobKey]) -> dict[JobKey, JobInfo | None]:
        return self.reader.job_infos(keys)

    def stop_watching(self) -> None:
        self.reader.stop_watching()

    # --- writes --------------------------------------------------------------------------

    def admit(self, ref: JobRef, *, node_selector: Mapping[str, str]) -> None:
        self.writer.admit(ref, node_selector=node_selector)

    def suspend(self, ref: JobRef) -> None:
        self.writer.suspend(ref)

    def delete(self, ref: JobRef) -> None:
        self.writer.delete(ref)

    def create_job(self, request: JobRequest) -> JobRef:
        return self.writer.create_job(request)

    def mirror_queue_units(self, phases: Mapping[JobKey, tuple[str, str]]) -> int:
        return self.queue_unit_mirror.mirror(phases)

    def record_events(self, events: Iterable[KubeEvent]) -> int:
        return self.event_recorder.record(events)

    def patch_annotations(
        self, resource: tuple[str, str, str], namespace: str, name: str, values: dict[str, str]
    ) -> None:
        self.writer.patch_annotations(resource, namespace, name, values)
