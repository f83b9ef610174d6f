"""Reads: what the sync and the cycle see of the cluster.

``tick()`` (the sync calls it first, under the sync lease) lists, page by page, the
managed kinds in the managed namespaces, the nodes, the bound pods and the priority
classes, and keeps that view until the next tick. Each sync therefore sees the cluster
as of a moment after the previous sync ended: views never go backwards, which the sync's
repairs rely on (see docs/kubernetes.md). With the watch cache on, the same objects come
from informers this process keeps (``informers.ClusterWatcher``) instead.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from queueing import compat
from queueing.cluster.base import ClusterError, JobInfo, JobKey, JobNotFound, JobRef, NodeInfo
from queueing.cluster.kubernetes.client import ApiCallError, Obj, Rest
from queueing.cluster.kubernetes.informers import (
    ABSENT_KIND_RETRY_S,
    BOUND_PODS,
    ClusterWatcher,
)
from queueing.cluster.kubernetes.kinds import (
    KINDS,
    QUEUE_UNITS,
    Kind,
    as_int,
    controller,
    dig,
    node_info,
    occupying,
    parse_time,
    pod_is_managed,
    pod_requests,
    resource_path,
    tolerations,
)
from queueing.cluster.kubernetes.queueunits import consumer_key, queue_unit_hints
from queueing.quantities import QuantityError

log = logging.getLogger(__name__)

# A view older than this is refreshed before it is read outside a tick.
VIEW_MAX_AGE_S = 1.0
# The watch cache: how long to wait for the first list, and how long a failing watch is
# trusted before the view is listed afresh instead.
CACHE_SYNC_TIMEOUT_S = 30.0
CACHE_STALE_S = 5.0


@dataclass
class View:
    """The cluster as one refresh listed it."""

    at: float
    jobs: list[JobInfo]
    nodes: list[NodeInfo]
    queue_units: list[Obj] = field(default_factory=list)


class Reader:
    """The cluster as the queue reads it: listed views, or the watch cache."""

    def __init__(
        self,
        rest: Rest,
        *,
        namespaces: Sequence[str] = (),
        kinds: Sequence[str] = tuple(KINDS),
        queue_units: bool = False,
        watch_cache: bool = False,
    ) -> None:
        self.rest = rest
        # With the watch cache, reads come from informers this process keeps (list once,
        # then watch) instead of a fresh list per tick; see ``_gather``.
        self.watch_cache = watch_cache
        self._watcher: ClusterWatcher | None = None
        self._watcher_pid = 0
        self._watch_epoch = 0
        self._watch_started = 0.0
        self._infos: dict[str, tuple[str, JobInfo]] = {}  # uid -> (resourceVersion, info)
        # Of the last view: managed job uids, batch Job -> controller uid, RayClusters.
        self._ownership: tuple[set[str], dict[str, str], set[tuple[str, str]]] = (
            set(),
            {},
            set(),
        )
        self.namespaces = list(namespaces)
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown kinds: {sorted(unknown)}")
        self.kinds: list[Kind] = [KINDS[name] for name in kinds]
        # QueueUnits are listed with every view (their hints complete the jobs).
        self.mirror = queue_units
        self._view: View | None = None
        self._lock = threading.RLock()
        self._absent: dict[str, float] = {}  # kind -> monotonic time it was found missing
        self._priorities: tuple[float, dict[str, int]] | None = None
        #: Told, from an informer's thread, when this process's watch cache sees a change
        #: that can alter a decision (ClusterWatcher's reasons): the product wakes its
        #: cycle with it (queueing.watch.wake_on_own_informers).
        self.on_change: Callable[[str], None] | None = None

    @property
    def absent_kinds(self) -> set[str]:
        """Kinds whose CRD the cluster did not serve when last looked for."""
        return set(self._absent)

    def scopes(self) -> list[str | None]:
        """The namespaces to list in (None: all of them)."""
        return list(self.namespaces) or [None]

    def remember(self, kind: Kind, obj: Obj) -> None:
        """Write-through: an object a write of ours returned, so that this process reads
        its own writes before the watch brings them."""
        if self._watcher is not None:
            self._watcher.put(kind.kind, obj)

    # --- reads ------------------------------------------------------------------------------

    def nodes(self) -> list[NodeInfo]:
        with self._lock:
            watcher = self.watching() if self._view is not None else None
            if watcher is not None:
                # Nodes and bound pods straight from the informers; which pods the queue
                # manages is known from the last view (a pod of a job newer than that
                # counts as unmanaged for a moment: less free room, never more).
                return node_infos(
                    watcher.nodes.snapshot(), watcher.pods.snapshot(), *self._ownership
                )
        return self._fresh_view().nodes

    def jobs(self) -> list[JobInfo]:
        return self._fresh_view().jobs

    def queue_units(self) -> list[Obj]:
        return self._fresh_view().queue_units

    def _fresh_view(self) -> View:
        with self._lock:
            view = self._view
            if view is None or time.monotonic() - view.at > VIEW_MAX_AGE_S:
                view = self.refresh()
            return view

    def refresh(self) -> View:
        """List everything the sync and the cycle read; keep it as the current view."""
        with self._lock:
            try:
                view = self._list_view()
            except ApiCallError as err:
                raise err.to_cluster_error("listing the cluster failed") from err
            self._view = view
            return view

    def list_objects(
        self, group: str, version: str, plural: str, *, cluster_scoped: bool = False
    ) -> list[Obj]:
        """Every object of a collection in the managed namespaces (all, when none are set).

        Raises JobNotFound-free ClusterError; a collection the server does not serve (no
        CRD) answers an empty list."""
        items: list[Obj] = []
        scopes: list[str | None] = [None] if cluster_scoped else self.scopes()
        try:
            for namespace in scopes:
                found, _ = self.rest.list_all(resource_path(group, version, plural, namespace))
                items.extend(found)
        except ApiCallError as err:
            if err.status == 404:
                return []
            raise err.to_cluster_error(f"listing {plural}.{group} failed") from err
        return items

    def priority_classes(self) -> dict[str, int]:
        cached = self._priorities
        if cached is not None and time.monotonic() - cached[0] < 60:
            return cached[1]
        items, _ = self.rest.list_all("/apis/scheduling.k8s.io/v1/priorityclasses")
        values = {
            str(dig(pc, "metadata", "name")): as_int(pc.get("value"))
            for pc in items
            if isinstance(pc.get("value"), int)
        }
        self._priorities = (time.monotonic(), values)
        return values

    def _list_kind(self, kind: Kind) -> list[Obj]:
        missing_since = self._absent.get(kind.kind)
        if missing_since is not None and time.monotonic() - missing_since < ABSENT_KIND_RETRY_S:
            return []
        objects: list[Obj] = []
        for namespace in self.scopes():
            try:
                items, _ = self.rest.list_all(kind.path(namespace))
            except ApiCallError as err:
                if err.status == 404 and kind.kind != "Job":
                    log.info("%s is not served by this cluster (no CRD); skipping it", kind.kind)
                    self._absent[kind.kind] = time.monotonic()
                    return []
                raise
            objects.extend(items)
        self._absent.pop(kind.kind, None)
        return objects

    def watching(self) -> ClusterWatcher | None:
        """The informers of this process, started (and synced) on first use; None when
        the cache is off or not trustworthy now (then the view is listed afresh)."""
        if not self.watch_cache:
            return None
        if self._watcher is None or self._watcher_pid != os.getpid():
            # A forked worker inherits no threads: it starts informers of its own.
            self._watcher = ClusterWatcher(self, self._changed)
            self._watch_epoch += 1  # cursors of the journal of earlier informers are void
            self._watcher_pid = os.getpid()
            self._watch_started = time.monotonic()
            self._watcher.start()
        # The first reads wait for the informers' first lists; later ones never block on
        # an informer that cannot list (RBAC, a missing CRD's kind): they list instead.
        patience = CACHE_SYNC_TIMEOUT_S - (time.monotonic() - self._watch_started)
        if not self._watcher.wait_synced(max(0.0, patience)):
            log.warning("the watch cache has not synced yet; listing the cluster instead")
            return None
        failing = self._watcher.failing_for()
        if failing > CACHE_STALE_S:
            log.warning("a watch has failed for %.0fs; listing the cluster instead", failing)
            return None
        return self._watcher

    def _changed(self, reason: str) -> None:
        hook = self.on_change
        if hook is not None:
            hook(reason)

    def changed_jobs(
        self, cursor: tuple[int, int] | None
    ) -> tuple[tuple[int, int], set[JobKey] | None]:
        """The watch cache's journal: (a new cursor, the (kind, namespace, name) of every
        job that changed after ``cursor``). The set is None when the caller must look at
        everything: no cursor yet, a cursor of informers since replaced (a forked or
        restarted process), or the cache is off or not trustworthy now."""
        with self._lock:
            watcher = self.watching()
        if watcher is None or self.mirror:  # QueueUnit hints come with full views only
            return (0, 0), None
        epoch = self._watch_epoch
        if cursor is None or cursor[0] != epoch:
            return (epoch, watcher.changed_since(0)[0]), None
        seq, keys = watcher.changed_since(cursor[1])
        return (epoch, seq), keys

    def job_infos(self, keys: set[JobKey]) -> dict[JobKey, JobInfo | None]:
        """The managed jobs among ``keys`` as the cache holds them (None: gone, or not the
        queue's). Their uids join the managed set that node usage is counted with."""
        with self._lock:
            watcher = self.watching()
            if watcher is None:
                raise ClusterError("the watch cache is not available", retryable=True)
            priorities = self.priority_classes()
            found: dict[JobKey, JobInfo | None] = {}
            for key in keys:
                kind = KINDS.get(key[0])
                obj = watcher.find(*key) if kind is not None else None
                found[key] = None
                if kind is None or obj is None:
                    continue
                meta = obj.get("metadata") or {}
                labels = dict(meta.get("labels") or {})
                annotations = dict(meta.get("annotations") or {})
                owned = controller(obj) is not None and not compat.first_label(
                    labels, compat.QUEUE_LABELS + compat.QUOTA_LABELS
                )
                if owned or not compat.is_managed(labels, annotations, kind.is_suspended(obj)):
                    continue
                # Decoded once per resourceVersion: the next full view keeps it (_list_view).
                uid, rv = str(meta.get("uid")), str(meta.get("resourceVersion") or "")
                memo = f"{rv}@{id(priorities)}" if rv else ""
                known = self._infos.get(uid)
                if memo and known is not None and known[0] == memo:
                    info = known[1]
                else:
                    info = job_info(kind, obj, labels, annotations, priorities)
                    if memo:
                        self._infos[uid] = (memo, info)
                found[key] = info
                self._ownership[0].add(info.ref.uid)
            return found

    def stop_watching(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None

    def _gather(self) -> tuple[dict[str, list[Obj]], list[Obj], list[Obj]]:
        """The managed kinds' objects, the nodes and the bound pods: from the watch cache
        when it is on and healthy, else listed page by page."""
        watcher = self.watching()
        if watcher is not None:
            return watcher.objects()
        by_kind = {kind.kind: self._list_kind(kind) for kind in self.kinds}
        nodes, _ = self.rest.list_all("/api/v1/nodes")
        pods, _ = self.rest.list_all("/api/v1/pods", {"fieldSelector": BOUND_PODS})
        return by_kind, nodes, pods

    def _list_view(self) -> View:
        priorities = self.priority_classes()
        queue_units = self._list_queue_units() if self.mirror else []
        by_kind, node_objects, pods = self._gather()
        infos: dict[str, tuple[str, JobInfo]] = {}
        by_consumer = {consumer_key(u): u for u in queue_units}
        jobs: list[JobInfo] = []
        managed_uids: set[str] = set()
        job_owner: dict[str, str] = {}  # uid of a batch Job -> uid of its controller
        ray_clusters: set[tuple[str, str]] = set()
        for kind in self.kinds:
            for obj in by_kind.get(kind.kind, ()):
                meta = obj.get("metadata") or {}
                owner = controller(obj)
                if owner is not None and kind.kind == "Job":
                    job_owner[str(meta.get("uid"))] = str(owner.get("uid"))
                labels = dict(meta.get("labels") or {})
                annotations = dict(meta.get("annotations") or {})
                unit = by_consumer.get(
                    (kind.kind, str(meta.get("namespace")), str(meta.get("name")))
                )
                if unit is not None:
                    annotations = queue_unit_hints(unit, annotations)
                    # koord-queue reads the preemptible label on the QueueUnit too.
                    for key in compat.PREEMPTIBLE_LABELS:
                        value = dig(unit, "metadata", "labels", key)
                        if value is not None and key not in labels:
                            labels[key] = str(value)
                # A Job owned by a JobSet (or CronJob) is its parent's business.
                owned = owner is not None and not compat.first_label(
                    labels, compat.QUEUE_LABELS + compat.QUOTA_LABELS
                )
                if owned or not compat.is_managed(labels, annotations, kind.is_suspended(obj)):
                    continue
                # An object unchanged since the last view (same resourceVersion, no
                # QueueUnit hints, same priority classes) keeps its JobInfo.
                uid, rv = str(meta.get("uid")), str(meta.get("resourceVersion") or "")
                memo = f"{rv}@{id(priorities)}" if rv and unit is None else ""
                known = self._infos.get(uid)
                if memo and known is not None and known[0] == memo:
                    info = known[1]
                else:
                    info = job_info(kind, obj, labels, annotations, priorities)
                if memo:
                    infos[uid] = (memo, info)
                jobs.append(info)
                managed_uids.add(info.ref.uid)
                if kind.kind == "RayJob" and dig(obj, "status", "rayClusterName"):
                    ray_clusters.add(
                        (info.ref.namespace, str(dig(obj, "status", "rayClusterName")))
                    )
        self._infos = infos
        self._ownership = (managed_uids, job_owner, ray_clusters)
        nodes = node_infos(node_objects, pods, managed_uids, job_owner, ray_clusters)
        return View(time.monotonic(), jobs, nodes, queue_units)

    def _list_queue_units(self) -> list[Obj]:
        group, version, plural = QUEUE_UNITS
        try:
            items: list[Obj] = []
            for namespace in self.scopes():
                found, _ = self.rest.list_all(resource_path(group, version, plural, namespace))
                items.extend(found)
            return items
        except ApiCallError as err:
            if err.status == 404:
                return []
            raise

    def kind_of(self, ref: JobRef) -> Kind:
        kind = KINDS.get(ref.kind)
        if kind is None:
            raise ClusterError(f"{ref.kind} is not a kind Koord-Queue manages", retryable=False)
        return kind

    def get(self, kind: Kind, ref: JobRef) -> Obj:
        try:
            obj = self.rest.call("get", "GET", kind.path(ref.namespace, ref.name))
        except ApiCallError as err:
            if err.status == 404:
                raise JobNotFound(f"{ref.kind} {ref.namespace}/{ref.name} is gone") from err
            raise err.to_cluster_error(f"reading {ref.kind} {ref.namespace}/{ref.name}") from err
        if ref.uid and dig(obj, "metadata", "uid") != ref.uid:
            raise JobNotFound(
                f"{ref.kind} {ref.namespace}/{ref.name} was replaced by another object"
            )
        return obj

    def fresh_job(self, ref: JobRef) -> JobInfo:
        """The job as the API server has it now (a read, not the view); JobNotFound when
        it is gone."""
        kind = self.kind_of(ref)
        obj = self.get(kind, ref)
        meta = obj.get("metadata") or {}
        return job_info(
            kind,
            obj,
            dict(meta.get("labels") or {}),
            dict(meta.get("annotations") or {}),
            self.priority_classes(),
        )


def job_info(
    kind: Kind,
    obj: Obj,
    labels: dict[str, str],
    annotations: dict[str, str],
    priorities: Mapping[str, int],
) -> JobInfo:
    observed = kind.observe(obj)
    message = observed.message
    pod_sets: list[dict[str, Any]] = []
    refusal = kind.refusal(obj)
    try:
        for template in kind.templates(obj):
            pod_sets.append(
                {
                    "name": template.name,
                    "count": template.count,
                    "requests": pod_requests(template.spec),
                    "node_selector": dict(template.spec.get("nodeSelector") or {}),
                    "tolerations": tolerations(template.spec),
                }
            )
    except QuantityError as exc:
        pod_sets, message = [], f"Its pod requests cannot be read: {exc}"
    if refusal:  # no pod sets: the sync reports the job unplaced, with this reason
        pod_sets, message = [], refusal
    priority_class = (
        kind.priority_class(obj) or compat.annotation(annotations, compat.PRIORITY_CLASS_KEY) or ""
    )
    priority = priorities.get(priority_class) if priority_class else None
    if priority is None:
        for template in kind.templates(obj):
            if isinstance(template.spec.get("priority"), int):
                priority = int(template.spec["priority"])
                break
    meta = obj.get("metadata") or {}
    return JobInfo(
        ref=kind.ref(obj),
        state=observed.state,
        suspended=observed.suspended,
        pod_sets=pod_sets,
        labels=labels,
        annotations=annotations,
        priority=priority,
        priority_class=priority_class,
        expected_runtime_s=compat.expected_runtime(annotations) or kind.active_deadline(obj),
        created_at=parse_time(meta.get("creationTimestamp")),
        started_at=observed.started_at,
        finished_at=observed.finished_at,
        active=observed.active,
        message=message,
    )


def node_infos(
    nodes: list[Obj],
    pods: list[Obj],
    managed: set[str],
    job_owner: Mapping[str, str],
    ray_clusters: set[tuple[str, str]],
) -> list[NodeInfo]:
    reserved: dict[str, dict[str, int]] = {}
    for pod in pods:
        if not occupying(pod) or pod_is_managed(pod, managed, job_owner, ray_clusters):
            continue
        try:
            requests = pod_requests(pod.get("spec"))
        except QuantityError:
            continue  # the API server would not have admitted it; nothing to count
        bucket = reserved.setdefault(str(dig(pod, "spec", "nodeName")), {})
        requests["pods"] = requests.get("pods", 0) + 1
        for resource, amount in requests.items():
            bucket[resource] = bucket.get(resource, 0) + amount
    return [node_info(node, reserved.get(str(dig(node, "metadata", "name")), {})) for node in nodes]


# --- writes -----------------------------------------------------------------------------
