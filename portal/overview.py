"""The cluster overview: one read model for the cluster page and GET /api/v1/cluster/.

Both show the same numbers because both come from here: the nodes (one source,
``node_source``), capacity totals over the schedulable nodes, and the quota tree with
used, pending and runtime quota per quota (``queries.quota_tree``). The tenant
overview (``tenant_overview``) is built from the same tree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from portal import queries
from queueing import nodeview
from queueing.cluster.base import NodeInfo
from queueing.models import Queue, Quota, Tenant

NO_NODE_VIEW = "No node view yet: no admission cycle has read the cluster's nodes."


def node_source() -> list[NodeInfo]:
    """The nodes every overview shows: the node view the cycle keeps (queueing.nodeview);
    a page or the API never calls the cluster."""
    return nodeview.read()


@dataclass
class ClusterOverview:
    nodes: list[NodeInfo]
    node_error: str  # why there are no nodes to show
    capacity: dict[str, Any]
    quotas: list[queries.QuotaRow]
    last_cycle: datetime | None


def capacity(
    nodes: Sequence[NodeInfo],
    used: dict[str, int],
    kept: Mapping[str, Mapping[str, int]] | None = None,
) -> dict[str, Any]:
    """Totals over the schedulable nodes; ``free`` is what neither others reserve nor
    workloads of the queue hold; ``kept``, the part of it the latest cycles kept for
    waiting workloads (``kept`` per node: :func:`queries.kept_on_nodes`), at most
    ``free``."""
    allocatable: dict[str, int] = {}
    reserved: dict[str, int] = {}
    kept_total: dict[str, int] = {}
    schedulable = [node for node in nodes if not node.unschedulable]
    for node in schedulable:
        queries.add_into(allocatable, node.allocatable)
        queries.add_into(reserved, node.reserved)
        queries.add_into(kept_total, (kept or {}).get(node.name))
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
        "kept": {
            resource: min(amount, free.get(resource, 0))
            for resource, amount in kept_total.items()
            if min(amount, free.get(resource, 0)) > 0
        },
    }


def cluster_overview(
    quotas: Sequence[Quota], latest_holds: list[dict[str, Any]] | None = None
) -> ClusterOverview:
    """The overview of ``quotas`` (what the reader may see) and the whole cluster;
    ``latest_holds``: :func:`queries.latest_holds`, when the caller has read it."""
    nodes = node_source()
    node_error = "" if nodes else NO_NODE_VIEW
    totals = queries.live_totals()
    return ClusterOverview(
        nodes=nodes,
        node_error=node_error,
        capacity=capacity(
            nodes,
            totals.cluster_used(),
            queries.kept_on_nodes(queries.latest_holds() if latest_holds is None else latest_holds),
        ),
        quotas=queries.quota_tree(quotas, totals),
        last_cycle=queries.last_cycle_at(),
    )


@dataclass
class TenantOverview:
    tenant: Tenant
    queues: list[Queue]  # with their counts (queries.queue_counts)
    quotas: list[queries.QuotaRow]  # the tenant's, depth-first
    tops: list[queries.QuotaRow]  # its entitlements: quotas under a parent not its own
    root: Quota | None  # the root of the tree the entitlements hang from
    fair_share: list[dict[str, Any]]

    @property
    def leaves(self) -> list[Quota]:
        return [row.quota for row in self.quotas if not row.children]


def tenant_overview(tenant: Tenant) -> TenantOverview:
    queues = list(queries.queue_counts(Queue.objects.filter(tenant=tenant)))
    every = list(Quota.objects.select_related("parent", "default_queue"))
    by_id = {q.pk: q for q in every}
    mine = queries.quota_tree([q for q in every if q.tenant_id == tenant.pk])
    top_ids = {q.pk for q in queries.tenant_top_quotas(tenant, [r.quota for r in mine])}
    tops = [row for row in mine if row.quota.pk in top_ids]
    root = None
    if tops:
        root = tops[0].quota
        seen = {root.pk}
        while root.parent_id in by_id and root.parent_id not in seen:
            root = by_id[root.parent_id]
            seen.add(root.pk)
    return TenantOverview(
        tenant=tenant,
        queues=queues,
        quotas=mine,
        tops=tops,
        root=root,
        fair_share=queries.fair_share(tops, root),
    )
