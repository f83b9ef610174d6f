"""List + watch: ``Informer`` keeps one collection in memory; ``ClusterWatcher`` runs one
informer per managed kind and namespace, plus nodes and bound pods, and reports changes
that can alter a decision. The watcher sees its cluster only through a small public
surface (``WatchSource``): the kinds, the namespaces and the REST client to copy.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from queueing import compat, trace
from queueing.cluster.base import JobKey
from queueing.cluster.kubernetes.client import ApiCallError, Obj, Rest, dedicated_api
from queueing.cluster.kubernetes.kinds import Kind, as_int, dig, node_info, occupying, revision

log = logging.getLogger(__name__)

# A kind whose CRD is missing is looked for again after this long.
ABSENT_KIND_RETRY_S = 300.0
BOUND_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"

Handler = Callable[[str, Obj, Obj | None], None]


class WatchSource(Protocol):
    """What a ClusterWatcher needs of the adapter it watches for."""

    @property
    def kinds(self) -> Sequence[Kind]: ...

    @property
    def rest(self) -> Rest: ...

    def scopes(self) -> list[str | None]: ...


class Informer:
    """One collection kept in memory: a paginated list, then a watch from its
    resourceVersion. Bookmarks move the resourceVersion on without changes; a watch that
    ends is resumed from where it stopped; 410 Gone (history compacted) relists, and the
    relist reports what changed meanwhile as ADDED / MODIFIED / DELETED.

    ``on_event(type, obj, old)`` is called for every change, under no lock of ours.
    """

    def __init__(
        self,
        rest: Rest,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        on_event: Handler | None = None,
        watch_timeout_s: int = 300,
        name: str = "",
        optional: bool = False,
    ) -> None:
        self.rest = rest
        self.path = path
        #: A collection that may not be served at all (a custom kind without its CRD).
        self.optional = optional
        self.query = dict(query or {})
        self.on_event = on_event
        self.watch_timeout_s = watch_timeout_s
        self.name = name or path
        self.objects: dict[str, Obj] = {}
        self.resource_version = ""
        self.relists = 0
        self.watches = 0
        self.bookmarks = 0
        self.synced = threading.Event()
        self.failing_since: float | None = None  # monotonic time of the first failure in a row
        self._lock = threading.Lock()

    @staticmethod
    def key(obj: Obj) -> str:
        meta = obj.get("metadata") or {}
        return f"{meta.get('namespace') or ''}/{meta.get('name')}"

    def snapshot(self) -> list[Obj]:
        with self._lock:
            return list(self.objects.values())

    def get(self, key: str) -> Obj | None:
        """One object by ``namespace/name``."""
        with self._lock:
            return self.objects.get(key)

    def put(self, obj: Obj) -> None:
        """Write-through: an object as a write of ours returned it, so that this process
        reads its own writes before the watch brings them. An older copy never replaces
        a newer one (resourceVersions compared as numbers, as etcd revisions are)."""
        key = self.key(obj)
        with self._lock:
            if key not in self.objects:
                return  # not ours to add: creation is the watch's to report
            mine = revision(dig(obj, "metadata", "resourceVersion"))
            held = revision(dig(self.objects[key], "metadata", "resourceVersion"))
            if mine is not None and held is not None and mine > held:
                self.objects[key] = obj

    def relist(self) -> None:
        items, rv = self.rest.list_all(self.path, self.query)
        fresh = {self.key(o): o for o in items}
        with self._lock:
            old, self.objects, self.resource_version = self.objects, fresh, rv
        self.relists += 1
        self.failing_since = None
        self.synced.set()
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None:
                self._emit("ADDED", obj, None)
            elif dig(before, "metadata", "resourceVersion") != dig(
                obj, "metadata", "resourceVersion"
            ):
                self._emit("MODIFIED", obj, before)
        for key, obj in old.items():
            if key not in fresh:
                self._emit("DELETED", obj, obj)

    def _emit(self, type_: str, obj: Obj, old: Obj | None) -> None:
        if self.on_event is not None:
            try:
                self.on_event(type_, obj, old)
            except Exception:
                log.exception("%s: a watch handler failed", self.name)

    def watch_once(self, stop: threading.Event | None = None) -> int:
        """One watch request from the current resourceVersion (listing first if there is
        none); returns the number of changes applied. 410 relists and returns."""
        if not self.resource_version:
            self.relist()
        query = {
            **self.query,
            "watch": "true",
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": self.watch_timeout_s,
        }
        applied = 0
        self.watches += 1
        try:
            for event in self.rest.stream(
                self.path, query, read_timeout_s=self.watch_timeout_s + 30
            ):
                if stop is not None and stop.is_set():
                    break
                self.failing_since = None
                type_, obj = event.get("type"), event.get("object") or {}
                if type_ == "ERROR":
                    if obj.get("code") == 410:
                        log.info("%s: watch history expired; relisting", self.name)
                        self.relist()
                        return applied
                    raise ApiCallError(as_int(obj.get("code"), 500), str(obj.get("message")))
                rv = str(dig(obj, "metadata", "resourceVersion") or "")
                if type_ == "BOOKMARK":
                    self.bookmarks += 1
                    if rv:
                        self.resource_version = rv
                    continue
                key = self.key(obj)
                with self._lock:
                    old = self.objects.get(key)
                    if type_ == "DELETED":
                        self.objects.pop(key, None)
                    else:
                        self.objects[key] = obj
                    if rv:
                        self.resource_version = rv
                applied += 1
                self._emit(str(type_), obj, old)
        except ApiCallError as err:
            if err.status == 410:
                self.relist()
                return applied
            raise
        return applied

    def run(self, stop: threading.Event) -> None:
        """Watch until ``stop`` is set, backing off after errors."""
        failures = 0
        while not stop.is_set():
            try:
                self.watch_once(stop)
                failures = 0
            except ApiCallError as err:
                if stop.is_set():
                    return  # we closed the stream ourselves
                if err.status == 404 and self.optional:
                    # A kind the cluster does not serve (no CRD): an empty collection,
                    # not a failure; looked for again every ABSENT_KIND_RETRY_S.
                    log.info("%s is not served by this cluster (no CRD)", self.name)
                    with self._lock:
                        self.objects, self.resource_version = {}, ""
                    self.failing_since = None
                    self.synced.set()
                    stop.wait(ABSENT_KIND_RETRY_S)
                    continue
                self.rest.count("watch", err)
                if self.failing_since is None:
                    self.failing_since = time.monotonic()
                failures += 1
                wait = self.rest.policy.backoff(min(failures, 8), self.rest.rng)
                if err.status == 429 and err.retry_after:
                    wait = max(wait, min(err.retry_after, self.rest.policy.max_retry_after_s))
                log.warning("%s: watch failed (%s); retrying in %.1fs", self.name, err, wait)
                stop.wait(wait)
            except Exception:
                log.exception("%s: watch loop error", self.name)
                stop.wait(1.0)

    def close(self) -> None:
        self.rest.interrupt()


class ClusterWatcher:
    """The long-lived watch: informers for the managed kinds, nodes and bound pods, one
    thread each. ``on_change(reason)`` fires when something happened that can change a
    decision (a job finished, appeared, vanished or changed state; a node or capacity
    changed), so a cycle can follow at once instead of at the next timer tick."""

    def __init__(
        self,
        cluster: WatchSource,
        on_change: Callable[[str], None],
        *,
        watch_timeout_s: int = 300,
    ) -> None:
        self.cluster = cluster
        self.on_change = on_change
        self.stop_event = threading.Event()
        self.informers: list[Informer] = []
        self.job_informers: dict[tuple[str, str], Informer] = {}  # (kind, namespace)
        # The journal: (kind, namespace, name) of every job event -> its sequence number.
        self.changed_at: dict[JobKey, int] = {}
        self.seq = 0
        self._journal_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        # Every watch holds a connection open: a pool of their own, one per informer.
        streams = len(cluster.kinds) * len(cluster.scopes()) + 2
        self.api = dedicated_api(cluster.rest.api, pool_size=streams + 2, purpose="watch")
        # Each informer owns its stream; they share nothing but the retry policy.
        for kind in cluster.kinds:
            for namespace in cluster.scopes():
                informer = Informer(
                    self._rest(),
                    kind.path(namespace),
                    on_event=self._job_event(kind),
                    watch_timeout_s=watch_timeout_s,
                    name=f"{kind.kind}@{namespace or '*'}",
                    optional=kind.kind != "Job",
                )
                self.informers.append(informer)
                self.job_informers[(kind.kind, namespace or "")] = informer
        self.nodes = Informer(
            self._rest(),
            "/api/v1/nodes",
            on_event=self._node_event,
            watch_timeout_s=watch_timeout_s,
            name="nodes",
        )
        self.pods = Informer(
            self._rest(),
            "/api/v1/pods",
            query={"fieldSelector": BOUND_PODS},
            on_event=self._pod_event,
            watch_timeout_s=watch_timeout_s,
            name="pods",
        )
        self.informers += [self.nodes, self.pods]

    def _rest(self) -> Rest:
        return self.cluster.rest.with_api(self.api)

    def changed_since(self, cursor: int) -> tuple[int, set[JobKey]]:
        """(the current sequence number, the jobs changed after ``cursor``).

        The journal has one reader (the sync of this process), whose cursors only move
        on: what it has been given is dropped, so the journal holds only what is new."""
        with self._journal_lock:
            seq = self.seq
            changed = {key for key, at in self.changed_at.items() if at > cursor}
            if cursor:
                self.changed_at = {key: self.changed_at[key] for key in changed}
        return seq, changed

    def _job_event(self, kind: Kind) -> Handler:
        def handle(type_: str, obj: Obj, old: Obj | None) -> None:
            meta = obj.get("metadata") or {}
            key = (kind.kind, str(meta.get("namespace") or ""), str(meta.get("name")))
            with self._journal_lock:
                self.seq += 1
                self.changed_at[key] = self.seq
            labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
            if not compat.is_managed(labels, annotations, kind.is_suspended(obj)) and (
                old is None or not kind.is_suspended(old)
            ):
                return
            if type_ in ("ADDED", "DELETED"):
                self.on_change(f"{kind.kind} {type_.lower()}")
                return
            now, before = kind.observe(obj), kind.observe(old) if old else None
            if before is None or (now.state, now.suspended, now.active) != (
                before.state,
                before.suspended,
                before.active,
            ):
                if before is None or now.state != before.state:
                    trace.mark("informer", job=f"{key[1]}/{key[2]}", state=now.state)
                self.on_change(f"{kind.kind} {now.state.lower()}")

        return handle

    def _node_event(self, type_: str, obj: Obj, old: Obj | None) -> None:
        if old is not None and type_ == "MODIFIED":
            same = node_info(obj, {}) == node_info(old, {})
            if same:
                return  # heartbeats and status noise
        self.on_change(f"node {type_.lower()}")

    def _pod_event(self, type_: str, obj: Obj, old: Obj | None) -> None:
        if type_ == "MODIFIED" and old is not None and occupying(obj) == occupying(old):
            return
        self.on_change("capacity")

    def start(self) -> None:
        self.stop_event.clear()
        for informer in self.informers:
            thread = threading.Thread(
                target=informer.run,
                args=(self.stop_event,),
                daemon=True,
                name=f"watch-{informer.name}",
            )
            thread.start()
            self._threads.append(thread)

    def objects(self) -> tuple[dict[str, list[Obj]], list[Obj], list[Obj]]:
        """What the informers hold now: objects per managed kind, nodes, bound pods."""
        by_kind: dict[str, list[Obj]] = {}
        for (kind, _namespace), informer in self.job_informers.items():
            by_kind.setdefault(kind, []).extend(informer.snapshot())
        return by_kind, self.nodes.snapshot(), self.pods.snapshot()

    def find(self, kind: str, namespace: str, name: str) -> Obj | None:
        informer = self.job_informers.get((kind, namespace)) or self.job_informers.get((kind, ""))
        return informer.get(f"{namespace}/{name}") if informer is not None else None

    def put(self, kind: str, obj: Obj) -> None:
        """Write-through of an object a write of ours returned."""
        namespace = str(dig(obj, "metadata", "namespace") or "")
        informer = self.job_informers.get((kind, namespace)) or self.job_informers.get((kind, ""))
        if informer is not None:
            informer.put(obj)

    def failing_for(self) -> float:
        """Seconds the longest-failing informer has been failing (0 when all are well)."""
        since = [i.failing_since for i in self.informers if i.failing_since is not None]
        return time.monotonic() - min(since) if since else 0.0

    def wait_synced(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        return all(i.synced.wait(max(0.0, deadline - time.monotonic())) for i in self.informers)

    def stop(self, timeout_s: float = 5.0) -> None:
        self.stop_event.set()
        for informer in self.informers:
            informer.close()
        for thread in self._threads:
            thread.join(timeout_s)
        self._threads.clear()
        self.api.close()
