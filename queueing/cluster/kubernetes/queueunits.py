"""The QueueUnit mirror: kube-queue's ``scheduling.x-k8s.io/v1alpha1`` QueueUnits read
as hints (the queue and priority of their job) and written back with the queue's phase,
so ``kubectl get queueunits`` and kube-queue's tooling keep working after a migration.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from queueing import compat
from queueing.cluster.base import JobInfo, JobKey
from queueing.cluster.kubernetes.client import MERGE_PATCH, ApiCallError, Obj, Rest
from queueing.cluster.kubernetes.kinds import QUEUE_UNITS, dig, resource_path
from queueing.quantities import format_amount

if TYPE_CHECKING:
    from queueing.cluster.kubernetes.reader import Reader


def consumer_key(unit: Obj) -> JobKey:
    """(kind, namespace, name) of the job a QueueUnit stands for."""
    return (
        str(dig(unit, "spec", "consumerRef", "kind")),
        str(dig(unit, "spec", "consumerRef", "namespace") or dig(unit, "metadata", "namespace")),
        str(dig(unit, "spec", "consumerRef", "name")),
    )


class QueueUnitMirror:
    """Writes queue phases into QueueUnits, creating the missing ones."""

    def __init__(self, rest: Rest, reader: Reader) -> None:
        self.rest = rest
        self.reader = reader

    def mirror(self, phases: Mapping[JobKey, tuple[str, str]]) -> int:
        """Write kube-queue phases into QueueUnits so ``kubectl get queueunits`` keeps
        working: ``phases`` maps (kind, namespace, name) of a job to (phase, message).
        Creates the QueueUnit of a managed job that has none. Returns objects written."""
        group, version, plural = QUEUE_UNITS
        # Listed with the jobs, at the start of this sync.
        units = {consumer_key(u): u for u in self.reader.queue_units()}
        jobs = {(j.ref.kind, j.ref.namespace, j.ref.name): j for j in self.reader.jobs()}
        written = 0
        for key, (phase, message) in phases.items():
            unit = units.get(key)
            try:
                if unit is None:
                    job = jobs.get(key)
                    if job is None:
                        continue
                    unit = self.rest.call(
                        "create",
                        "POST",
                        resource_path(group, version, plural, key[1]),
                        body=queue_unit_for(job),
                    )
                    written += 1
                if (
                    dig(unit, "status", "phase") == phase
                    and dig(unit, "status", "message") == message
                ):
                    continue
                self.rest.call(
                    "patch",
                    "PATCH",
                    resource_path(
                        group, version, plural, key[1], str(dig(unit, "metadata", "name"))
                    )
                    + "/status",
                    body={
                        "status": {
                            "phase": phase,
                            "message": message,
                            "conditions": admitted_conditions(unit, phase, message),
                        }
                    },
                    content_type=MERGE_PATCH,
                )
                written += 1
            except ApiCallError as err:
                if err.status in (404, 409):
                    continue  # gone meanwhile, or created by someone else: the next sync sees it
                raise err.to_cluster_error("mirroring QueueUnit phases") from err
        return written


# QueueUnit phases (either project's) in which the queue has let the job go.
ADMITTED_PHASES = frozenset(
    {"Dequeued", "Reserved", "SchedReady", "SchedSucceed", "Running", "Succeed"}
)


def admitted_conditions(unit: Obj, phase: str, message: str) -> list[Obj]:
    """The unit's conditions with ``Admitted`` set from ``phase`` (others kept); the
    transition time moves only when the status does, as metav1.Condition wants."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = "True" if phase in ADMITTED_PHASES else "False"
    kept = [
        dict(c)
        for c in dig(unit, "status", "conditions") or []
        if isinstance(c, Mapping) and c.get("type") != "Admitted"
    ]
    old = next(
        (
            c
            for c in dig(unit, "status", "conditions") or []
            if isinstance(c, Mapping) and c.get("type") == "Admitted"
        ),
        None,
    )
    since = old.get("lastTransitionTime") if old and old.get("status") == status else now
    return [
        *kept,
        {
            "type": "Admitted",
            "status": status,
            "reason": phase,
            "message": message,
            "lastTransitionTime": since or now,
        },
    ]


def queue_unit_hints(unit: Obj, annotations: dict[str, str]) -> dict[str, str]:
    """A kube-queue QueueUnit names the queue and priority of its job; use them when the
    job does not say itself."""
    out = dict(annotations)
    queue = dig(unit, "spec", "queue")
    if queue and compat.annotation(out, compat.QUEUE_KEY) is None:
        out["kube-queue/" + compat.QUEUE_KEY] = str(queue)
    priority = dig(unit, "spec", "priority")
    if isinstance(priority, int) and compat.annotation(out, compat.PRIORITY_KEY) is None:
        out["kube-queue/" + compat.PRIORITY_KEY] = str(priority)
    priority_class = dig(unit, "spec", "priorityClassName")
    if priority_class and compat.annotation(out, compat.PRIORITY_CLASS_KEY) is None:
        out["kube-queue/" + compat.PRIORITY_CLASS_KEY] = str(priority_class)
    limit = dig(unit, "spec", "maximumExecutionTimeSeconds")
    if isinstance(limit, int) and limit > 0 and compat.annotation(out, compat.MAX_EXEC_KEY) is None:
        out["kube-queue/" + compat.MAX_EXEC_KEY] = str(limit)
    return out


def queue_unit_for(job: JobInfo) -> Obj:
    total: dict[str, int] = {}
    for pod_set in job.pod_sets:
        for resource, amount in (pod_set.get("requests") or {}).items():
            total[resource] = total.get(resource, 0) + int(amount) * int(pod_set.get("count", 1))
    spec: Obj = {
        "consumerRef": {
            "apiVersion": job.ref.api_version,
            "kind": job.ref.kind,
            "name": job.ref.name,
            "namespace": job.ref.namespace,
        },
        "resource": {name: format_amount(name, amount) for name, amount in sorted(total.items())},
        # koord-queue's podSets: what it computes a unit's request from (PodRequests of
        # each template, times count); the templates carry what the queue accounted.
        "podSets": [_pod_set(pod_set) for pod_set in job.pod_sets],
    }
    queue = compat.queue_name(job.labels, job.annotations)
    if queue:
        spec["queue"] = queue
    if job.priority is not None:
        spec["priority"] = job.priority
    if job.priority_class:
        spec["priorityClassName"] = job.priority_class
    limit = compat.max_execution_s(job.labels, job.annotations)
    if limit is not None:
        spec["maximumExecutionTimeSeconds"] = limit
    name = compat.queue_unit_name(job.ref.kind, job.ref.name)
    return {
        "apiVersion": "/".join(QUEUE_UNITS[:2]),
        "kind": "QueueUnit",
        "metadata": {
            "name": name,
            "namespace": job.ref.namespace,
            "labels": {compat.MANAGED_ANNOTATION: "true"},
            # Deleted with its job by the garbage collector.
            "ownerReferences": [
                {
                    "apiVersion": job.ref.api_version,
                    "kind": job.ref.kind,
                    "name": job.ref.name,
                    "uid": job.ref.uid,
                }
            ],
        },
        "spec": spec,
    }


def _pod_set(pod_set: Mapping[str, Any]) -> Obj:
    requests = {
        name: format_amount(name, int(amount))
        for name, amount in sorted((pod_set.get("requests") or {}).items())
    }
    spec: Obj = {"containers": [{"name": "main", "resources": {"requests": requests}}]}
    if pod_set.get("node_selector"):
        spec["nodeSelector"] = dict(pod_set["node_selector"])
    if pod_set.get("tolerations"):
        spec["tolerations"] = list(pod_set["tolerations"])
    return {
        "name": str(pod_set.get("name") or "main"),
        "count": int(pod_set.get("count", 1)),
        "template": {"spec": spec},
    }
