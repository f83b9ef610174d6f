"""Quotas: the tree of guaranteed and maximum resources, checked by queueing.validation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from queueing.actions.base import (
    ActionError,
    Actor,
    ConflictError,
    audit,
    check_version,
    publish,
    resources_or_error,
    snapshot_of,
    stale_message,
)
from queueing.actions.kubernetes import refuse_if_kube_managed
from queueing.actions.queues import create_queue
from queueing.events import config_message, quota_row
from queueing.models import Queue, Quota, Tenant, Workload
from queueing.quantities import QuantityError, parse_resources
from queueing.validation import Amounts, Errors, QuotaProposal, validate_quota


def _weights_or_error(errors: Errors, values: Any) -> dict[str, int]:
    if values is None:
        return {}
    if isinstance(values, Amounts):
        return dict(values)
    if not isinstance(values, Mapping):
        errors.add("shared_weight", "shared_weight must be a map of resource name to weight.")
        return {}
    parsed: dict[str, int] = {}
    for resource, weight in values.items():
        try:
            # Weights are relative; they read like the quantities they usually mirror.
            parsed[str(resource)] = parse_resources({resource: weight})[str(resource)]
        except QuantityError as exc:
            errors.add("shared_weight", str(exc))
    return parsed


#: Fair-share weights are relative; past this ratio one quota simply always goes first.
FAIR_WEIGHT_MAX = 1000.0


def fair_weight_or_error(errors: Errors, value: Any) -> float:
    """A quota's fair-share weight: a finite number, 0 < weight <= FAIR_WEIGHT_MAX."""
    if value is None:
        return 1.0
    try:
        if isinstance(value, bool):
            raise TypeError
        weight = float(value)
    except (TypeError, ValueError):
        errors.add("fair_weight", f"fair_weight must be a number, not {value!r}.")
        return 1.0
    if not (0 < weight <= FAIR_WEIGHT_MAX):  # NaN fails both comparisons
        errors.add(
            "fair_weight",
            f"fair_weight must be greater than 0 and at most {FAIR_WEIGHT_MAX:g}, not {value}.",
        )
        return 1.0
    return weight


def _lock_tree(parent_id: int | None) -> None:
    """Serialise edits under one parent so sibling checks cannot race (PostgreSQL)."""
    if parent_id is not None:
        list(Quota.objects.select_for_update().filter(id=parent_id).values_list("id"))


def new_quota_proposal(
    *,
    name: str,
    tenant: Tenant | None,
    parent: Quota | None,
    min: Mapping[str, Any] | None = None,
    max: Mapping[str, Any] | None = None,
    shared_weight: Mapping[str, Any] | None = None,
    allow_lent: bool = True,
    namespaces: Sequence[str] = (),
    fair_weight: Any = 1.0,
) -> QuotaProposal:
    """Parse and validate a new quota; raises ValidationError by field and saves nothing."""
    errors = Errors()
    mins = resources_or_error(errors, "min", min)
    maxs = resources_or_error(errors, "max", max)
    weights = _weights_or_error(errors, shared_weight)
    fair = fair_weight_or_error(errors, fair_weight)
    errors.raise_if_any()
    proposal = QuotaProposal(
        name=name,
        tenant_id=tenant.pk if tenant else None,
        parent_id=parent.pk if parent else None,
        min=mins,
        max=maxs,
        shared_weight=weights,
        allow_lent=allow_lent,
        namespaces=list(namespaces),
        fair_weight=fair,
    )
    validate_quota(proposal)
    return proposal


@transaction.atomic
def create_quota(
    actor: Actor,
    *,
    name: str,
    tenant: Tenant | None,
    parent: Quota | None,
    min: Mapping[str, Any] | None = None,
    max: Mapping[str, Any] | None = None,
    shared_weight: Mapping[str, Any] | None = None,
    allow_lent: bool = True,
    namespaces: Sequence[str] = (),
    default_queue_policy: str = "Priority",
    fair_weight: Any = 1.0,
) -> Quota:
    """Create a quota node; a tenant's quota gets a default queue of its own."""
    _lock_tree(parent.pk if parent else None)
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
    mins, maxs, weights = proposal.min, proposal.max, proposal.shared_weight
    quota = Quota.objects.create(
        name=name,
        tenant=tenant,
        parent=parent,
        min=mins,
        max=maxs,
        shared_weight=weights,
        fair_weight=proposal.fair_weight,
        allow_lent=allow_lent,
        namespaces=list(namespaces),
    )
    if tenant is not None:
        queue_name = name if not Queue.objects.filter(name=name).exists() else f"{name}-default"
        queue = create_queue(actor, tenant=tenant, name=queue_name, policy=default_queue_policy)
        quota.default_queue = queue
        quota.save(update_fields=["default_queue"])
    audit(actor, "quota.create", quota, after=snapshot_of(quota))
    _publish_quota(quota)
    return quota


QUOTA_EDITABLE = (
    "min",
    "max",
    "shared_weight",
    "fair_weight",
    "allow_lent",
    "namespaces",
    "parent",
    "default_queue",
)


def quota_proposal(current: Quota, changes: Mapping[str, Any]) -> QuotaProposal:
    """Parse an edit of ``current`` and validate the result; raises ValidationError by field.

    Saves nothing: update_quota writes the proposal, the what-if preview simulates it.
    """
    unknown = set(changes) - set(QUOTA_EDITABLE)
    if unknown:
        raise ActionError(f"Quota field(s) {', '.join(sorted(unknown))} cannot be changed.")
    errors = Errors()
    mins = resources_or_error(errors, "min", changes["min"]) if "min" in changes else current.min
    maxs = resources_or_error(errors, "max", changes["max"]) if "max" in changes else current.max
    weights = (
        _weights_or_error(errors, changes["shared_weight"])
        if "shared_weight" in changes
        else current.shared_weight
    )
    fair = (
        fair_weight_or_error(errors, changes["fair_weight"])
        if "fair_weight" in changes
        else current.fair_weight
    )
    errors.raise_if_any()
    parent = changes.get("parent", current.parent)
    proposal = QuotaProposal(
        name=current.name,
        tenant_id=current.tenant_id,
        parent_id=parent.pk if parent else None,
        min=dict(mins),
        max=dict(maxs),
        shared_weight=dict(weights),
        allow_lent=bool(changes.get("allow_lent", current.allow_lent)),
        namespaces=list(changes.get("namespaces", current.namespaces)),
        fair_weight=fair,
    )
    validate_quota(proposal, instance=current)
    return proposal


@transaction.atomic
def update_quota(
    actor: Actor, quota: Quota, *, expected_version: int | None = None, **changes: Any
) -> Quota:
    """Edit a quota. With ``expected_version`` a stale edit raises ConflictError.

    Unknown fields and tree rules are checked by quota_proposal() before anything is written.
    """
    current = (
        Quota.objects.select_for_update(of=("self",)).select_related("parent").get(pk=quota.pk)
    )
    refuse_if_kube_managed(actor, current)
    check_version("Quota", current, expected_version)
    parent = changes.get("parent", current.parent)
    default_queue = changes.get("default_queue", current.default_queue)
    if default_queue is not None and default_queue.tenant_id != current.tenant_id:
        raise ValidationError(
            {"default_queue": ["The default queue must belong to the quota's tenant."]}
        )
    _lock_tree(parent.pk if parent else None)
    proposal = quota_proposal(current, changes)
    mins, maxs, weights = proposal.min, proposal.max, proposal.shared_weight
    before = snapshot_of(current)
    updated = Quota.objects.filter(pk=current.pk, version=current.version).update(
        min=mins,
        max=maxs,
        shared_weight=weights,
        fair_weight=proposal.fair_weight,
        allow_lent=proposal.allow_lent,
        namespaces=proposal.namespaces,
        parent=parent,
        default_queue=default_queue,
        version=F("version") + 1,
        updated_at=timezone.now(),
    )
    if updated != 1:  # a database that does not lock rows let another edit in
        now = Quota.objects.values_list("version", flat=True).get(pk=current.pk)
        raise ConflictError(stale_message("Quota", current.name, now, current.version))
    current.refresh_from_db()
    audit(actor, "quota.update", current, before=before, after=snapshot_of(current))
    _publish_quota(current)
    return current


@transaction.atomic
def delete_quota(actor: Actor, quota: Quota, *, expected_version: int | None = None) -> None:
    """Delete a leaf quota without workloads. With ``expected_version`` a stale delete
    raises ConflictError."""
    quota = Quota.objects.select_for_update().get(pk=quota.pk)
    check_version("Quota", quota, expected_version)
    refuse_if_kube_managed(actor, quota)
    if quota.children.exists():
        raise ActionError(f"Quota {quota.name!r} has children; remove them first.")
    if Workload.objects.filter(quota=quota).exists():
        raise ActionError(f"Quota {quota.name!r} has workloads; it cannot be deleted.")
    audit(actor, "quota.delete", quota, before=snapshot_of(quota))
    publish(quota.tenant_id, config_message("quotas", quota.tenant_id, removed=[quota.pk]))
    quota.delete()


def _publish_quota(quota: Quota) -> None:
    publish(quota.tenant_id, config_message("quotas", quota.tenant_id, [quota_row(quota)]))
