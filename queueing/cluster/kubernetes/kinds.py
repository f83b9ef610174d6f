"""The job kinds, as plain dict code: where each kind keeps its suspend flag and pod
templates, how its status reads, and how a pod or a node counts. Nothing here talks to
the API server, so every rule is testable on a literal object (as Kueue's
``pkg/controller/jobs`` keeps one integration per kind behind one interface).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from queueing.cluster.base import FAILED, RUNNING, STARTING, SUCCEEDED, SUSPENDED, JobRef, NodeInfo
from queueing.quantities import QuantityError, parse_amount

log = logging.getLogger(__name__)

Obj = dict[str, Any]

# --- JSON helpers ------------------------------------------------------------------------


def revision(value: Any) -> int | None:
    """A resourceVersion as a number, when it is one (etcd revisions are)."""
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def dig(obj: Any, *path: str) -> Any:
    for part in path:
        # Decoded JSON is plain dicts: the exact type check first (the Mapping ABC's
        # isinstance is several times slower, and the watch handlers dig many times an event).
        if type(obj) is not dict and not isinstance(obj, Mapping):
            return None
        obj = obj.get(part)
    return obj


def nested(path: Sequence[str], value: Any) -> Obj:
    """``nested(("spec", "suspend"), True)`` -> ``{"spec": {"suspend": True}}``."""
    out: Any = value
    for part in reversed(path):
        out = {part: out}
    return out


def deep_merge(base: Obj, extra: Mapping[str, Any]) -> Obj:
    """A merge patch of merge patches (``extra`` wins; maps merge, everything else replaces)."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def parse_time(value: Any) -> datetime | None:
    if not value or not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def true_conditions(obj: Obj) -> dict[str, Obj]:
    """True conditions by type."""
    return {
        str(c.get("type")): dict(c)
        for c in dig(obj, "status", "conditions") or []
        if isinstance(c, Mapping) and c.get("status") == "True"
    }


def as_int(value: Any, default: int = 0) -> int:
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default


def pod_requests(pod_spec: Mapping[str, Any] | None) -> dict[str, int]:
    """Canonical requests of one pod, as the scheduler counts them: the sum of its
    containers (and sidecars), at least its largest init container, plus overhead.
    Limits stand in for missing requests, as the API server defaults them."""

    def of(container: Mapping[str, Any]) -> dict[str, int]:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {str(r): parse_amount(str(r), q) for r, q in merged.items()}

    spec = pod_spec or {}
    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        for name, amount in of(container).items():
            total[name] = total.get(name, 0) + amount
    init_peak: dict[str, int] = {}
    for container in spec.get("initContainers") or []:
        amounts = of(container)
        if container.get("restartPolicy") == "Always":  # a sidecar runs alongside
            for name, amount in amounts.items():
                total[name] = total.get(name, 0) + amount
        else:
            for name, amount in amounts.items():
                init_peak[name] = max(init_peak.get(name, 0), amount)
    for name, amount in init_peak.items():
        total[name] = max(total.get(name, 0), amount)
    for name, quantity in (spec.get("overhead") or {}).items():
        total[str(name)] = total.get(str(name), 0) + parse_amount(str(name), quantity)
    return {name: amount for name, amount in total.items() if amount}


def tolerations(pod_spec: Mapping[str, Any]) -> list[dict[str, str]]:
    out = []
    for tol in pod_spec.get("tolerations") or []:
        if isinstance(tol, Mapping):
            out.append(
                {k: str(tol[k]) for k in ("key", "operator", "value", "effect") if tol.get(k)}
            )
    return out


# --- kinds -------------------------------------------------------------------------------

# --- kinds -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Observed:
    """A job's state as the cluster reports it, common to every kind."""

    state: str
    suspended: bool
    active: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    message: str = ""


@dataclass(frozen=True)
class PodTemplate:
    """One pod shape of a job: ``count`` pods from ``spec``; ``path`` is where the pod
    template sits in the object (for pinning it to a pool)."""

    name: str
    count: int
    spec: Mapping[str, Any]


class Kind:
    """One suspendable kind. Subclasses say where its suspend flag and pod templates are,
    and how its status reads."""

    kind = ""
    group = ""
    version = ""
    plural = ""
    suspend_path: tuple[str, ...] = ("spec", "suspend")
    # Pod templates inside lists cannot be merge-patched one by one: admission reads the
    # object and writes the changed list back under its resourceVersion.
    admit_reads = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None, name: str | None = None, sub: str = "") -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        where = f"/namespaces/{namespace}" if namespace else ""
        tail = f"/{name}" if name else ""
        return f"{base}{where}/{self.plural}{tail}{'/' + sub if sub and name else ''}"

    def ref(self, obj: Obj) -> JobRef:
        meta = obj.get("metadata") or {}
        return JobRef(
            self.kind,
            self.api_version,
            str(meta.get("namespace") or ""),
            str(meta.get("name") or ""),
            str(meta.get("uid") or ""),
        )

    def is_suspended(self, obj: Obj) -> bool:
        return bool(dig(obj, *self.suspend_path))

    def suspend_patch(self, suspend: bool) -> Obj:
        return nested(self.suspend_path, suspend)

    def templates(self, obj: Obj) -> list[PodTemplate]:
        raise NotImplementedError

    def observe(self, obj: Obj) -> Observed:
        raise NotImplementedError

    def active_deadline(self, obj: Obj) -> float | None:
        value = dig(obj, "spec", "activeDeadlineSeconds")
        return float(value) if isinstance(value, int | float) and value > 0 else None

    def selector_holds(self, obj: Obj, selector: Mapping[str, str]) -> bool:
        return all(
            selector.items() <= (t.spec.get("nodeSelector") or {}).items()
            for t in self.templates(obj)
        )

    def selector_patch(self, obj: Obj | None, selector: Mapping[str, str]) -> Obj:
        """A merge patch that adds ``selector`` to every pod template ({} if none needed)."""
        raise NotImplementedError

    def set_suspended(self, body: Obj) -> None:
        node = body
        for part in self.suspend_path[:-1]:
            node = node.setdefault(part, {})
        node[self.suspend_path[-1]] = True

    def refusal(self, obj: Obj) -> str:
        """Why the queue cannot hold this object ("" when it can)."""
        return ""

    def priority_class(self, obj: Obj) -> str:
        for template in self.templates(obj):
            name = template.spec.get("priorityClassName")
            if name:
                return str(name)
        return ""


def _pod_spec_patch(selector: Mapping[str, str]) -> Obj:
    return {"template": {"spec": {"nodeSelector": dict(selector)}}}


def _with_selector(template_holder: Mapping[str, Any], selector: Mapping[str, str]) -> Obj:
    """A copy of an object holding ``template.spec``, with ``selector`` added."""
    out = copy.deepcopy(dict(template_holder))
    spec = out.setdefault("template", {}).setdefault("spec", {})
    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **selector}
    return out


def _batch_count(job_spec: Mapping[str, Any]) -> int:
    parallelism = as_int(job_spec.get("parallelism"), 1)
    completions = job_spec.get("completions")
    return max(1, min(parallelism, as_int(completions)) if completions is not None else parallelism)


class BatchJob(Kind):
    kind, group, version, plural = "Job", "batch", "v1", "jobs"

    def templates(self, obj: Obj) -> list[PodTemplate]:
        spec = obj.get("spec") or {}
        pod = dig(spec, "template", "spec") or {}
        return [PodTemplate("main", _batch_count(spec), pod)]

    def observe(self, obj: Obj) -> Observed:
        status = obj.get("status") or {}
        true = true_conditions(obj)
        started = parse_time(status.get("startTime"))
        active = as_int(status.get("active"))
        if "Complete" in true:
            finished = parse_time(status.get("completionTime")) or parse_time(
                true["Complete"].get("lastTransitionTime")
            )
            return Observed(SUCCEEDED, self.is_suspended(obj), active, started, finished)
        if "Failed" in true:
            cond = true["Failed"]
            message = str(cond.get("message") or cond.get("reason") or "The Job failed.")
            finished = parse_time(cond.get("lastTransitionTime"))
            return Observed(FAILED, self.is_suspended(obj), active, started, finished, message)
        if self.is_suspended(obj):
            return Observed(SUSPENDED, True, active)
        ready = status.get("ready")
        running = as_int(ready) > 0 if ready is not None else active > 0
        return Observed(RUNNING if running else STARTING, False, active, started)

    def selector_patch(self, obj: Obj | None, selector: Mapping[str, str]) -> Obj:
        return {"spec": _pod_spec_patch(selector)} if selector else {}


class JobSet(Kind):
    kind, group, version, plural = "JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets"
    admit_reads = True

    def templates(self, obj: Obj) -> list[PodTemplate]:
        out = []
        for i, rj in enumerate(dig(obj, "spec", "replicatedJobs") or []):
            job_spec = dig(rj, "template", "spec") or {}
            count = as_int(rj.get("replicas"), 1) * _batch_count(job_spec)
            name = str(rj.get("name") or f"job-{i + 1}")
            out.append(PodTemplate(name, count, dig(job_spec, "template", "spec") or {}))
        return out

    def observe(self, obj: Obj) -> Observed:
        true = true_conditions(obj)
        jobs = dig(obj, "status", "replicatedJobsStatus") or []
        active = sum(as_int(j.get("active")) for j in jobs if isinstance(j, Mapping))
        ready = sum(as_int(j.get("ready")) for j in jobs if isinstance(j, Mapping))
        if "Completed" in true:
            return Observed(
                SUCCEEDED,
                self.is_suspended(obj),
                active,
                None,
                parse_time(true["Completed"].get("lastTransitionTime")),
            )
        if "Failed" in true:
            cond = true["Failed"]
            return Observed(
                FAILED,
                self.is_suspended(obj),
                active,
                None,
                parse_time(cond.get("lastTransitionTime")),
                str(cond.get("message") or "The JobSet failed."),
            )
        if self.is_suspended(obj):
            return Observed(SUSPENDED, True, active)
        return Observed(RUNNING if ready or active else STARTING, False, active)

    def selector_patch(self, obj: Obj | None, selector: Mapping[str, str]) -> Obj:
        if not selector or obj is None:
            return {}
        # replicatedJobs[].template.spec.template.spec: a list, so the whole list goes back.
        jobs = []
        for rj in dig(obj, "spec", "replicatedJobs") or []:
            rj = copy.deepcopy(rj)
            job_spec = rj.setdefault("template", {}).setdefault("spec", {})
            rj["template"]["spec"] = _with_selector(job_spec, selector)
            jobs.append(rj)
        return {
            "metadata": {"resourceVersion": dig(obj, "metadata", "resourceVersion")},
            "spec": {"replicatedJobs": jobs},
        }


# KubeRay's default submitter container (GetDefaultSubmitterTemplate).
RAY_SUBMITTER: Obj = {
    "containers": [
        {
            "name": "ray-job-submitter",
            "resources": {
                "requests": {"cpu": "500m", "memory": "200Mi"},
                "limits": {"cpu": "1", "memory": "1Gi"},
            },
        }
    ],
    "restartPolicy": "Never",
}


class RayJob(Kind):
    kind, group, version, plural = "RayJob", "ray.io", "v1", "rayjobs"
    admit_reads = True

    def refusal(self, obj: Obj) -> str:
        # KubeRay suspends only what it created and tears down (Kueue refuses the same).
        if dig(obj, "spec", "clusterSelector"):
            return (
                "This RayJob runs on an existing RayCluster (spec.clusterSelector), which "
                "KubeRay cannot suspend, so the queue cannot hold it: let the RayJob bring "
                "its own cluster (spec.rayClusterSpec), or submit it in a namespace the "
                "queue does not manage."
            )
        if dig(obj, "spec", "shutdownAfterJobFinishes") is not True:
            return (
                "KubeRay suspends a RayJob only with spec.shutdownAfterJobFinishes: true "
                "(otherwise its RayCluster outlives the job and keeps its resources): set it."
            )
        return ""

    def templates(self, obj: Obj) -> list[PodTemplate]:
        cluster = dig(obj, "spec", "rayClusterSpec") or {}
        out = [PodTemplate("head", 1, dig(cluster, "headGroupSpec", "template", "spec") or {})]
        for i, group in enumerate(cluster.get("workerGroupSpecs") or []):
            replicas = group.get("replicas", group.get("minReplicas", 1))
            count = as_int(replicas, 1) * as_int(group.get("numOfHosts"), 1)
            if count > 0:
                name = str(group.get("groupName") or f"workers-{i + 1}")
                out.append(PodTemplate(name, count, dig(group, "template", "spec") or {}))
        # K8sJobMode (KubeRay's default) runs `ray job submit` in a pod of its own, from
        # spec.submitterPodTemplate or KubeRay's default; the other modes add no pod.
        if (dig(obj, "spec", "submissionMode") or "K8sJobMode") == "K8sJobMode":
            submitter = dig(obj, "spec", "submitterPodTemplate", "spec") or RAY_SUBMITTER
            out.append(PodTemplate("submitter", 1, submitter))
        return out

    def observe(self, obj: Obj) -> Observed:
        status = obj.get("status") or {}
        deployment = str(status.get("jobDeploymentStatus") or "")
        job_status = str(status.get("jobStatus") or "")
        started = parse_time(status.get("startTime"))
        finished = parse_time(status.get("endTime"))
        message = str(status.get("message") or "")
        if deployment == "Complete" or job_status == "SUCCEEDED":
            failed = job_status in ("FAILED", "STOPPED")
            return Observed(
                FAILED if failed else SUCCEEDED,
                self.is_suspended(obj),
                0,
                started,
                finished,
                message,
            )
        if deployment == "Failed" or job_status == "FAILED":
            return Observed(
                FAILED,
                self.is_suspended(obj),
                0,
                started,
                finished,
                message or "The RayJob failed.",
            )
        # Its pods go with the RayCluster; until that is torn down they still run.
        active = 0 if deployment in ("", "New", "Suspended") else 1
        if self.is_suspended(obj):
            return Observed(SUSPENDED, True, active)
        return Observed(RUNNING if deployment == "Running" else STARTING, False, active, started)

    def selector_holds(self, obj: Obj, selector: Mapping[str, str]) -> bool:
        # KubeRay's default submitter has no template of the job's to pin.
        pinned = [t for t in self.templates(obj) if t.spec is not RAY_SUBMITTER]
        return all(selector.items() <= (t.spec.get("nodeSelector") or {}).items() for t in pinned)

    def selector_patch(self, obj: Obj | None, selector: Mapping[str, str]) -> Obj:
        if not selector or obj is None:
            return {}
        cluster = dig(obj, "spec", "rayClusterSpec") or {}
        workers = [_with_selector(g, selector) for g in cluster.get("workerGroupSpecs") or []]
        spec: Obj = {
            "rayClusterSpec": {
                "headGroupSpec": _pod_spec_patch(selector),
                "workerGroupSpecs": workers,
            }
        }
        if dig(obj, "spec", "submitterPodTemplate"):
            spec["submitterPodTemplate"] = {"spec": {"nodeSelector": dict(selector)}}
        return {
            "metadata": {"resourceVersion": dig(obj, "metadata", "resourceVersion")},
            "spec": spec,
        }


class KubeflowJob(Kind):
    """PyTorchJob and TFJob: replica specs in a map, suspend under runPolicy."""

    group, version = "kubeflow.org", "v1"
    suspend_path = ("spec", "runPolicy", "suspend")
    replica_field = ""

    def templates(self, obj: Obj) -> list[PodTemplate]:
        specs = dig(obj, "spec", self.replica_field) or {}
        return [
            PodTemplate(
                str(rtype).lower(), as_int(rs.get("replicas"), 1), dig(rs, "template", "spec") or {}
            )
            for rtype, rs in sorted(specs.items())
            if isinstance(rs, Mapping) and as_int(rs.get("replicas"), 1) > 0
        ]

    def observe(self, obj: Obj) -> Observed:
        true = true_conditions(obj)
        status = obj.get("status") or {}
        replicas = status.get("replicaStatuses") or {}
        active = sum(as_int(r.get("active")) for r in replicas.values() if isinstance(r, Mapping))
        started = parse_time(status.get("startTime"))
        finished = parse_time(status.get("completionTime"))
        if "Succeeded" in true:
            return Observed(SUCCEEDED, self.is_suspended(obj), active, started, finished)
        if "Failed" in true:
            cond = true["Failed"]
            return Observed(
                FAILED,
                self.is_suspended(obj),
                active,
                started,
                finished or parse_time(cond.get("lastTransitionTime")),
                str(cond.get("message") or f"The {self.kind} failed."),
            )
        if self.is_suspended(obj):
            return Observed(SUSPENDED, True, active)
        running = "Running" in true or active > 0
        return Observed(RUNNING if running else STARTING, False, active, started)

    def active_deadline(self, obj: Obj) -> float | None:
        value = dig(obj, "spec", "runPolicy", "activeDeadlineSeconds")
        return float(value) if isinstance(value, int | float) and value > 0 else None

    def priority_class(self, obj: Obj) -> str:
        value = dig(obj, "spec", "runPolicy", "schedulingPolicy", "priorityClass")
        return str(value) if value else super().priority_class(obj)

    def selector_patch(self, obj: Obj | None, selector: Mapping[str, str]) -> Obj:
        if not selector or obj is None:
            return {}
        names = list((dig(obj, "spec", self.replica_field) or {}).keys())
        return {"spec": {self.replica_field: {n: _pod_spec_patch(selector) for n in names}}}


class PyTorchJob(KubeflowJob):
    kind, plural = "PyTorchJob", "pytorchjobs"
    replica_field = "pytorchReplicaSpecs"
    # Replica types (Master, Worker, ...) vary: admission reads them before patching.
    admit_reads = True


class TFJob(KubeflowJob):
    kind, plural = "TFJob", "tfjobs"
    replica_field = "tfReplicaSpecs"
    admit_reads = True


class MPIJob(KubeflowJob):
    """Kubeflow's MPIJob v2beta1 (mpi-operator): Launcher and Worker under
    mpiReplicaSpecs, suspend under runPolicy."""

    kind, version, plural = "MPIJob", "v2beta1", "mpijobs"
    replica_field = "mpiReplicaSpecs"
    admit_reads = True


class TrainJob(Kind):
    """Kubeflow Trainer's TrainJob (trainer.kubeflow.org/v1alpha1). Its pods come from the
    training runtime it references; what the queue accounts is the trainer nodes the
    TrainJob itself asks for: ``spec.trainer.numNodes`` (1 when unset) pods of
    ``spec.trainer.resourcesPerNode``. Initializer pods of the runtime are not counted."""

    kind, group, version, plural = "TrainJob", "trainer.kubeflow.org", "v1alpha1", "trainjobs"
    admit_reads = True
    trainer_job = "node"  # the runtime's ReplicatedJob of the trainer nodes

    def templates(self, obj: Obj) -> list[PodTemplate]:
        trainer = dig(obj, "spec", "trainer") or {}
        resources = trainer.get("resourcesPerNode") or {}
        pod: Obj = {"containers": [{"name": "node", "resources": dict(resources)}]}
        for override in self._overrides(obj):
            if override.get("nodeSelector"):
                pod["nodeSelector"] = dict(override["nodeSelector"])
            if override.get("tolerations"):
                pod["tolerations"] = list(override["tolerations"])
        return [PodTemplate(self.trainer_job, max(1, as_int(trainer.get("numNodes"), 1)), pod)]

    def _targets_trainer(self, override: Any) -> bool:
        return isinstance(override, Mapping) and any(
            isinstance(t, Mapping) and t.get("name") == self.trainer_job
            for t in override.get("targetJobs") or []
        )

    def _overrides(self, obj: Obj) -> list[Mapping[str, Any]]:
        return [o for o in dig(obj, "spec", "podSpecOverrides") or [] if self._targets_trainer(o)]

    def observe(self, obj: Obj) -> Observed:
        true = true_conditions(obj)
        jobs = dig(obj, "status", "jobsStatus") or []
        active = sum(as_int(j.get("active")) for j in jobs if isinstance(j, Mapping))
        ready = sum(as_int(j.get("ready")) for j in jobs if isinstance(j, Mapping))
        if "Complete" in true:
            finished = parse_time(true["Complete"].get("lastTransitionTime"))
            return Observed(SUCCEEDED, self.is_suspended(obj), active, None, finished)
        if "Failed" in true:
            cond = true["Failed"]
            return Observed(
                FAILED,
                self.is_suspended(obj),
                active,
                None,
                parse_time(cond.get("lastTransitionTime")),
                str(cond.get("message") or "The TrainJob failed."),
            )
        if self.is_suspended(obj):
            return Observed(SUSPENDED, True, active)
        return Observed(RUNNING if ready or active else STARTING, False, active)

    def selector_patch(self, obj: Obj | None, selector: Mapping[str, str]) -> Obj:
        if not selector or obj is None:
            return {}
        # A list, so the whole list goes back, guarded by the resourceVersion.
        overrides = [copy.deepcopy(dict(o)) for o in dig(obj, "spec", "podSpecOverrides") or []]
        mine = next((o for o in overrides if self._targets_trainer(o)), None)
        if mine is None:
            mine = {"targetJobs": [{"name": self.trainer_job}]}
            overrides.append(mine)
        mine["nodeSelector"] = {**(mine.get("nodeSelector") or {}), **selector}
        return {
            "metadata": {"resourceVersion": dig(obj, "metadata", "resourceVersion")},
            "spec": {"podSpecOverrides": overrides},
        }


KINDS: dict[str, Kind] = {
    k.kind: k for k in (BatchJob(), JobSet(), RayJob(), PyTorchJob(), TFJob(), MPIJob(), TrainJob())
}

# Not jobs, but read (import) and written (status mirroring) through the same layer.
QUEUE_UNITS = ("scheduling.x-k8s.io", "v1alpha1", "queueunits")


def resource_path(
    group: str, version: str, plural: str, namespace: str | None = None, name: str | None = None
) -> str:
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    where = f"/namespaces/{namespace}" if namespace else ""
    return f"{base}{where}/{plural}{'/' + name if name else ''}"


# --- the view: what one refresh saw ------------------------------------------------------


# --- pods and nodes ----------------------------------------------------------------------


def occupying(pod: Obj) -> bool:
    return bool(dig(pod, "spec", "nodeName")) and dig(pod, "status", "phase") not in (
        "Succeeded",
        "Failed",
    )


def controller(obj: Obj) -> Mapping[str, Any] | None:
    for ref in dig(obj, "metadata", "ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller"):
            return ref
    return None


# --- the adapter -------------------------------------------------------------------------


def pod_is_managed(
    pod: Obj, managed: set[str], job_owner: Mapping[str, str], ray_clusters: set[tuple[str, str]]
) -> bool:
    """Pods of managed jobs are accounted by their workloads, not as reserved capacity."""
    owner = controller(pod)
    if owner is not None:
        uid = str(owner.get("uid"))
        if uid in managed or job_owner.get(uid) in managed:
            return True
    cluster = (dig(pod, "metadata", "labels") or {}).get("ray.io/cluster")
    return bool(cluster) and (str(dig(pod, "metadata", "namespace")), str(cluster)) in ray_clusters


def node_info(node: Obj, reserved: Mapping[str, int]) -> NodeInfo:
    meta = node.get("metadata") or {}
    allocatable: dict[str, int] = {}
    for resource, quantity in (dig(node, "status", "allocatable") or {}).items():
        try:
            allocatable[str(resource)] = parse_amount(str(resource), quantity)
        except QuantityError:
            log.warning(
                "node %s: cannot read allocatable %s=%r", meta.get("name"), resource, quantity
            )
    conditions = dig(node, "status", "conditions") or []
    ready = next(
        (
            c.get("status") == "True"
            for c in conditions
            if isinstance(c, Mapping) and c.get("type") == "Ready"
        ),
        True,
    )
    taints = [
        {
            "key": str(t.get("key", "")),
            "value": str(t.get("value", "")),
            "effect": str(t.get("effect", "")),
        }
        for t in dig(node, "spec", "taints") or []
        if isinstance(t, Mapping)
    ]
    return NodeInfo(
        name=str(meta.get("name")),
        allocatable=allocatable,
        reserved=dict(reserved),
        labels=dict(meta.get("labels") or {}),
        taints=taints,
        unschedulable=bool(dig(node, "spec", "unschedulable")) or not ready,
    )
