"""Every change to Koord-Queue's state goes through here (or the cycle's apply()).

An action validates, writes inside one transaction, records an AuditEvent with the state
before and after, and publishes live events only after the transaction commits. Views,
serializers, forms, tasks and commands call actions; they never save models themselves.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, NotSupportedError, transaction
from django.db.models import F, Model
from django.utils import timezone

from queueing import events
from queueing.choices import (
    ACTIVE_PHASES,
    HOLDING_PHASES,
    TERMINAL_PHASES,
    Phase,
    Role,
    Source,
    normalize_policy,
)
from queueing.cluster import get_cluster
from queueing.cluster.base import ClusterError, JobNotFound, JobRef, JobRequest
from queueing.models import (
    AuditEvent,
    Membership,
    Queue,
    Quota,
    SimNode,
    Tenant,
    Workload,
    WorkloadEvent,
)
from queueing.quantities import QuantityError, parse_resources
from queueing.validation import Errors, QuotaProposal, validate_quota

log = logging.getLogger(__name__)


class ConflictError(Exception):
    """A write based on a stale version; nothing was changed."""


class ActionError(Exception):
    """A request that cannot be carried out as asked; the message is for people."""


@dataclass(frozen=True)
class Actor:
    """Who acts, and through which door."""

    user: Any = None
    source: str = Source.SYSTEM
    name: str = "system"

    @classmethod
    def of(cls, user: AbstractBaseUser | AnonymousUser | None, source: str) -> Actor:
        if user is None or not getattr(user, "is_authenticated", False):
            return cls(None, source, "anonymous")
        return cls(user, source, user.get_username())

    @classmethod
    def system(cls) -> Actor:
        return cls(None, Source.SYSTEM, "system")

    @classmethod
    def cluster(cls) -> Actor:
        return cls(None, Source.CLUSTER, "cluster-sync")


# --- audit ---------------------------------------------------------------------------

AUDITED_FIELDS: dict[str, tuple[str, ...]] = {
    "tenant": ("name", "display_name", "description"),
    "membership": ("user_id", "tenant_id", "role"),
    "quota": (
        "name",
        "tenant_id",
        "parent_id",
        "min",
        "max",
        "shared_weight",
        "allow_lent",
        "namespaces",
        "default_queue_id",
        "version",
    ),
    "queue": (
        "name",
        "tenant_id",
        "policy",
        "priority",
        "priority_threshold",
        "max_depth",
        "preempt_within_quota",
        "reclaim",
        "admission_timeout_s",
        "backoff_base_s",
        "backoff_max_s",
        "backoff_jitter",
        "version",
    ),
    "workload": (
        "name",
        "namespace",
        "tenant_id",
        "quota_id",
        "queue_id",
        "priority",
        "pod_sets",
        "expected_runtime_s",
        "phase",
    ),
    "simnode": ("name", "allocatable", "reserved", "labels", "taints", "unschedulable"),
}


def snapshot_of(obj: Model) -> dict[str, Any]:
    kind = obj._meta.model_name or ""
    return {name: _jsonable(getattr(obj, name)) for name in AUDITED_FIELDS.get(kind, ())}


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def audit(
    actor: Actor,
    action: str,
    obj: Model,
    *,
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
    tenant_id: int | None = None,
) -> AuditEvent:
    if tenant_id is None:
        tenant_id = getattr(obj, "tenant_id", None)
        if tenant_id is None and isinstance(obj, Tenant):
            tenant_id = obj.pk
    return AuditEvent.objects.create(
        at=timezone.now(),
        actor=actor.user,
        actor_name=actor.name,
        source=actor.source,
        action=action,
        object_type=obj._meta.model_name or "",
        object_id=str(obj.pk),
        object_repr=str(obj)[:300],
        tenant_id=tenant_id,
        before=dict(before) if before is not None else None,
        after=dict(after) if after is not None else None,
    )


def _full_clean(obj: Model, exclude: Sequence[str] = ()) -> None:
    obj.full_clean(exclude=list(exclude), validate_constraints=False)


# --- tenants and memberships ---------------------------------------------------------


@transaction.atomic
def create_tenant(
    actor: Actor, *, name: str, display_name: str = "", description: str = ""
) -> Tenant:
    tenant = Tenant(name=name, display_name=display_name, description=description)
    _full_clean(tenant)
    tenant.save()
    audit(actor, "tenant.create", tenant, after=snapshot_of(tenant))
    return tenant


@transaction.atomic
def update_tenant(actor: Actor, tenant: Tenant, **changes: Any) -> Tenant:
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    before = snapshot_of(tenant)
    for key, value in changes.items():
        if key not in ("display_name", "description"):
            raise ActionError(f"{key} of a tenant cannot be changed.")
        setattr(tenant, key, value)
    _full_clean(tenant)
    tenant.save()
    audit(actor, "tenant.update", tenant, before=before, after=snapshot_of(tenant))
    return tenant


@transaction.atomic
def delete_tenant(actor: Actor, tenant: Tenant) -> None:
    if tenant.quotas.exists() or tenant.queues.exists() or tenant.workloads.exists():
        raise ActionError(
            f"Tenant {tenant.name!r} still has quotas, queues or workloads; remove them first."
        )
    before = snapshot_of(tenant)
    audit(actor, "tenant.delete", tenant, before=before, tenant_id=None)
    tenant.delete()


@transaction.atomic
def set_membership(actor: Actor, tenant: Tenant, user: Any, role: str) -> Membership:
    if role not in Role.values:
        raise ValidationError({"role": [f"{role!r} is not a role; use viewer, member or admin."]})
    membership = Membership.objects.select_for_update().filter(tenant=tenant, user=user).first()
    if membership is None:
        membership = Membership.objects.create(tenant=tenant, user=user, role=role)
        audit(actor, "membership.create", membership, after=snapshot_of(membership))
    elif membership.role != role:
        if membership.role == Role.ADMIN:
            _keep_an_admin(actor, membership)
        before = snapshot_of(membership)
        membership.role = role
        membership.save(update_fields=["role"])
        audit(actor, "membership.update", membership, before=before, after=snapshot_of(membership))
    return membership


def _keep_an_admin(actor: Actor, leaving: Membership) -> None:
    """A tenant admin cannot leave the tenant without an admin; cluster admins can."""
    if actor.user is not None and getattr(actor.user, "is_superuser", False):
        return
    if actor.source == Source.SYSTEM:
        return
    others = (
        Membership.objects.select_for_update()
        .filter(tenant_id=leaving.tenant_id, role=Role.ADMIN)
        .exclude(pk=leaving.pk)
    )
    if not others.exists():
        raise ActionError(
            f"{leaving.user} is the last admin of tenant {leaving.tenant}; "
            "make someone else admin first."
        )


@transaction.atomic
def remove_membership(actor: Actor, membership: Membership) -> None:
    if membership.role == Role.ADMIN:
        _keep_an_admin(actor, membership)
    before = snapshot_of(membership)
    audit(actor, "membership.delete", membership, before=before)
    membership.delete()


# --- quotas --------------------------------------------------------------------------


def _resources_or_error(errors: Errors, name: str, values: Any) -> dict[str, int]:
    try:
        return parse_resources(values)
    except QuantityError as exc:
        errors.add(name, str(exc))
        return {}


def _weights_or_error(errors: Errors, values: Any) -> dict[str, int]:
    if values is None:
        return {}
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
) -> QuotaProposal:
    """Parse and validate a new quota; raises ValidationError by field and saves nothing."""
    errors = Errors()
    mins = _resources_or_error(errors, "min", min)
    maxs = _resources_or_error(errors, "max", max)
    weights = _weights_or_error(errors, shared_weight)
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
    )
    mins, maxs, weights = proposal.min, proposal.max, proposal.shared_weight
    quota = Quota.objects.create(
        name=name,
        tenant=tenant,
        parent=parent,
        min=mins,
        max=maxs,
        shared_weight=weights,
        allow_lent=allow_lent,
        namespaces=list(namespaces),
    )
    if tenant is not None:
        queue_name = name if not Queue.objects.filter(name=name).exists() else f"{name}-default"
        queue = create_queue(actor, tenant=tenant, name=queue_name, policy=default_queue_policy)
        quota.default_queue = queue
        quota.save(update_fields=["default_queue"])
    audit(actor, "quota.create", quota, after=snapshot_of(quota))
    return quota


QUOTA_EDITABLE = (
    "min",
    "max",
    "shared_weight",
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
    mins = _resources_or_error(errors, "min", changes["min"]) if "min" in changes else current.min
    maxs = _resources_or_error(errors, "max", changes["max"]) if "max" in changes else current.max
    weights = (
        _weights_or_error(errors, changes["shared_weight"])
        if "shared_weight" in changes
        else current.shared_weight
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
    if expected_version is not None and current.version != expected_version:
        raise ConflictError(
            f"Quota {current.name!r} was changed by someone else (version {current.version}, "
            f"your edit was based on {expected_version}); reload and try again."
        )
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
        allow_lent=proposal.allow_lent,
        namespaces=proposal.namespaces,
        parent=parent,
        default_queue=default_queue,
        version=F("version") + 1,
        updated_at=timezone.now(),
    )
    if updated != 1:
        raise ConflictError(f"Quota {current.name!r} changed while saving; reload and try again.")
    current.refresh_from_db()
    audit(actor, "quota.update", current, before=before, after=snapshot_of(current))
    return current


def _check_version(kind: str, current: Quota | Queue, expected_version: int | None) -> None:
    if expected_version is not None and current.version != expected_version:
        raise ConflictError(
            f"{kind} {current.name!r} was changed by someone else (version {current.version}, "
            f"your request was based on {expected_version}); reload and try again."
        )


@transaction.atomic
def delete_quota(actor: Actor, quota: Quota, *, expected_version: int | None = None) -> None:
    """Delete a leaf quota without workloads. With ``expected_version`` a stale delete
    raises ConflictError."""
    quota = Quota.objects.select_for_update().get(pk=quota.pk)
    _check_version("Quota", quota, expected_version)
    if quota.children.exists():
        raise ActionError(f"Quota {quota.name!r} has children; remove them first.")
    if Workload.objects.filter(quota=quota).exists():
        raise ActionError(f"Quota {quota.name!r} has workloads; it cannot be deleted.")
    audit(actor, "quota.delete", quota, before=snapshot_of(quota))
    quota.delete()


# --- queues --------------------------------------------------------------------------

QUEUE_EDITABLE = (
    "policy",
    "priority",
    "priority_threshold",
    "max_depth",
    "preempt_within_quota",
    "reclaim",
    "admission_timeout_s",
    "backoff_base_s",
    "backoff_max_s",
    "backoff_jitter",
)


def _clean_queue(queue: Queue) -> None:
    try:
        queue.policy = normalize_policy(queue.policy)
    except ValueError as exc:
        raise ValidationError({"policy": [str(exc)]}) from exc
    _full_clean(queue, exclude=("tenant",))
    errors = Errors()
    if queue.backoff_base_s <= 0:
        errors.add(
            "backoff_base_s", f"backoff_base_s must be positive, not {queue.backoff_base_s}."
        )
    if queue.backoff_max_s < queue.backoff_base_s:
        errors.add(
            "backoff_max_s",
            f"backoff_max_s ({queue.backoff_max_s}) is less than backoff_base_s "
            f"({queue.backoff_base_s}).",
        )
    if not 0 <= queue.backoff_jitter <= 1:
        errors.add(
            "backoff_jitter", f"backoff_jitter must be between 0 and 1, not {queue.backoff_jitter}."
        )
    errors.raise_if_any()


@transaction.atomic
def create_queue(actor: Actor, *, tenant: Tenant, name: str, **settings: Any) -> Queue:
    unknown = set(settings) - set(QUEUE_EDITABLE)
    if unknown:
        raise ActionError(f"Queue field(s) {', '.join(sorted(unknown))} are unknown.")
    queue = Queue(tenant=tenant, name=name, **settings)
    _clean_queue(queue)
    queue.save()
    audit(actor, "queue.create", queue, after=snapshot_of(queue))
    return queue


@transaction.atomic
def update_queue(
    actor: Actor, queue: Queue, *, expected_version: int | None = None, **changes: Any
) -> Queue:
    unknown = set(changes) - set(QUEUE_EDITABLE)
    if unknown:
        raise ActionError(f"Queue field(s) {', '.join(sorted(unknown))} cannot be changed.")
    current = Queue.objects.select_for_update().get(pk=queue.pk)
    if expected_version is not None and current.version != expected_version:
        raise ConflictError(
            f"Queue {current.name!r} was changed by someone else (version {current.version}, "
            f"your edit was based on {expected_version}); reload and try again."
        )
    before = snapshot_of(current)
    for key, value in changes.items():
        setattr(current, key, value)
    _clean_queue(current)
    fields = {key: getattr(current, key) for key in changes}
    updated = Queue.objects.filter(pk=current.pk, version=current.version).update(
        **fields, version=F("version") + 1, updated_at=timezone.now()
    )
    if updated != 1:
        raise ConflictError(f"Queue {current.name!r} changed while saving; reload and try again.")
    current.refresh_from_db()
    audit(actor, "queue.update", current, before=before, after=snapshot_of(current))
    return current


@transaction.atomic
def delete_queue(actor: Actor, queue: Queue, *, expected_version: int | None = None) -> None:
    queue = Queue.objects.select_for_update().get(pk=queue.pk)
    _check_version("Queue", queue, expected_version)
    if Workload.objects.filter(queue=queue, phase__in=ACTIVE_PHASES).exists():
        raise ActionError(f"Queue {queue.name!r} has live workloads; it cannot be deleted.")
    if Workload.objects.filter(queue=queue).exists():
        raise ActionError(f"Queue {queue.name!r} has a workload history; it cannot be deleted.")
    Quota.objects.filter(default_queue=queue).update(default_queue=None)
    audit(actor, "queue.delete", queue, before=snapshot_of(queue))
    queue.delete()


@transaction.atomic
def set_kube_ref(actor: Actor, obj: Quota | Queue, kube_ref: str) -> None:
    """Record the Kubernetes object a quota or queue mirrors ("" : managed here again)."""
    model = type(obj)
    current = model.objects.select_for_update().get(pk=obj.pk)
    if current.kube_ref == kube_ref:
        return
    before = snapshot_of(current)
    model.objects.filter(pk=current.pk).update(
        kube_ref=kube_ref, version=F("version") + 1, updated_at=timezone.now()
    )
    current.refresh_from_db()
    obj.kube_ref, obj.version = current.kube_ref, current.version
    kind = "quota" if isinstance(current, Quota) else "queue"
    audit(actor, f"{kind}.update", current, before=before, after=snapshot_of(current))


# --- workloads -----------------------------------------------------------------------


def _canonical_requests(values: Any) -> dict[str, int]:
    if not isinstance(values, Mapping):
        raise QuantityError("requests must be a map of resource name to amount.")
    out: dict[str, int] = {}
    for resource, amount in values.items():
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
            raise QuantityError(f"{resource}: {amount!r} is not a canonical amount.")
        out[str(resource)] = amount
    return out


def parse_pod_sets(raw: Any, *, canonical: bool = False) -> list[dict[str, Any]]:
    """Validate pod sets given by people or manifests; quantities become integers.

    ``canonical`` pod sets (from cluster adapters) already carry integer amounts.
    """
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes) or not raw:
        raise ValidationError({"pod_sets": ["Give at least one pod set."]})
    pod_sets: list[dict[str, Any]] = []
    names: set[str] = set()
    for index, item in enumerate(raw):
        where = f"pod set {index + 1}"
        if not isinstance(item, Mapping):
            raise ValidationError({"pod_sets": [f"{where} must be an object."]})
        name = str(item.get("name") or ("main" if index == 0 else f"set-{index + 1}"))
        if name in names:
            raise ValidationError({"pod_sets": [f"{where}: the name {name!r} is used twice."]})
        names.add(name)
        count = item.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValidationError(
                {
                    "pod_sets": [
                        f"{where}: count must be a whole number of pods, 1 or more, not {count!r}."
                    ]
                }
            )
        try:
            raw_requests = item.get("requests") or {}
            requests = (
                _canonical_requests(raw_requests) if canonical else parse_resources(raw_requests)
            )
        except QuantityError as exc:
            raise ValidationError({"pod_sets": [f"{where}: {exc}"]}) from exc
        if not any(requests.values()):
            raise ValidationError({"pod_sets": [f"{where}: requests must ask for something."]})
        selector = item.get("node_selector") or {}
        if not isinstance(selector, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in selector.items()
        ):
            raise ValidationError(
                {"pod_sets": [f"{where}: node_selector must map strings to strings."]}
            )
        tolerations = item.get("tolerations") or []
        if not isinstance(tolerations, list) or not all(
            isinstance(t, Mapping) for t in tolerations
        ):
            raise ValidationError(
                {"pod_sets": [f"{where}: tolerations must be a list of objects."]}
            )
        pod_sets.append(
            {
                "name": name,
                "count": count,
                "requests": requests,
                "node_selector": dict(selector),
                "tolerations": [dict(t) for t in tolerations],
            }
        )
    return pod_sets


def total_request(pod_sets: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for pod_set in pod_sets:
        for resource, amount in pod_set["requests"].items():
            total[resource] = total.get(resource, 0) + int(amount) * int(pod_set["count"])
    return total


def _leaf_quota_error(quota: Quota) -> str | None:
    if quota.children.exists():
        return f"Quota {quota.name!r} has children; workloads attach to leaf quotas."
    return None


def quota_for_namespace(namespace: str) -> Quota | None:
    """The quota that claims a namespace (quotas are few; JSON lookups differ per DB)."""
    for quota in Quota.objects.only("id", "namespaces"):
        if namespace in (quota.namespaces or []):
            return Quota.objects.select_related("tenant", "default_queue").get(pk=quota.pk)
    return None


def resolve_placement(
    tenant: Tenant | None,
    *,
    namespace: str | None,
    queue: Queue | None,
    quota: Quota | None,
) -> tuple[Tenant, Quota, Queue, str]:
    """Fill in the defaults kube-queue users expect and check they belong together.

    The quota defaults to the namespace's quota; the queue to the quota's default queue;
    the namespace to the quota's first namespace.
    """
    errors = Errors()
    if quota is None and namespace:
        quota = quota_for_namespace(namespace)
    if quota is None and queue is not None:
        quota = Quota.objects.filter(default_queue=queue).first()
    if quota is None:
        errors.add("quota", "Name a quota, or a namespace or queue that has one.")
        errors.raise_if_any()
    assert quota is not None
    if tenant is None:
        if quota.tenant is None:
            errors.add("quota", f"Quota {quota.name!r} belongs to no tenant.")
            errors.raise_if_any()
        tenant = quota.tenant
    assert tenant is not None
    if quota.tenant_id != tenant.pk:
        errors.add("quota", f"Quota {quota.name!r} does not belong to tenant {tenant.name!r}.")
    leaf_error = _leaf_quota_error(quota)
    if leaf_error:
        errors.add("quota", leaf_error)
    if queue is None:
        queue = quota.default_queue
        if queue is None:
            errors.add("queue", f"Quota {quota.name!r} has no default queue; name a queue.")
    elif queue.tenant_id != tenant.pk:
        errors.add("queue", f"Queue {queue.name!r} does not belong to tenant {tenant.name!r}.")
    if not namespace:
        namespace = quota.namespaces[0] if quota.namespaces else tenant.name
    errors.raise_if_any()
    assert queue is not None
    return tenant, quota, queue, namespace


def submit_workload(
    actor: Actor,
    *,
    tenant: Tenant | None,
    name: str,
    pod_sets: Any,
    queue: Queue | None = None,
    quota: Quota | None = None,
    namespace: str | None = None,
    priority: int = 0,
    priority_class: str = "",
    expected_runtime_s: float | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    manifest: Mapping[str, Any] | None = None,
) -> Workload:
    """Submit work: create the suspended job in the cluster, then its Workload.

    The cluster object is created first; if the database write then fails, the next
    sync finds the labelled job and registers it, so nothing is lost either way.
    """
    parsed = parse_pod_sets(pod_sets)
    tenant, quota, queue, namespace = resolve_placement(
        tenant, namespace=namespace, queue=queue, quota=quota
    )
    from queueing.models.tenancy import dns_label

    try:
        dns_label(name)
    except ValidationError as exc:
        raise ValidationError({"name": exc.messages}) from exc
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValidationError({"priority": [f"priority must be a whole number, not {priority!r}."]})
    if expected_runtime_s is not None and expected_runtime_s <= 0:
        raise ValidationError(
            {
                "expected_runtime_s": [
                    f"expected_runtime_s must be positive, not {expected_runtime_s}."
                ]
            }
        )
    if Workload.objects.filter(
        kind="Job", namespace=namespace, name=name, phase__in=ACTIVE_PHASES
    ).exists():
        raise ValidationError({"name": [f"A live workload {namespace}/{name} already exists."]})
    from queueing import compat

    job_labels = {**(labels or {}), compat.QUEUE_LABEL: queue.name, compat.QUOTA_LABEL: quota.name}
    cluster = get_cluster()
    with transaction.atomic():
        try:
            ref = cluster.create_job(
                JobRequest(
                    namespace=namespace,
                    name=name,
                    pod_sets=parsed,
                    labels=job_labels,
                    annotations=dict(annotations or {}),
                    priority=priority,
                    priority_class=priority_class,
                    expected_runtime_s=expected_runtime_s,
                    manifest=manifest,
                )
            )
        except ClusterError as exc:
            if exc.status == 409:
                raise ValidationError({"name": [str(exc)]}) from exc
            raise ActionError(f"The cluster refused the job: {exc}") from exc
        return _create_workload(
            actor,
            tenant=tenant,
            quota=quota,
            queue=queue,
            ref=ref,
            pod_sets=parsed,
            priority=priority,
            priority_class=priority_class,
            expected_runtime_s=expected_runtime_s,
            labels=job_labels,
            annotations=dict(annotations or {}),
        )


def _new_workload(
    actor: Actor,
    *,
    tenant: Tenant,
    quota: Quota,
    queue: Queue,
    ref: JobRef,
    pod_sets: list[dict[str, Any]],
    priority: int,
    priority_class: str,
    expected_runtime_s: float | None,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    queue_order_at: datetime | None = None,
    phase: str = Phase.PENDING,
    now: datetime | None = None,
) -> Workload:
    """The unsaved row of a new workload."""
    return Workload(
        tenant=tenant,
        quota=quota,
        queue=queue,
        name=ref.name,
        namespace=ref.namespace,
        kind=ref.kind,
        api_version=ref.api_version,
        object_uid=ref.uid,
        priority=priority,
        priority_class=priority_class,
        pod_sets=pod_sets,
        total_request=total_request(pod_sets),
        expected_runtime_s=expected_runtime_s,
        queue_order_at=queue_order_at or now or timezone.now(),
        phase=phase,
        labels=dict(labels),
        annotations=dict(annotations),
        source=actor.source,
        submitted_by=actor.user,
        reason="Waiting for the next admission cycle.",
    )


def _record_new(actor: Actor, workloads: Sequence[Workload], now: datetime) -> None:
    """Timeline, audit and live notification of workloads just inserted."""
    WorkloadEvent.objects.bulk_create(
        WorkloadEvent(workload=w, at=now, from_phase="", to_phase=w.phase, reason="Submitted")
        for w in workloads
    )
    AuditEvent.objects.bulk_create(
        AuditEvent(
            at=now,
            actor=actor.user,
            actor_name=actor.name,
            source=actor.source,
            action="workload.submit",
            object_type=Workload._meta.model_name or "",
            object_id=str(w.pk),
            object_repr=str(w)[:300],
            tenant_id=w.tenant_id,
            after=snapshot_of(w),
        )
        for w in workloads
    )
    _publish(list(workloads))


def _create_workload(actor: Actor, **fields: Any) -> Workload:
    now = timezone.now()
    workload = _new_workload(actor, now=now, **fields)
    try:
        with transaction.atomic():
            workload.save(force_insert=True)
    except IntegrityError as exc:
        raise ValidationError(
            {"name": [f"A live workload {workload.namespace}/{workload.name} already exists."]}
        ) from exc
    _record_new(actor, [workload], now)
    return workload


def register_cluster_workload(
    *,
    tenant: Tenant,
    quota: Quota,
    queue: Queue,
    ref: JobRef,
    pod_sets: list[dict[str, Any]],
    priority: int,
    priority_class: str,
    expected_runtime_s: float | None,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    created_at: datetime | None,
    phase: str = Phase.PENDING,
) -> Workload:
    """A job found in the cluster (kubectl apply, a CI system) becomes a workload."""
    return _create_workload(
        Actor.cluster(),
        tenant=tenant,
        quota=quota,
        queue=queue,
        ref=ref,
        pod_sets=pod_sets,
        priority=priority,
        priority_class=priority_class,
        expected_runtime_s=expected_runtime_s,
        labels=labels,
        annotations=annotations,
        queue_order_at=created_at,
        phase=phase,
    )


def register_cluster_workloads(items: Sequence[Mapping[str, Any]]) -> list[Workload]:
    """Many jobs found in the cluster become workloads in one insert: ``items`` hold the
    keyword arguments of ``register_cluster_workload``. All or nothing: when one of them
    collides with a live workload (IntegrityError), nothing is inserted and the caller
    registers them one by one to learn which."""
    actor, now = Actor.cluster(), timezone.now()
    rows = [
        _new_workload(
            actor,
            now=now,
            **{k: v for k, v in item.items() if k != "created_at"},
            queue_order_at=item.get("created_at"),
        )
        for item in items
    ]
    with transaction.atomic():
        created = Workload.objects.bulk_create(rows)
        if any(w.pk is None for w in created):  # a backend that returns no ids
            raise NotSupportedError("bulk insert without returned ids")
        _record_new(actor, created, now)
    return created


def workload_ref(workload: Workload) -> JobRef:
    return JobRef(
        workload.kind, workload.api_version, workload.namespace, workload.name, workload.object_uid
    )


def cancel_workload(actor: Actor, workload: Workload, *, reason: str = "") -> Workload:
    """Stop a workload: delete its cluster object, then mark it Cancelled.

    The cluster goes first so a running job never outlives the quota it held; if the
    database write is lost, the sync sees the job gone and cancels the workload.
    """
    if workload.phase in TERMINAL_PHASES:
        raise ActionError(f"Workload {workload} is already {workload.phase}.")
    try:
        get_cluster().delete(workload_ref(workload))
    except JobNotFound:
        pass
    except ClusterError as exc:
        raise ActionError(f"The cluster could not delete {workload}: {exc}") from exc
    with transaction.atomic():
        changed = transition(
            workload,
            Phase.CANCELLED,
            reason="Cancelled",
            message=reason or f"Cancelled by {actor.name}.",
            expect=ACTIVE_PHASES,
            finished_at=timezone.now(),
        )
        if not changed:
            workload.refresh_from_db()
            raise ActionError(f"Workload {workload} is already {workload.phase}.")
        audit(
            actor,
            "workload.cancel",
            workload,
            before={"phase": changed.from_phase},
            after={"phase": Phase.CANCELLED},
        )
    workload.refresh_from_db()
    return workload


def transition(
    workload: Workload,
    to_phase: str,
    *,
    reason: str,
    message: str = "",
    expect: Sequence[str] | None = None,
    at: datetime | None = None,
    publish: bool = True,
    **fields: Any,
) -> WorkloadEvent | None:
    """Move a workload to ``to_phase`` if it is still in one of ``expect``.

    A conditional update: when the row has moved on meanwhile nothing is written and
    None is returned. Records the timeline event and publishes the change on commit.
    """
    at = at or timezone.now()
    expected = tuple(expect) if expect is not None else (workload.phase,)
    from_phase = (
        Workload.objects.filter(pk=workload.pk).values_list("phase", flat=True).first() or ""
    )
    if from_phase not in expected:
        return None
    _clear_for(to_phase, fields, message or reason)
    updated = Workload.objects.filter(pk=workload.pk, phase=from_phase).update(
        phase=to_phase, updated_at=at, **fields
    )
    if updated != 1:
        return None
    event = WorkloadEvent.objects.create(
        workload_id=workload.pk,
        at=at,
        from_phase=from_phase,
        to_phase=to_phase,
        reason=reason,
        message=message,
    )
    workload.phase = to_phase
    if publish:
        _publish([workload.pk])
    return event


@dataclass(frozen=True)
class Move:
    """One transition of ``transition_many``: the arguments of ``transition``."""

    workload: Workload
    to_phase: str
    reason: str
    message: str = ""
    expect: tuple[str, ...] = ()
    fields: Mapping[str, Any] = dataclass_field(default_factory=dict)


def transition_many(moves: Sequence[Move], *, at: datetime | None = None) -> list[Move]:
    """``transition`` for many workloads at once; returns the moves that were made.

    The current phases are read (and locked, where the database locks rows) in one query;
    each row is still updated on the condition that its phase is the one read, the
    timeline is written in one insert and one notification goes out after the commit."""
    if not moves:
        return []
    at = at or timezone.now()
    made: list[tuple[Move, str]] = []
    with transaction.atomic():
        current = dict(
            Workload.objects.select_for_update()
            .filter(pk__in=[m.workload.pk for m in moves])
            .values_list("id", "phase")
        )
        for move in moves:
            from_phase = current.get(move.workload.pk, "")
            if from_phase not in (move.expect or (move.workload.phase,)):
                continue
            fields = dict(move.fields)
            _clear_for(move.to_phase, fields, move.message or move.reason)
            updated = Workload.objects.filter(pk=move.workload.pk, phase=from_phase).update(
                phase=move.to_phase, updated_at=at, **fields
            )
            if updated == 1:
                current[move.workload.pk] = move.to_phase  # a second move sees the first
                made.append((move, from_phase))
        WorkloadEvent.objects.bulk_create(
            WorkloadEvent(
                workload_id=move.workload.pk,
                at=at,
                from_phase=from_phase,
                to_phase=move.to_phase,
                reason=move.reason,
                message=move.message,
            )
            for move, from_phase in made
        )
        for move, _ in made:
            move.workload.phase = move.to_phase
        _publish([move.workload for move, _ in made])
    return [move for move, _ in made]


def _clear_for(to_phase: str, fields: dict[str, Any], reason: str) -> None:
    """What a workload stops showing when it holds quota or ends."""
    if to_phase in TERMINAL_PHASES or to_phase in HOLDING_PHASES:
        fields.setdefault("position", None)
        fields.setdefault("global_position", None)
        fields.setdefault("eta_p50", None)
        fields.setdefault("eta_p90", None)
    if to_phase in TERMINAL_PHASES:
        fields.setdefault("explanation", None)
        fields.setdefault("reason", reason)


def _publish(items: Sequence[Workload | int]) -> None:
    """Announce changed workloads after the commit (ids and queues only, docs/events.md)."""
    known = [(w.tenant_id, w.queue_id, w.pk) for w in items if isinstance(w, Workload)]
    ids = [item for item in items if not isinstance(item, Workload)]
    if ids:
        known += Workload.objects.filter(pk__in=ids).values_list("tenant_id", "queue_id", "id")
    events.notify_changes(known)


# --- simulated cluster ---------------------------------------------------------------


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
    alloc = _resources_or_error(errors, "allocatable", allocatable)
    res = _resources_or_error(errors, "reserved", reserved or {})
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
    return node


@transaction.atomic
def delete_sim_node(actor: Actor, node: SimNode) -> None:
    audit(actor, "simnode.delete", node, before=snapshot_of(node))
    node.delete()
