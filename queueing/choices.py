"""Choice sets shared by models, forms, serializers and the cluster adapters."""

from django.db import models


class Role(models.TextChoices):
    VIEWER = "viewer", "Viewer"
    MEMBER = "member", "Member"
    ADMIN = "admin", "Admin"


ROLE_RANK = {Role.VIEWER: 1, Role.MEMBER: 2, Role.ADMIN: 3}


class Policy(models.TextChoices):
    PRIORITY = "Priority", "Priority (best effort: skip heads that do not fit)"
    BLOCK = "Block", "Block (strict FIFO: a head that does not fit blocks)"
    INTELLIGENT = "Intelligent", "Intelligent (high priority blocks, low priority may skip)"


# kube-queue manifests say FIFO; it means Block.
POLICY_ALIASES = {"FIFO": Policy.BLOCK, "fifo": Policy.BLOCK}


def normalize_policy(value: str) -> str:
    value = POLICY_ALIASES.get(value, value)
    for choice in Policy:
        if value.lower() == choice.value.lower():
            return choice.value
    raise ValueError(f"{value!r} is not a queue policy; use Priority, Block, Intelligent or FIFO.")


class WithinQuotaPreemption(models.TextChoices):
    NEVER = "Never", "Never"
    LOWER_PRIORITY = "LowerPriority", "Lower priority in the same quota"


class ReclaimPolicy(models.TextChoices):
    NEVER = "Never", "Never"
    LOWER_PRIORITY = "LowerPriority", "Lower priority only"
    ANY = "Any", "Any workload above its quota's share"


class Phase(models.TextChoices):
    PENDING = "Pending", "Pending"
    BACKOFF = "Backoff", "Backoff"
    ADMITTED = "Admitted", "Admitted"
    RUNNING = "Running", "Running"
    PREEMPTED = "Preempted", "Preempted"
    SUCCEEDED = "Succeeded", "Succeeded"
    FAILED = "Failed", "Failed"
    CANCELLED = "Cancelled", "Cancelled"


#: A queue's settings, the columns a cycle reads, an audit snapshot records and a
#: ``queues`` message carries (each adds its own keys around them).
QUEUE_SETTINGS = (
    "policy",
    "priority",
    "priority_threshold",
    "max_depth",
    "preempt_within_quota",
    "reclaim",
    "admission_timeout_s",
    "backoff_base_s",
    "backoff_max_s",
    "backoff_jitter",
    "aging_bound_s",
    "max_execution_s",
)

WAITING_PHASES = (Phase.PENDING, Phase.BACKOFF)
# Phases that hold quota and node capacity. Preempted holds until the cluster confirms
# the job is suspended, so an eviction never overlaps its replacement.
HOLDING_PHASES = (Phase.ADMITTED, Phase.RUNNING, Phase.PREEMPTED)
ACTIVE_PHASES = WAITING_PHASES + HOLDING_PHASES
TERMINAL_PHASES = (Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED)


class Source(models.TextChoices):
    UI = "ui", "Web UI"
    API = "api", "REST API"
    CLUSTER = "cluster", "Cluster sync"
    SYSTEM = "system", "System"


class SimJobState(models.TextChoices):
    SUSPENDED = "Suspended", "Suspended"
    RUNNING = "Running", "Running"
    SUCCEEDED = "Succeeded", "Succeeded"
    FAILED = "Failed", "Failed"


# Koordinator's priority bands, shown by name next to a numeric priority.
PRIORITY_BANDS = (
    ("koord-prod", 9000, 9999),
    ("koord-mid", 7000, 7999),
    ("koord-batch", 5000, 5999),
    ("koord-free", 3000, 3999),
)


def priority_band(priority: int) -> str:
    for name, low, high in PRIORITY_BANDS:
        if low <= priority <= high:
            return name
    return ""
