"""What the queue tells about a job, in a form any cluster adapter can record (the
Kubernetes adapter writes them as core/v1 Events; see queueing/kubeevents.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from queueing.cluster.base import JobRef


@dataclass(frozen=True)
class KubeEvent:
    """One thing to say about a job."""

    ref: JobRef
    reason: str  # CamelCase, short: Queued, Admitted, Preempted, Requeued, Pending…
    message: str
    type: str = "Normal"  # or "Warning"
    at: datetime | None = None
