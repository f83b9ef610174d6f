"""Cluster adapters behind one protocol (queueing.cluster.base.Cluster)."""

from __future__ import annotations

import threading

from django.conf import settings

from queueing.cluster.base import Cluster

_lock = threading.Lock()
_cluster: Cluster | None = None


def get_cluster() -> Cluster:
    """The process-wide adapter for the configured mode (KQ_CLUSTER)."""
    global _cluster
    with _lock:
        if _cluster is None:
            if settings.KQ_CLUSTER == "kubernetes":
                from queueing.cluster.kubernetes import KubernetesCluster
                from queueing.watch import wake_on_own_informers

                _cluster = KubernetesCluster.from_settings()
                wake_on_own_informers(_cluster)
            else:
                from queueing.cluster.simulated import SimulatedCluster

                _cluster = SimulatedCluster()
        return _cluster


def set_cluster(cluster: Cluster | None) -> None:
    """Replace the adapter (tests inject a clocked simulated cluster or a fake API)."""
    global _cluster
    with _lock:
        _cluster = cluster
