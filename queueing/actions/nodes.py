"""Nodes of the simulated cluster (a real cluster's nodes are the cluster's to change)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings
from django.db import transaction

from queueing import nodeview
from queueing.actions.base import Actor, audit, publish, resources_or_error, snapshot_of
from queueing.events import config_message, node_row
from queueing.models import SimNode
from queueing.validation import Errors


@transaction.atomic
def upsert_sim_node(
    actor: Actor,
    *,
    name: str,
    allocatable: Mapping[str, Any],
    reserved: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    unschedulable: bool = False,
) -> SimNode:
    """Create or reshape a node of the simulated cluster."""
    errors = Errors()
    alloc = resources_or_error(errors, "allocatable", allocatable)
    res = resources_or_error(errors, "reserved", reserved or {})
    for resource, amount in res.items():
        if amount > alloc.get(resource, 0):
            errors.add("reserved", f"reserved {resource} is more than the node has.")
    for taint in taints:
        if (
            not isinstance(taint, Mapping)
            or not taint.get("key")
            or taint.get("effect")
            not in (
                "NoSchedule",
                "PreferNoSchedule",
                "NoExecute",
            )
        ):
            errors.add("taints", f"{taint!r} is not a taint (key, value, effect).")
    errors.raise_if_any()
    node = SimNode.objects.select_for_update().filter(name=name).first()
    before = snapshot_of(node) if node else None
    if node is None:
        node = SimNode(name=name)
    node.allocatable = alloc
    node.reserved = res
    node.labels = dict(labels or {})
    node.taints = [dict(t) for t in taints]
    node.unschedulable = unschedulable
    node.save()
    audit(
        actor,
        "simnode.update" if before else "simnode.create",
        node,
        before=before,
        after=snapshot_of(node),
    )
    publish(None, config_message("nodes", None, [node_row(node)]))
    _follow_node_view()
    return node


@transaction.atomic
def delete_sim_node(actor: Actor, node: SimNode) -> None:
    audit(actor, "simnode.delete", node, before=snapshot_of(node))
    publish(None, config_message("nodes", None, removed=[node.name]))
    node.delete()
    _follow_node_view()


def _follow_node_view() -> None:
    """In simulated mode these rows are the cluster: the node view that pages and the
    API read follows at once instead of at the next cycle (queueing.nodeview)."""
    if settings.KQ_CLUSTER == "simulated":
        from queueing.cluster.simulated import SimulatedCluster

        # The action's own ``nodes`` message already announces the change.
        nodeview.persist(SimulatedCluster().nodes(), announce=False)
