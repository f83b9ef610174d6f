"""Pod sets read out of a batch/v1 Job manifest, as Kubernetes would size its pods.

A pod's request per resource is the larger of the sum over its containers and the
largest init container, plus the pod overhead; a container without a request for a
resource it limits requests its limit (the API server's defaulting). The pod set has
``parallelism`` pods (default 1). Amounts come back as quantity strings in canonical
spelling, ready for ``actions.parse_pod_sets``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from queueing.quantities import QuantityError, format_amount, parse_resources


class ManifestError(ValueError):
    """A manifest this module cannot read; the message says where."""


def _container_requests(container: Any, where: str) -> dict[str, int]:
    if not isinstance(container, Mapping):
        raise ManifestError(f"{where} must be an object.")
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise ManifestError(f"{where}.resources must be an object.")
    try:
        limits = parse_resources(resources.get("limits") or {})
        requests = parse_resources(resources.get("requests") or {})
    except QuantityError as exc:
        raise ManifestError(f"{where}.resources: {exc}") from exc
    return {**limits, **requests}


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, int]:
    """The effective per-pod request of a pod spec, in canonical units."""
    containers = pod_spec.get("containers") or []
    init_containers = pod_spec.get("initContainers") or []
    if not isinstance(containers, list) or not isinstance(init_containers, list):
        raise ManifestError("containers and initContainers must be lists.")
    total: dict[str, int] = {}
    for index, container in enumerate(containers):
        for resource, amount in _container_requests(container, f"containers[{index}]").items():
            total[resource] = total.get(resource, 0) + amount
    for index, container in enumerate(init_containers):
        for resource, amount in _container_requests(container, f"initContainers[{index}]").items():
            total[resource] = max(total.get(resource, 0), amount)
    try:
        overhead = parse_resources(pod_spec.get("overhead") or {})
    except QuantityError as exc:
        raise ManifestError(f"overhead: {exc}") from exc
    for resource, amount in overhead.items():
        total[resource] = total.get(resource, 0) + amount
    return total


def pod_sets_from_job(manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One pod set for a Job: ``parallelism`` pods of its template."""
    spec = manifest.get("spec")
    if not isinstance(spec, Mapping):
        raise ManifestError("spec must be an object.")
    template = spec.get("template")
    if not isinstance(template, Mapping) or not isinstance(template.get("spec"), Mapping):
        raise ManifestError("spec.template.spec must be an object.")
    pod_spec = template["spec"]
    parallelism = spec.get("parallelism", 1)
    if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
        raise ManifestError(f"spec.parallelism must be 1 or more, not {parallelism!r}.")
    requests = pod_requests(pod_spec)
    selector = pod_spec.get("nodeSelector") or {}
    tolerations = pod_spec.get("tolerations") or []
    if not isinstance(selector, Mapping) or not isinstance(tolerations, list):
        raise ManifestError("nodeSelector must be an object and tolerations a list.")
    return [
        {
            "name": "main",
            "count": parallelism,
            "requests": {name: format_amount(name, amount) for name, amount in requests.items()},
            "node_selector": dict(selector),
            "tolerations": list(tolerations),
        }
    ]


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
