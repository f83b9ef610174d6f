"""Pod sets read out of what a submitter sends: a batch/v1 Job or a pod template.

A pod's request per resource follows the scheduler (and ``KubernetesCluster``, whose
``_check_job_shape`` refuses a Job that disagrees with its workload): the sum of its
containers and sidecars (init containers with ``restartPolicy: Always``), at least the
largest other init container, plus the pod overhead; a container's limits stand in for
requests it does not give (the API server's defaulting). A Job runs
``min(parallelism, completions)`` pods at once (at least 1). Amounts come back as
quantity strings in canonical spelling, ready for ``actions.parse_pod_sets``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from queueing.quantities import QuantityError, format_amount, parse_amount


class ManifestError(ValueError):
    """A manifest this module cannot read; the message says where."""


def _container_requests(container: Any, where: str) -> dict[str, int]:
    if not isinstance(container, Mapping):
        raise ManifestError(f"{where} must be an object.")
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise ManifestError(f"{where}.resources must be an object.")
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    if not isinstance(limits, Mapping) or not isinstance(requests, Mapping):
        raise ManifestError(f"{where}.resources: limits and requests must be maps.")
    try:
        return {str(r): parse_amount(str(r), q) for r, q in {**limits, **requests}.items()}
    except QuantityError as exc:
        raise ManifestError(f"{where}.resources: {exc}") from exc


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, int]:
    """The effective per-pod request of a pod spec, in canonical units (no zeros)."""
    containers = pod_spec.get("containers") or []
    init_containers = pod_spec.get("initContainers") or []
    if not isinstance(containers, list) or not isinstance(init_containers, list):
        raise ManifestError("containers and initContainers must be lists.")
    total: dict[str, int] = {}
    for index, container in enumerate(containers):
        for resource, amount in _container_requests(container, f"containers[{index}]").items():
            total[resource] = total.get(resource, 0) + amount
    init_peak: dict[str, int] = {}
    for index, container in enumerate(init_containers):
        amounts = _container_requests(container, f"initContainers[{index}]")
        sidecar = container.get("restartPolicy") == "Always"  # runs alongside the rest
        for resource, amount in amounts.items():
            if sidecar:
                total[resource] = total.get(resource, 0) + amount
            else:
                init_peak[resource] = max(init_peak.get(resource, 0), amount)
    for resource, amount in init_peak.items():
        total[resource] = max(total.get(resource, 0), amount)
    overhead = pod_spec.get("overhead") or {}
    if not isinstance(overhead, Mapping):
        raise ManifestError("overhead must be a map.")
    try:
        for resource, quantity in overhead.items():
            total[str(resource)] = total.get(str(resource), 0) + parse_amount(
                str(resource), quantity
            )
    except QuantityError as exc:
        raise ManifestError(f"overhead: {exc}") from exc
    return {resource: amount for resource, amount in total.items() if amount}


def _pod_set(pod_spec: Any, count: int) -> dict[str, Any]:
    if not isinstance(pod_spec, Mapping):
        raise ManifestError("the pod template's spec must be an object.")
    requests = pod_requests(pod_spec)
    selector = pod_spec.get("nodeSelector") or {}
    tolerations = pod_spec.get("tolerations") or []
    if not isinstance(selector, Mapping) or not isinstance(tolerations, list):
        raise ManifestError("nodeSelector must be an object and tolerations a list.")
    return {
        "name": "main",
        "count": count,
        "requests": {name: format_amount(name, amount) for name, amount in requests.items()},
        "node_selector": dict(selector),
        "tolerations": list(tolerations),
    }


def job_count(spec: Mapping[str, Any]) -> int:
    """How many pods a Job runs at once: min(parallelism, completions), at least 1."""
    parallelism = spec.get("parallelism", 1)
    completions = spec.get("completions")
    for name, value in (("parallelism", parallelism), ("completions", completions)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0
        ):
            raise ManifestError(f"spec.{name} must be a whole number, not {value!r}.")
    if parallelism is None:
        parallelism = 1
    return max(1, min(parallelism, completions) if completions is not None else parallelism)


def pod_sets_from_job(manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One pod set for a Job: ``job_count`` pods of its template."""
    spec = manifest.get("spec")
    if not isinstance(spec, Mapping):
        raise ManifestError("spec must be an object.")
    template = spec.get("template")
    if not isinstance(template, Mapping):
        raise ManifestError("spec.template must be an object.")
    return [_pod_set(template.get("spec"), job_count(spec))]


def pod_sets_from_template(template: Mapping[str, Any], count: int) -> list[dict[str, Any]]:
    """One pod set of ``count`` pods of a pod template ({"metadata", "spec"})."""
    return [_pod_set(template.get("spec"), count)]


def suspended_job(manifest: Mapping[str, Any], name: str, namespace: str | None) -> dict[str, Any]:
    """A copy of a Job manifest, checked, named and created suspended.

    The name (and the namespace, when given) of the submission win; a manifest that says
    otherwise is refused rather than silently renamed.
    """
    if manifest.get("apiVersion", "batch/v1") != "batch/v1" or manifest.get("kind", "Job") != "Job":
        raise ManifestError("Only batch/v1 Jobs can be submitted this way.")
    job = copy.deepcopy(dict(manifest))
    metadata = job.setdefault("metadata", {})
    if not isinstance(metadata, dict):
        raise ManifestError("metadata must be an object.")
    for key, wanted in (("name", name), ("namespace", namespace)):
        given = metadata.get(key)
        if given is not None and wanted is not None and given != wanted:
            raise ManifestError(f"metadata.{key} is {given!r}, but the workload says {wanted!r}.")
        if wanted is not None:
            metadata[key] = wanted
    job["apiVersion"], job["kind"] = "batch/v1", "Job"
    spec = job.get("spec")
    if not isinstance(spec, dict):
        raise ManifestError("spec must be an object.")
    spec["suspend"] = True
    return job
