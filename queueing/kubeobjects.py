"""The Kubernetes objects that configure the queue (issue 12 item 2), as plain data: which
collections hold configuration, what of an object is configuration (and what is the
queue's own write-back), and how the queue marks the ElasticQuotas it writes itself.

Pure: imported by the adapter's config watch and by the import alike.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from queueing import compat

# The ElasticQuotas the queue writes for quotas managed here carry this label: the import
# and the watch leave them alone (they are the product's, not configuration for it).
OWNER_LABEL = "app.kubernetes.io/managed-by"
OWNER = "koord-queue"

# What the queue writes itself, not configuration: the runtime and request annotations on
# ElasticQuotas (quotawriteback), and koord-queue's/kube-queue's available-queue family on
# Namespaces (namespacequeues; the import reads only the available-quota family).
RUNTIME_ANNOTATION = "quota.scheduling.koordinator.sh/runtime"
REQUEST_ANNOTATION = "quota.scheduling.koordinator.sh/request"
NAMESPACE_QUEUE_ANNOTATIONS = frozenset(
    p + k for k in compat.NAMESPACE_QUEUES_KEYS for p in compat.ANNOTATION_PREFIXES
)
OWN_ANNOTATIONS = frozenset({RUNTIME_ANNOTATION, REQUEST_ANNOTATION}) | NAMESPACE_QUEUE_ANNOTATIONS

ELASTIC_QUOTAS = ("scheduling.sigs.k8s.io", "v1alpha1", "elasticquotas")
# koord-queue's and ACK's tree form: one object holding the whole tree (spec.root with
# children), usually in kube-system.
ELASTIC_QUOTA_TREES = ("scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees")
QUEUES = ("scheduling.x-k8s.io", "v1alpha1", "queues")
RESOURCE_QUOTAS = ("", "v1", "resourcequotas")
NAMESPACES = ("", "v1", "namespaces")


class Collection(NamedTuple):
    kind: str
    group: str
    version: str
    plural: str
    # True: read across all namespaces at once; False: in the managed namespaces only.
    cluster_wide: bool
    # A custom kind the cluster may not serve (no CRD): an empty collection then.
    optional: bool


CONFIG_COLLECTIONS = (
    Collection("ElasticQuota", *ELASTIC_QUOTAS, cluster_wide=True, optional=True),
    Collection("ElasticQuotaTree", *ELASTIC_QUOTA_TREES, cluster_wide=True, optional=True),
    Collection("Queue", *QUEUES, cluster_wide=True, optional=True),
    Collection("ResourceQuota", *RESOURCE_QUOTAS, cluster_wide=False, optional=False),
    Collection("Namespace", *NAMESPACES, cluster_wide=True, optional=False),
)


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def is_ours(obj: dict[str, Any]) -> bool:
    """An object the queue wrote for a quota managed here."""
    return (_meta(obj).get("labels") or {}).get(OWNER_LABEL) == OWNER


def said(obj: dict[str, Any]) -> list[Any]:
    """What an object says as configuration: its name, spec, labels and annotations, but
    not its resourceVersion, status or the queue's own write-back annotations (which move
    on every runtime change and must not read as an edit)."""
    meta = _meta(obj)
    notes = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in OWN_ANNOTATIONS}
    return [
        meta.get("namespace"),
        meta.get("name"),
        obj.get("spec"),
        meta.get("labels"),
        notes,
    ]
