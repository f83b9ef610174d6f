"""ElasticQuota objects the queue writes for quotas managed here (issue 12 item 2), so
that Koordinator's scheduler enforces the same tree: list, create, merge-patch, delete.
What to write is decided by ``queueing.kubequotas``; this only talks to the API server.
Each write is idempotent: a create that finds the object made meanwhile patches it, a
delete of a missing object is done."""

from __future__ import annotations

from typing import Any

from queueing import kubeobjects
from queueing.cluster.kubernetes.client import MERGE_PATCH, ApiCallError, Obj, Rest
from queueing.cluster.kubernetes.kinds import resource_path

GROUP, VERSION, PLURAL = kubeobjects.ELASTIC_QUOTAS


class ElasticQuotaObjects:
    def __init__(self, rest: Rest) -> None:
        self.rest = rest

    def list_all(self) -> list[Obj]:
        """Every ElasticQuota of the cluster (ours and the others: names are one space
        for Koordinator); none when the CRD is not installed."""
        try:
            items, _ = self.rest.list_all(resource_path(GROUP, VERSION, PLURAL))
        except ApiCallError as err:
            if err.status == 404:
                return []
            raise err.to_cluster_error("listing elasticquotas failed") from err
        return items

    def create(self, obj: Obj) -> None:
        namespace = str(obj["metadata"]["namespace"])
        path = resource_path(GROUP, VERSION, PLURAL, namespace)
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ElasticQuota", **obj}
        try:
            self.rest.once("POST", path, body=body)
        except ApiCallError as err:
            if err.status == 409:  # made meanwhile (a lost answer, another worker)
                self.patch(namespace, str(obj["metadata"]["name"]), _as_patch(obj))
                return
            self.rest.count("create", err)
            name = obj["metadata"]["name"]
            raise err.to_cluster_error(f"creating elasticquota {namespace}/{name}") from err

    def patch(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        try:
            self.rest.call(
                "patch",
                "PATCH",
                resource_path(GROUP, VERSION, PLURAL, namespace, name),
                body=patch,
                content_type=MERGE_PATCH,
            )
        except ApiCallError as err:
            raise err.to_cluster_error(f"patching elasticquota {namespace}/{name}") from err

    def delete(self, namespace: str, name: str) -> None:
        try:
            self.rest.call(
                "delete", "DELETE", resource_path(GROUP, VERSION, PLURAL, namespace, name)
            )
        except ApiCallError as err:
            if err.status == 404:
                return
            raise err.to_cluster_error(f"deleting elasticquota {namespace}/{name}") from err


def _as_patch(obj: Obj) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {
        "metadata": {
            "labels": meta.get("labels") or {},
            "annotations": meta.get("annotations") or {},
        },
        "spec": obj.get("spec") or {},
    }
