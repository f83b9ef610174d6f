"""kube-queue and koord-queue names: labels, annotations, phases, API groups.

Users migrating from kube-queue (github.com/kube-queue/kube-queue) or Koordinator's
koord-queue keep their manifests: both annotation prefixes are read, both quota labels
are honoured, and phases can be shown under kube-queue's names.
"""

from __future__ import annotations

from collections.abc import Mapping

from queueing.choices import Phase

# Labels on a Job (or other kind) that place it.
QUEUE_LABEL = "koord-queue/queue-name"
QUEUE_LABELS = (QUEUE_LABEL, "kube-queue/queue-name")
QUOTA_LABEL = "quota.scheduling.koordinator.sh/name"
QUOTA_LABELS = (QUOTA_LABEL, "alibabacloud.com/quota-name")
QUOTA_PARENT_LABEL = "quota.scheduling.koordinator.sh/parent"
QUOTA_IS_PARENT_LABEL = "quota.scheduling.koordinator.sh/is-parent"

# kube-queue's way to say "created suspended, wait for the queue".
SUSPEND_ANNOTATION = "scheduling.x-k8s.io/suspend"
ANNOTATION_PREFIXES = ("koord-queue/", "kube-queue/")
PRIORITY_KEY = "priority"
RUNTIME_KEY = "expected-runtime-seconds"
QUEUE_KEY = "queue-name"

# Written by the Kubernetes adapter. A job it admitted stays managed after it is
# unsuspended; a create is recognised after an ambiguous failure by its id label.
MANAGED_ANNOTATION = "koord-queue/managed"
CREATE_ID_LABEL = "koord-queue/create-id"

KUBE_QUEUE_GROUP = "scheduling.x-k8s.io"
KUBE_QUEUE_VERSION = "v1alpha1"
ELASTIC_QUOTA_GROUP = "scheduling.sigs.k8s.io"
ELASTIC_QUOTA_VERSION = "v1alpha1"

# Koordinator's ElasticQuota extensions (labels and annotations on the object).
QUOTA_SHARED_WEIGHT_ANNOTATION = "quota.scheduling.koordinator.sh/shared-weight"
QUOTA_NAMESPACES_ANNOTATION = "quota.scheduling.koordinator.sh/namespaces"
QUOTA_ALLOW_LENT_LABEL = "quota.scheduling.koordinator.sh/allow-lent-resource"
# Koordinator's own quotas: its implicit root and the quotas it keeps for system pods.
KOORDINATOR_ROOT_QUOTAS = ("root", "koordinator-root-quota")
KOORDINATOR_SYSTEM_QUOTAS = ("koordinator-system-quota", "koordinator-default-quota")

# Our phases under kube-queue's QueueUnit names.
KUBE_QUEUE_PHASE = {
    Phase.PENDING: "Enqueued",
    Phase.BACKOFF: "TimeoutBackoff",
    Phase.ADMITTED: "Dequeued",
    Phase.RUNNING: "Running",
    Phase.PREEMPTED: "Enqueued",
    Phase.SUCCEEDED: "Succeed",
    Phase.FAILED: "Failed",
    Phase.CANCELLED: "Failed",
}


def kube_queue_phase(phase: str) -> str:
    return KUBE_QUEUE_PHASE.get(Phase(phase), phase)


def annotation(annotations: Mapping[str, str], key: str) -> str | None:
    """Read ``koord-queue/<key>``, falling back to ``kube-queue/<key>``."""
    for prefix in ANNOTATION_PREFIXES:
        value = annotations.get(prefix + key)
        if value is not None:
            return value
    return None


def first_label(labels: Mapping[str, str], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        if labels.get(key):
            return labels[key]
    return None


def queue_name(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str | None:
    return first_label(labels, QUEUE_LABELS) or annotation(annotations, QUEUE_KEY)


def quota_name(labels: Mapping[str, str]) -> str | None:
    return first_label(labels, QUOTA_LABELS)


def wants_queueing(annotations: Mapping[str, str], suspended: bool) -> bool:
    """kube-queue manages a job that is suspended or carries its suspend annotation."""
    return suspended or annotations.get(SUSPEND_ANNOTATION, "").lower() == "true"


def is_managed(labels: Mapping[str, str], annotations: Mapping[str, str], suspended: bool) -> bool:
    """Whether the queue owns a job: it names a queue or quota, asks for queueing, was
    admitted by us before, or is suspended (kube-queue: "created suspended")."""
    return bool(
        suspended
        or first_label(labels, QUEUE_LABELS)
        or first_label(labels, QUOTA_LABELS)
        or annotation(annotations, QUEUE_KEY)
        or annotations.get(SUSPEND_ANNOTATION, "").lower() == "true"
        or annotations.get(MANAGED_ANNOTATION) == "true"
    )


def expected_runtime(annotations: Mapping[str, str]) -> float | None:
    """``koord-queue/expected-runtime-seconds`` (or kube-queue's), when a positive number."""
    value = annotation(annotations, RUNTIME_KEY)
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds > 0 else None
