"""kube-queue and koord-queue names: labels, annotations, phases, API groups.

Users migrating from kube-queue (github.com/kube-queue/kube-queue) or Koordinator's
koord-queue keep their manifests: both annotation prefixes are read, both quota labels
are honoured, and phases can be shown under kube-queue's names.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from queueing.choices import Phase

# Labels on a Job (or other kind) that place it.
QUEUE_LABEL = "koord-queue/queue-name"
QUEUE_LABELS = (QUEUE_LABEL, "kube-queue/queue-name")
QUOTA_LABEL = "quota.scheduling.koordinator.sh/name"
# koord-queue reads alibabacloud's label first when a job carries both.
QUOTA_LABELS = (
    "quota.scheduling.alibabacloud.com/name",
    QUOTA_LABEL,
    "alibabacloud.com/quota-name",
)
QUOTA_PARENT_LABEL = "quota.scheduling.koordinator.sh/parent"
QUOTA_IS_PARENT_LABEL = "quota.scheduling.koordinator.sh/is-parent"
QUOTA_IS_ROOT_LABEL = "quota.scheduling.koordinator.sh/is-root"
QUOTA_TREE_ID_LABEL = "quota.scheduling.koordinator.sh/tree-id"
# On a job (or its QueueUnit): "false" keeps it within its quota's min, never a victim.
PREEMPTIBLE_LABEL = "quota.scheduling.koordinator.sh/preemptible"
PREEMPTIBLE_LABELS = (PREEMPTIBLE_LABEL, "quota.scheduling.alibabacloud.com/preemptible")

# kube-queue's way to say "created suspended, wait for the queue", and koord-queue's
# hold on a QueueUnit (a job's annotations are copied to its QueueUnit). Admission
# clears both.
SUSPEND_ANNOTATION = "scheduling.x-k8s.io/suspend"
QUEUE_SUSPEND_ANNOTATION = "queue-suspend"
HOLD_ANNOTATIONS = (SUSPEND_ANNOTATION, QUEUE_SUSPEND_ANNOTATION)
ANNOTATION_PREFIXES = ("koord-queue/", "kube-queue/")
PRIORITY_KEY = "priority"
RUNTIME_KEY = "expected-runtime-seconds"
QUEUE_KEY = "queue-name"
# A QueueUnit's spec.priorityClassName and spec.maximumExecutionTimeSeconds, carried to
# its job under these keys (and readable there when set by hand).
PRIORITY_CLASS_KEY = "priority-class-name"
MAX_EXEC_KEY = "maximum-execution-time-seconds"
# Kueue's label for the same limit.
KUEUE_MAX_EXEC_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
# Written on jobs as koord-queue's job extensions write them (both prefixes).
ENQUEUED_KEY = "job-has-enqueued"
ENQUEUE_TIMESTAMP_KEY = "job-enqueue-timestamp"
DEQUEUE_TIMESTAMP_KEY = "job-dequeue-timestamp"
# Routing annotations on Queues and Namespaces (koord-queue's elasticquota tree plugin).
QUOTA_FULLNAME_KEY = "quota-fullname"  # on a Queue: the quota it was created for
PARENT_QUOTA_FULLNAME_KEY = "parent-quota-fullname"
QUEUE_QUOTAS_KEYS = ("available-quota-in-queue", "available-quota")  # on a Queue
NAMESPACE_QUOTAS_KEYS = ("available-quota-in-namespace", "available-quota")  # on a Namespace
NAMESPACE_QUEUES_KEYS = ("available-queue-in-namespace", "available-queue")  # on a Namespace
# kube-queue's implicit queue: a QueueUnit naming it means "the quota's own queue".
KUBE_QUEUE_DEFAULT_QUEUE = "default"
# Where koord-queue and kube-queue keep cluster-wide Queues.
QUEUE_HOME_NAMESPACES = ("koord-queue", "kube-queue")

# Written by the Kubernetes adapter. A job it admitted stays managed after it is
# unsuspended; a create is recognised after an ambiguous failure by its id label.
MANAGED_ANNOTATION = "koord-queue/managed"
CREATE_ID_LABEL = "koord-queue/create-id"

# Go's time.Time.String() layout, which koord-queue parses its timestamps with.
GO_TIME_LAYOUT = "%Y-%m-%d %H:%M:%S"

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


# The same under koord-queue's QueueUnit phases. koord-queue also has Reserved (quota
# held, pods not yet released) and SchedSucceed (every pod bound, not all running);
# the queue has no such states, so they are read but never written.
KOORD_QUEUE_PHASE = {
    Phase.PENDING: "Enqueued",
    Phase.BACKOFF: "SchedFailed",
    Phase.ADMITTED: "SchedReady",
    Phase.RUNNING: "Running",
    Phase.PREEMPTED: "Enqueued",
    Phase.SUCCEEDED: "Succeed",
    Phase.FAILED: "Failed",
    Phase.CANCELLED: "Failed",
}
QUEUE_UNIT_DIALECTS = {"kube-queue": KUBE_QUEUE_PHASE, "koord-queue": KOORD_QUEUE_PHASE}

# QueueUnit names as koord-queue's job extensions make them: ``<job>-<suffix>``
# (a batch Job's QueueUnit has the Job's own name).
QUEUE_UNIT_SUFFIX = {
    "Job": "",
    "TFJob": "tf-qu",
    "PyTorchJob": "py-qu",
    "MPIJob": "mpi-qu",
    "RayJob": "ray-qu",
    "RayCluster": "raycluster-qu",
    "JobSet": "jobset-qu",
    "TrainJob": "trainjob-qu",
}


def kube_queue_phase(phase: str, dialect: str | None = None) -> str:
    """A phase under QueueUnit names: kube-queue's (default) or koord-queue's, as the
    setting ``KQ_QUEUEUNIT_PHASES`` says when ``dialect`` is not given."""
    if dialect is None:
        from django.conf import settings

        dialect = getattr(settings, "KQ_QUEUEUNIT_PHASES", "kube-queue")
    table = QUEUE_UNIT_DIALECTS.get(dialect, KUBE_QUEUE_PHASE)
    return table.get(Phase(phase), phase)


def queue_unit_name(kind: str, job_name: str) -> str:
    suffix = QUEUE_UNIT_SUFFIX.get(kind, f"{kind.lower()}-qu")
    return (f"{job_name}-{suffix}" if suffix else job_name)[:253]


def go_time(moment: datetime) -> str:
    """``moment`` as Go's ``time.Time.String()`` writes it (koord-queue's timestamps)."""
    utc = moment.astimezone(UTC)
    nanos = f"{utc.microsecond * 1000:09d}".rstrip("0")
    return f"{utc:{GO_TIME_LAYOUT}}{'.' + nanos if nanos else ''} +0000 UTC"


def parse_go_time(value: str) -> datetime | None:
    """A timestamp in Go's ``time.Time.String()`` layout (its monotonic part ignored)."""
    parts = value.strip().split(" ")
    if len(parts) < 3:
        return None
    day, clock, offset = parts[0], parts[1], parts[2]
    whole, _, fraction = clock.partition(".")
    try:
        moment = datetime.strptime(f"{day} {whole} {offset}", f"{GO_TIME_LAYOUT} %z")
    except ValueError:
        return None
    micros = int((fraction + "000000")[:6]) if fraction.isdigit() else 0
    return moment.replace(microsecond=micros)


def stamp_annotations(key: str, value: str) -> dict[str, str]:
    """``koord-queue/<key>`` and ``kube-queue/<key>``: both projects' readers find it."""
    return {prefix + key: value for prefix in ANNOTATION_PREFIXES}


def split_list(value: str | None) -> list[str]:
    """koord-queue's comma-separated lists ("a,b", "*"); blanks dropped."""
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def first_annotation(annotations: Mapping[str, str], keys: tuple[str, ...]) -> str | None:
    """The first of ``keys`` present under either prefix (koord-queue's first)."""
    for key in keys:
        value = annotation(annotations, key)
        if value is not None:
            return value
    return None


def quota_from_fullname(fullname: str) -> str:
    """``root/research/team-a`` -> ``team-a`` (koord-queue names quotas by their path)."""
    return fullname.rstrip("/").rsplit("/", 1)[-1]


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


def is_preemptible(labels: Mapping[str, str]) -> bool:
    """koord-queue's ``IsJobPreemptible``: either preemptible label ``"true"``, or
    neither set, makes a job preemptible; any other value (``"false"``) does not."""
    values = [labels.get(key) for key in PREEMPTIBLE_LABELS]
    return "true" in values or not any(values)


def held(annotations: Mapping[str, str]) -> bool:
    """kube-queue's suspend annotation or koord-queue's queue-suspend says "wait"."""
    return any(annotations.get(key, "").lower() == "true" for key in HOLD_ANNOTATIONS)


def wants_queueing(annotations: Mapping[str, str], suspended: bool) -> bool:
    """kube-queue manages a job that is suspended or carries its suspend annotation."""
    return suspended or held(annotations)


def is_managed(labels: Mapping[str, str], annotations: Mapping[str, str], suspended: bool) -> bool:
    """Whether the queue owns a job: it names a queue or quota, asks for queueing, was
    admitted by us before, or is suspended (kube-queue: "created suspended")."""
    return bool(
        suspended
        or first_label(labels, QUEUE_LABELS)
        or first_label(labels, QUOTA_LABELS)
        or annotation(annotations, QUEUE_KEY)
        or held(annotations)
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


def max_execution_s(labels: Mapping[str, str], annotations: Mapping[str, str]) -> int | None:
    """The running time limit of a job: ``koord-queue/maximum-execution-time-seconds``
    (or kube-queue's, or a QueueUnit's ``spec.maximumExecutionTimeSeconds``), or Kueue's
    ``kueue.x-k8s.io/max-exec-time-seconds`` label; a positive whole number of seconds."""
    value = annotation(annotations, MAX_EXEC_KEY) or labels.get(KUEUE_MAX_EXEC_LABEL)
    if value is None:
        return None
    try:
        seconds = int(str(value).strip())
    except ValueError:
        return None
    return seconds if seconds > 0 else None
