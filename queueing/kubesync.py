"""What the sync does for Kubernetes after its own writes (one call from sync_cluster):
apply changed configuration objects (ElasticQuotas, Queues), stop workloads past their
running time limit, tell the jobs' stories as Events, and
write the runtime quota back to the ElasticQuotas and the available queues to the
Namespaces. Each part is best-effort and
rate-limited on its own; none can fail a sync."""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any

from queueing import (
    kubeconfig,
    kubeevents,
    kubequotas,
    maxexec,
    namespacequeues,
    quotawriteback,
    trace,
)

log = logging.getLogger(__name__)


def after_sync(cluster: Any, now: datetime) -> None:
    started = time.perf_counter()
    try:
        kubeconfig.sync_config(cluster)
    except Exception:  # the cluster or a refused item: the next look tries again
        log.exception("could not apply the configuration objects of the cluster")
    try:
        maxexec.enforce(now)
    except Exception:  # the next sync checks again
        log.exception("could not enforce maximum execution times")
    config_done = time.perf_counter()
    events = kubeevents.publish(cluster, now)
    events_done = time.perf_counter()
    kubequotas.publish(cluster)  # the quotas managed here, as ElasticQuotas
    quotawriteback.publish(cluster)
    namespacequeues.publish(cluster)
    trace.mark(
        "after_sync",
        config_ms=round((config_done - started) * 1000, 1),
        events=events,
        events_ms=round((events_done - config_done) * 1000, 1),
        quotas_ms=round((time.perf_counter() - events_done) * 1000, 1),
    )
