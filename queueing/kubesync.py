"""What the sync does for Kubernetes after its own writes (one call from sync_cluster):
apply changed configuration objects (ElasticQuotas, Queues), stop workloads past their
running time limit, tell the jobs' stories as Events, and
write the runtime quota back to the ElasticQuotas and the available queues to the
Namespaces. Each part is best-effort and
rate-limited on its own; none can fail a sync."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from queueing import kubeconfig, kubeevents, kubequotas, maxexec, namespacequeues, quotawriteback

log = logging.getLogger(__name__)


def after_sync(cluster: Any, now: datetime) -> None:
    try:
        kubeconfig.sync_config(cluster)
    except Exception:  # the cluster or a refused item: the next look tries again
        log.exception("could not apply the configuration objects of the cluster")
    try:
        maxexec.enforce(now)
    except Exception:  # the next sync checks again
        log.exception("could not enforce maximum execution times")
    kubeevents.publish(cluster, now)
    kubequotas.publish(cluster)  # the quotas managed here, as ElasticQuotas
    quotawriteback.publish(cluster)
    namespacequeues.publish(cluster)
