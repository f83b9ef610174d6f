"""The job runner: the Job controller, a tiny scheduler and the kubelets, for batch/v1 Jobs.

Event driven: store changes mark Jobs dirty and wake the thread; timers wake it when a pod
has run its time. `step()` does one round and is what tests with a manual clock call.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import threading
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from . import objects as o
from .objects import ApiError, Obj, dig
from .store import JOBS, PODS, Change, Store

RUNTIME_ANNOTATION = "fake.koord-queue.io/runtime-seconds"
FAIL_ANNOTATION = "fake.koord-queue.io/fail"
NODES = ("", "v1", "nodes")
_DONE = ("Succeeded", "Failed")

JobKey = tuple[str, str]


def _occupies(pod: Obj | None) -> bool:
    return bool(pod and dig(pod, "spec", "nodeName") and dig(pod, "status", "phase") not in _DONE)


def _owner_uid(pod: Obj) -> str | None:
    for ref in dig(pod, "metadata", "ownerReferences") or []:
        if ref.get("kind") == "Job" and ref.get("controller"):
            return str(ref.get("uid"))
    return None


def _condition(status: Obj, type_: str) -> Obj | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), None)


def _set_condition(
    status: Obj, type_: str, value: bool, reason: str, message: str, now: float
) -> None:
    """Set a Job condition the way the Job controller does (no-op if already so)."""
    wanted = "True" if value else "False"
    conditions = [dict(c) for c in status.get("conditions") or []]
    current = next((c for c in conditions if c.get("type") == type_), None)
    if current is None and not value:
        return
    if current is not None and current.get("status") == wanted:
        return
    stamp = o.rfc3339(now)
    fresh = {
        "type": type_,
        "status": wanted,
        "reason": reason,
        "message": message,
        "lastProbeTime": stamp,
        "lastTransitionTime": stamp,
    }
    if current is None:
        conditions.append(fresh)
    else:
        current.update(fresh)
    status["conditions"] = conditions


def tolerates(tolerations: list[Obj], taint: Obj) -> bool:
    for tol in tolerations:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        if tol.get("operator") == "Exists":
            if not tol.get("key") or tol["key"] == taint.get("key"):
                return True
        elif tol.get("key") == taint.get("key") and tol.get("value", "") == taint.get("value", ""):
            return True
    return False


class JobRunner:
    """Runs unsuspended batch/v1 Jobs: creates, binds, completes and deletes their pods."""

    def __init__(
        self,
        store: Store,
        clock: Callable[[], float],
        default_runtime: float = 1.0,
        time_scale: float = 1.0,
        idle: float = 1.0,
    ) -> None:
        self.store = store
        self.clock = clock
        self.default_runtime = default_runtime
        self.time_scale = time_scale  # runtimes and activeDeadlineSeconds are multiplied by it
        # The longest the thread sleeps with nothing due: it is woken by every change and
        # sleeps until the next timer, so this only bounds how late it notices a clock
        # that jumps (a test's clock, not the wall clock).
        self.idle = idle
        self._paused = False
        self.errors: list[str] = []  # tracebacks of rounds that failed; tests assert it's empty
        self._dirty: set[JobKey] = set()
        self._orphans: set[str] = set()  # uids of deleted Jobs whose pods must go
        self._timers: list[tuple[float, str, str]] = []
        self._pending: dict[tuple[str, str], None] = {}  # pods waiting for a node, FIFO
        self._pods_of: dict[str, set[tuple[str, str]]] = {}
        self._due: dict[str, float] = {}  # pod uid -> clock when it is done running
        self._job_started: dict[str, float] = {}  # Job uid -> clock when last unsuspended
        self._node_used: dict[str, Counter[str]] = {}
        self._nodes: dict[str, _NodeInfo] = {}
        self._node_order: list[str] = []
        self._capacity_changed = False
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        store.listeners.append(self._on_change)

    # --- bookkeeping (called under the store lock for every write) --------------------------

    def _on_change(self, change: Change) -> None:
        key = change.rtype.key
        m = change.obj["metadata"]
        if key == JOBS:
            if change.type == "DELETED":
                self._orphans.add(m["uid"])
            elif change.actor != "runner":
                self._dirty.add((m["namespace"], m["name"]))
        elif key == PODS:
            self._pod_changed(change)
        elif key == NODES:
            self._nodes.pop(m["name"], None)
            if change.type != "DELETED":
                self._nodes[m["name"]] = _NodeInfo.of(change.obj)
            self._node_order = sorted(self._nodes)
            self._capacity_changed = True
        else:
            return
        self._wake.set()

    def _pod_changed(self, change: Change) -> None:
        pod, old, deleted = change.obj, change.old, change.type == "DELETED"
        pod_key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        uid, owner = pod["metadata"]["uid"], _owner_uid(pod)
        if owner and not deleted:
            self._pods_of.setdefault(owner, set()).add(pod_key)
        was, now = _occupies(old), not deleted and _occupies(pod)
        if was:
            used = self._node_used.setdefault(dig(old, "spec", "nodeName"), Counter())
            used.subtract({**o.pod_requests(dig(old, "spec")), "pods": 1})
            self._capacity_changed = True
        if now:
            used = self._node_used.setdefault(pod["spec"]["nodeName"], Counter())
            used.update({**o.pod_requests(pod.get("spec")), "pods": 1})
            if not was:
                self._pod_started(pod, uid, owner)
        if deleted:
            self._pending.pop(pod_key, None)
            self._due.pop(uid, None)
            if owner:
                self._pods_of.get(owner, set()).discard(pod_key)
                job_name = self._job_name(pod)
                if change.actor != "runner" and job_name:
                    self._dirty.add((pod_key[0], job_name))
        elif (
            pod_key not in self._pending
            and not dig(pod, "spec", "nodeName")
            and dig(pod, "status", "phase") == "Pending"
        ):
            self._pending[pod_key] = None
            self._capacity_changed = True  # so that the next round tries to place it

    def _job_name(self, pod: Obj) -> str | None:
        for ref in dig(pod, "metadata", "ownerReferences") or []:
            if ref.get("kind") == "Job" and ref.get("controller"):
                return str(ref["name"])
        return None

    def _pod_started(self, pod: Obj, uid: str, owner: str | None) -> None:
        job_name = self._job_name(pod)
        if owner and job_name:
            ns = pod["metadata"]["namespace"]
            job = self.store.find("jobs", ns, job_name)
            if job is not None:
                self._due[uid] = due = self.clock() + self.runtime(job)
                heapq.heappush(self._timers, (due, ns, job_name))

    def runtime(self, job: Obj) -> float:
        """Seconds a pod of this Job runs, already multiplied by the time scale."""
        for source in (dig(job, "metadata"), dig(job, "spec", "template", "metadata")):
            value = (dig(source, "annotations") or {}).get(RUNTIME_ANNOTATION)
            if value is not None:
                try:
                    return float(value) * self.time_scale
                except ValueError:
                    break
        return self.default_runtime * self.time_scale

    # --- the loop ---------------------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="fakekube-runner", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    @property
    def paused(self) -> bool:
        return self._paused

    @paused.setter
    def paused(self, value: bool) -> None:
        self._paused = value
        self._wake.set()  # resuming runs what piled up at once

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._sleep())
            self._wake.clear()
            if self._paused:
                continue
            try:
                self.step()
            except Exception:
                self.errors.append(traceback.format_exc())

    def _sleep(self) -> float:
        """Seconds until the next timer is due (at most `idle`): changes wake the thread,
        timers are the only thing it waits for."""
        if self._paused or not self._timers:
            return self.idle
        return min(self.idle, max(0.0, self._timers[0][0] - self.clock()))

    def step(self) -> None:
        """One round: due timers, dirty Jobs, garbage pods, then pending pods."""
        store = self.store
        with store.cond:
            now = self.clock()
            while self._timers and self._timers[0][0] <= now:
                _, ns, name = heapq.heappop(self._timers)
                self._dirty.add((ns, name))
            dirty, self._dirty = self._dirty, set()
            orphans, self._orphans = self._orphans, set()
        with store.acting("runner"):
            with store.cond:
                for uid in orphans:
                    for ns, name in sorted(self._pods_of.pop(uid, ())):
                        self._delete_pod(ns, name)
            for key in sorted(dirty):
                with store.cond:
                    self._reconcile(key, now)
            if self._capacity_changed:
                with store.cond:
                    self._schedule_pending(now)

    def _delete_pod(self, ns: str, name: str) -> None:
        with contextlib.suppress(ApiError):  # already gone
            self.store.delete("pods", ns, name)

    # --- the Job controller -----------------------------------------------------------------

    def _reconcile(self, key: JobKey, now: float) -> None:
        job = self.store.find("jobs", *key)
        if job is None:
            return
        status: Obj = o.copy(job.get("status") or {})
        if any(
            c.get("status") == "True"
            for c in (_condition(status, "Complete"), _condition(status, "Failed"))
            if c
        ):
            return
        spec, uid = job["spec"], job["metadata"]["uid"]
        pods = [p for k in sorted(self._pods_of.get(uid, ())) if (p := self.store.find("pods", *k))]
        active = [p for p in pods if dig(p, "status", "phase") not in _DONE]
        if spec.get("suspend"):
            for pod in active:
                self._delete_pod(key[0], pod["metadata"]["name"])
            active = []
            status.pop("startTime", None)
            self._job_started.pop(uid, None)
            _set_condition(status, "Suspended", True, "JobSuspended", "Job suspended", now)
        else:
            active = self._run(job, status, active, now)
        status["active"] = len(active)
        status["ready"] = sum(1 for p in active if _occupies(p))
        if status != (job.get("status") or {}):
            self.store.update("jobs", *key, {"status": status}, subresource="status")

    def _run(self, job: Obj, status: Obj, active: list[Obj], now: float) -> list[Obj]:
        spec, uid = job["spec"], job["metadata"]["uid"]
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        deadline = spec.get("activeDeadlineSeconds")
        _set_condition(status, "Suspended", False, "JobResumed", "Job resumed", now)
        if not status.get("startTime"):
            status["startTime"] = o.rfc3339(now)
            self._job_started[uid] = now
            if deadline is not None:
                heapq.heappush(self._timers, (now + deadline * self.time_scale, ns, name))
        # The clock is finer than RFC 3339 seconds, so the runner keeps its own start time.
        started = self._job_started.setdefault(uid, now)
        fail = (dig(job, "metadata", "annotations") or {}).get(FAIL_ANNOTATION) == "true"
        still: list[Obj] = []
        for pod in active:
            due = self._due.get(pod["metadata"]["uid"])
            if due is not None and now >= due:
                phase = "Failed" if fail else "Succeeded"
                self.store.force(
                    "pods", {**pod, "status": {**pod.get("status", {}), "phase": phase}}
                )
                field = "failed" if fail else "succeeded"
                status[field] = status.get(field, 0) + 1
            else:
                still.append(pod)
        if deadline is not None and now >= started + deadline * self.time_scale:
            return self._fail(job, status, still, "DeadlineExceeded", now)
        if status.get("failed"):
            return self._fail(job, status, still, "BackoffLimitExceeded", now)
        succeeded, completions = status.get("succeeded", 0), spec.get("completions")
        if (completions is not None and succeeded >= completions) or (
            completions is None and succeeded and not still
        ):
            message = "Reached expected number of succeeded pods"
            _set_condition(status, "SuccessCriteriaMet", True, "CompletionsReached", message, now)
            _set_condition(status, "Complete", True, "CompletionsReached", message, now)
            status["completionTime"] = o.rfc3339(now)
            return still
        if completions is None and succeeded:
            return still  # work-queue Jobs start no new pods once one succeeded
        left = (completions - succeeded) if completions is not None else spec["parallelism"]
        for _ in range(min(spec["parallelism"], left) - len(still)):
            still.append(self._create_pod(job))
        return still

    def _fail(self, job: Obj, status: Obj, active: list[Obj], reason: str, now: float) -> list:
        for pod in active:
            self._delete_pod(job["metadata"]["namespace"], pod["metadata"]["name"])
        message = {"DeadlineExceeded": "Job was active longer than specified deadline"}.get(
            reason, "Job has reached the specified backoff limit"
        )
        _set_condition(status, "FailureTarget", True, reason, message, now)
        _set_condition(status, "Failed", True, reason, message, now)
        return []

    def _create_pod(self, job: Obj) -> Obj:
        m, template = job["metadata"], o.copy(dig(job, "spec", "template") or {})
        pod: Obj = {
            "metadata": {
                "generateName": f"{m['name']}-",
                "labels": (template.get("metadata") or {}).get("labels") or {},
                "annotations": (template.get("metadata") or {}).get("annotations") or {},
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": m["name"],
                        "uid": m["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": template.get("spec") or {},
        }
        node = self._pick_node(pod)
        if node is None:
            return self.store.create("pods", m["namespace"], pod)
        return self.store.create("pods", m["namespace"], self._bound(pod, node), keep_status=True)

    # --- the scheduler and the kubelets -----------------------------------------------------

    def _bound(self, pod: Obj, node: str) -> Obj:
        """The pod as placed on `node` and started by its kubelet."""
        stamp = o.rfc3339(self.clock())
        conditions = [
            {"type": t, "status": "True", "lastTransitionTime": stamp}
            for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ]
        status = {"phase": "Running", "startTime": stamp, "conditions": conditions}
        return {**pod, "spec": {**pod["spec"], "nodeName": node}, "status": status}

    def _schedule_pending(self, now: float) -> None:
        self._capacity_changed = False
        # Binding only uses capacity up, so a pod shape that fit nowhere still fits nowhere.
        no_fit: set[str] = set()
        for key in list(self._pending):
            pod = self.store.find("pods", *key)
            if pod is None or dig(pod, "spec", "nodeName"):
                self._pending.pop(key, None)
                continue
            shape = json.dumps(
                {k: pod["spec"].get(k) for k in ("nodeSelector", "tolerations", "containers")},
                sort_keys=True,
            )
            node = None if shape in no_fit else self._pick_node(pod)
            if node is None:
                no_fit.add(shape)
            if node is not None:
                self._pending.pop(key, None)
                self.store.force("pods", self._bound(pod, node))
                if name := self._job_name(pod):
                    self._dirty.add((key[0], name))
                    self._wake.set()
            elif not dig(pod, "status", "conditions"):
                unschedulable = {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "no node fits",
                    "lastTransitionTime": o.rfc3339(now),
                }
                status = {"phase": "Pending", "conditions": [unschedulable]}
                self.store.force("pods", {**pod, "status": status})

    def _pick_node(self, pod: Obj) -> str | None:
        """First node by name that is schedulable, matches the node selector, has every
        NoSchedule/NoExecute taint tolerated and enough allocatable left."""
        spec = pod.get("spec") or {}
        selector = (spec.get("nodeSelector") or {}).items()
        tolerations = spec.get("tolerations") or []
        wanted = {**o.pod_requests(spec), "pods": 1.0}
        for name in self._node_order:
            node = self._nodes[name]
            if node.unschedulable or not selector <= node.labels.items():
                continue
            if not all(tolerates(tolerations, t) for t in node.taints):
                continue
            used = self._node_used.get(name, Counter())
            if all(
                q <= 0 or used[r] + q <= node.allocatable.get(r, 0.0)
                for r, q in wanted.items()
                if r != "pods" or "pods" in node.allocatable
            ):
                return name
        return None


@dataclass(frozen=True, slots=True)
class _NodeInfo:
    """What the scheduler needs of a node, parsed once per node change."""

    labels: dict[str, str]
    taints: list[Obj]
    unschedulable: bool
    allocatable: dict[str, float]

    @classmethod
    def of(cls, node: Obj) -> _NodeInfo:
        allocatable = dig(node, "status", "allocatable") or dig(node, "status", "capacity") or {}
        return cls(
            labels=dict(dig(node, "metadata", "labels") or {}),
            taints=[
                t
                for t in dig(node, "spec", "taints") or []
                if t.get("effect") in ("NoSchedule", "NoExecute")
            ],
            unschedulable=bool(dig(node, "spec", "unschedulable")),
            allocatable={r: o.parse_quantity(q) for r, q in allocatable.items()},
        )
