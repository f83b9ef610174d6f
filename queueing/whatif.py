"""What-if: the engine run on a modified snapshot, nothing saved.

Before an admin saves a quota or weight change, show how runtime quotas, positions and
ETAs of the waiting workloads would change. The proposal is validated exactly as
``actions.update_quota`` would validate it; the current state and the proposed state
are each run through one engine cycle, and the two results are compared.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from queueing import nodeview
from queueing.actions import new_quota_proposal, quota_proposal
from queueing.choices import WAITING_PHASES
from queueing.engine import run_cycle
from queueing.engine.resources import Resources
from queueing.engine.types import CycleResult, QuotaNode, Snapshot
from queueing.events import iso
from queueing.models import Quota, Tenant
from queueing.quantities import format_resources
from queueing.state import SnapshotIndex, build_snapshot, from_epoch
from queueing.validation import QuotaProposal

MAX_WORKLOADS = 200


@dataclass
class Preview:
    quotas: list[dict[str, Any]] = field(default_factory=list)
    workloads: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    # Runtime quotas that would change if every leaf quota asked for all it may hold:
    # what a weight or max edit does once quotas compete, when it changes nothing now.
    full_demand: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "quotas": self.quotas,
            "workloads": self.workloads,
            "summary": self.summary,
            "full_demand": self.full_demand,
        }


def root_of(quota: Quota) -> Quota:
    node = quota
    seen = {node.pk}
    while node.parent_id is not None:
        parent = Quota.objects.get(pk=node.parent_id)
        if parent.pk in seen:
            break
        seen.add(parent.pk)
        node = parent
    return node


def modified(snapshot: Snapshot, proposal: QuotaProposal) -> Snapshot:
    quotas = tuple(
        dataclasses.replace(
            node,
            min=Resources(proposal.min),
            max=dict(proposal.max),
            shared_weight=dict(proposal.shared_weight),
            allow_lent=proposal.allow_lent,
            fair_weight=proposal.fair_weight,
        )
        if node.name == proposal.name
        else node
        for node in snapshot.quotas
    )
    return dataclasses.replace(snapshot, quotas=quotas)


def under_full_demand(snapshot: Snapshot) -> Snapshot:
    """The snapshot with no workloads and every leaf quota demanding its ceiling (its own
    max, else the nearest ancestor's, else the root's capacity): runtime quotas are then
    water-filled as they would be under contention."""
    nodes = {node.name: node for node in snapshot.quotas}
    parents = {node.parent for node in snapshot.quotas if node.parent}
    resources: set[str] = set()
    for node in snapshot.quotas:
        resources |= set(node.min) | set(node.max)
    capacity: dict[str, int] = {}
    for spec in snapshot.nodes:
        for resource, amount in spec.allocatable.items():
            capacity[resource] = capacity.get(resource, 0) + int(amount)

    def ceiling(name: str, resource: str) -> int:
        node: QuotaNode | None = nodes.get(name)
        seen: set[str] = set()
        while node is not None and node.name not in seen:
            seen.add(node.name)
            if resource in node.max:
                return int(node.max[resource])
            node = nodes.get(node.parent) if node.parent else None
        return capacity.get(resource, 0)

    demand = {
        node.name: {resource: ceiling(node.name, resource) for resource in sorted(resources)}
        for node in snapshot.quotas
        if node.name not in parents
    }
    return dataclasses.replace(snapshot, workloads=(), unlisted_demand=demand)


def _runtime_changes(before: Snapshot, after: Snapshot) -> list[dict[str, Any]]:
    old, new = run_cycle(under_full_demand(before)), run_cycle(under_full_demand(after))
    changes = []
    for name in sorted(set(old.runtime_quota) | set(new.runtime_quota)):
        a = format_resources(old.runtime_quota.get(name, Resources({})))
        b = format_resources(new.runtime_quota.get(name, Resources({})))
        if a != b:
            changes.append({"name": name, "before": a, "after": b})
    return changes


def preview_quota_change(
    quota: Quota, changes: Mapping[str, Any], *, now: datetime | None = None
) -> Preview:
    """Predict the effect of editing ``quota``; raises ValidationError like update_quota."""
    proposal = quota_proposal(quota, {k: v for k, v in changes.items() if k != "version"})
    root = root_of(quota)
    snapshot, index = build_snapshot(root.name, nodes=nodeview.read(), now=now)
    proposed = modified(snapshot, proposal)
    preview = compare(run_cycle(snapshot), run_cycle(proposed), snapshot, proposed, index)
    preview.full_demand = _runtime_changes(snapshot, proposed)
    return preview


def preview_quota_create(
    *,
    name: str,
    tenant: Tenant | None,
    parent: Quota,
    min: Mapping[str, Any] | None = None,
    max: Mapping[str, Any] | None = None,
    shared_weight: Mapping[str, Any] | None = None,
    allow_lent: bool = True,
    namespaces: Sequence[str] = (),
    fair_weight: Any = 1.0,
    now: datetime | None = None,
) -> Preview:
    """Predict the effect of adding a quota under ``parent``; raises ValidationError like
    create_quota. A new quota has no workloads yet: it moves others' runtime quotas when
    it keeps its min (``allow_lent`` off) or changes how the parent's capacity divides."""
    proposal = new_quota_proposal(
        name=name,
        tenant=tenant,
        parent=parent,
        min=min,
        max=max,
        shared_weight=shared_weight,
        allow_lent=allow_lent,
        namespaces=namespaces,
        fair_weight=fair_weight,
    )
    root = root_of(parent)
    snapshot, index = build_snapshot(root.name, nodes=nodeview.read(), now=now)
    added = QuotaNode(
        name=proposal.name,
        parent=parent.name,
        min=Resources(proposal.min),
        max=dict(proposal.max),
        shared_weight=dict(proposal.shared_weight),
        allow_lent=proposal.allow_lent,
        fair_weight=proposal.fair_weight,
    )
    proposed = dataclasses.replace(snapshot, quotas=(*snapshot.quotas, added))
    preview = compare(run_cycle(snapshot), run_cycle(proposed), snapshot, proposed, index)
    preview.full_demand = _runtime_changes(snapshot, proposed)
    return preview


def _quota_state(
    result: CycleResult, name: str, mins: Mapping[str, int], maxs: Mapping[str, int]
) -> dict:
    return {
        "runtime": format_resources(result.runtime_quota.get(name, Resources({}))),
        "used": format_resources(result.used.get(name, Resources({}))),
        "min": format_resources(mins),
        "max": format_resources(maxs),
    }


def _workload_state(result: CycleResult, workload_id: int, admitted: set[int]) -> dict[str, Any]:
    position = result.positions.get(workload_id)
    eta = result.etas.get(workload_id)
    p50 = from_epoch(eta.p50) if eta else None
    p90 = from_epoch(eta.p90) if eta else None
    return {
        "admitted": workload_id in admitted,
        "position": position.in_queue if position else None,
        "global_position": position.global_ if position else None,
        "eta_p50": iso(p50),
        "eta_p90": iso(p90),
    }


def compare(
    before: CycleResult,
    after: CycleResult,
    snapshot: Snapshot,
    proposed: Snapshot,
    index: SnapshotIndex,
) -> Preview:
    """The differences between two cycle results over the same workloads."""
    preview = Preview()
    old_nodes = {node.name: node for node in snapshot.quotas}
    new_nodes = {node.name: node for node in proposed.quotas}
    for name in sorted(set(old_nodes) | set(new_nodes)):
        old_node, new_node = old_nodes.get(name), new_nodes.get(name)
        old = (
            _quota_state(before, name, old_node.min, old_node.max)
            if old_node
            else {"runtime": {}, "used": {}, "min": {}, "max": {}}
        )
        new = (
            _quota_state(after, name, new_node.min, new_node.max)
            if new_node
            else {"runtime": {}, "used": {}, "min": {}, "max": {}}
        )
        preview.quotas.append({"name": name, "before": old, "after": new, "changed": old != new})

    admitted_before = {a.workload_id for a in before.admissions}
    admitted_after = {a.workload_id for a in after.admissions}
    changed = []
    for workload_id, row in sorted(index.rows.items()):
        if row["phase"] not in WAITING_PHASES:
            continue
        old = _workload_state(before, workload_id, admitted_before)
        new = _workload_state(after, workload_id, admitted_after)
        if old != new:
            changed.append(
                {
                    "id": workload_id,
                    "name": row["name"],
                    "namespace": row["namespace"],
                    "queue": index.queue_names.get(row["queue_id"], ""),
                    "before": old,
                    "after": new,
                }
            )
    preview.workloads = changed[:MAX_WORKLOADS]
    preview.summary = {
        "admitted_before": len(admitted_before),
        "admitted_after": len(admitted_after),
        "preempted_before": len(before.preemptions),
        "preempted_after": len(after.preemptions),
        "changed_workloads": len(changed),
        "shown_workloads": len(preview.workloads),
        "changed_quotas": sum(1 for q in preview.quotas if q["changed"]),
    }
    return preview
