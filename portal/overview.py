"""The cluster overview: one read model for the cluster page and GET /api/v1/cluster/.

Both show the same numbers because both come from here: the nodes (one source,
``node_source``), capacity totals over the schedulable nodes, and the quota tree with
used, pending and runtime quota per quota (``queries.quota_tree``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from portal import queries
from queueing.cluster import get_cluster
from queueing.cluster.base import ClusterError, NodeInfo
from queueing.models import Quota


def node_source() -> list[NodeInfo]:
    """The nodes every overview shows. One call, so that reading a persisted node view
    instead of the cluster adapter is a change of this line alone."""
    return list(get_cluster().nodes())


@dataclass
class ClusterOverview:
    nodes: list[NodeInfo]
    node_error: str  # why there are no nodes to show, if the source failed
    capacity: dict[str, Any]
    quotas: list[queries.QuotaRow]
    last_cycle: datetime | None


def capacity(nodes: Sequence[NodeInfo], used: dict[str, int]) -> dict[str, Any]:
    """Totals over the schedulable nodes; ``free`` is what neither others reserve nor
    workloads of the queue hold."""
    allocatable: dict[str, int] = {}
    reserved: dict[str, int] = {}
    schedulable = [node for node in nodes if not node.unschedulable]
    for node in schedulable:
        queries.add_into(allocatable, node.allocatable)
        queries.add_into(reserved, node.reserved)
    free = {
        resource: max(0, amount - reserved.get(resource, 0) - used.get(resource, 0))
        for resource, amount in allocatable.items()
    }
    return {
        "nodes": len(nodes),
        "schedulable_nodes": len(schedulable),
        "allocatable": allocatable,
        "reserved": reserved,
        "used": used,
        "free": free,
    }


def cluster_overview(quotas: Sequence[Quota]) -> ClusterOverview:
    """The overview of ``quotas`` (what the reader may see) and the whole cluster."""
    node_error = ""
    try:
        nodes = sorted(node_source(), key=lambda n: n.name)
    except ClusterError as exc:
        nodes, node_error = [], str(exc)
    totals = queries.live_totals()
    return ClusterOverview(
        nodes=nodes,
        node_error=node_error,
        capacity=capacity(nodes, totals.cluster_used()),
        quotas=queries.quota_tree(quotas, totals),
        last_cycle=queries.last_cycle_at(),
    )
