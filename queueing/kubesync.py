"""What the sync does for Kubernetes after its own writes (one call from sync_cluster):
tell the jobs' stories as Events, and write the runtime quota back to the ElasticQuotas.
Each part is best-effort and rate-limited on its own; neither can fail a sync."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from queueing import kubeevents, quotawriteback


def after_sync(cluster: Any, now: datetime) -> None:
    kubeevents.publish(cluster, now)
    quotawriteback.publish(cluster)
