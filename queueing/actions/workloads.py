"""Workloads: submission, registration of jobs found in the cluster, cancellation, and
``transition`` for one workload (many, as the cycle and the sync move them:
``queueing.actions.transitions``).

A workload's change is announced with the small ``changed`` notification
(``transitions.publish``): the live stream reads the rows itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, NotSupportedError, connection, transaction
from django.utils import timezone

from queueing.actions.base import ActionError, Actor, audit, snapshot_of
from queueing.actions.registration import insert_workloads
from queueing.actions.transitions import Move, publish, transition_many
from queueing.choices import ACTIVE_PHASES, TERMINAL_PHASES, Phase
from queueing.cluster import get_cluster
from queueing.cluster.base import ClusterError, JobNotFound, JobRef, JobRequest
from queueing.models import AuditEvent, Queue, Quota, Tenant, Workload, WorkloadEvent
from queueing.quantities import QuantityError, parse_resources
from queueing.validation import Amounts, Errors


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
            parsed_already = canonical or isinstance(raw_requests, Amounts)
            requests = (
                _canonical_requests(raw_requests)
                if parsed_already
                else parse_resources(raw_requests)
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

    for key in compat.PREEMPTIBLE_LABELS:
        value = (labels or {}).get(key)
        if value is not None and value not in ("true", "false"):
            raise ValidationError({"labels": [f'{key} must be "true" or "false", not {value!r}.']})
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
        try:
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
        except ValidationError:
            adopted = _adopt_registered(actor, ref)
            if adopted is None:
                raise
            return adopted


def _adopt_registered(actor: Actor, ref: JobRef) -> Workload | None:
    """The live workload a sync registered for the job this submission just created.

    The Job is created first, then its workload inserted; a sync reading the cluster in
    between (a watch cache sees the Job at once) registers the Job as one created
    outside the product, and the insert then collides with it (seen in the chaos test:
    "A live workload team-b/chaos-488 already exists"). That workload stands for
    exactly this submission's Job (same uid), so the submission takes it as its own:
    who submitted it, and the audit record; its timeline already starts."""
    if not ref.uid:
        return None
    workload = (
        Workload.objects.select_for_update()
        .filter(object_uid=ref.uid, phase__in=ACTIVE_PHASES)
        .first()
    )
    if workload is None:
        return None
    workload.source, workload.submitted_by = actor.source, actor.user
    workload.save(update_fields=["source", "submitted_by", "updated_at"])
    audit(actor, "workload.submit", workload, after=snapshot_of(workload))
    return workload


def _workload_values(
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
) -> dict[str, Any]:
    """The fields a new workload is given (the model's defaults for the rest)."""
    from queueing import compat

    return {
        "tenant": tenant,
        "quota": quota,
        "queue": queue,
        "name": ref.name,
        "namespace": ref.namespace,
        "kind": ref.kind,
        "api_version": ref.api_version,
        "object_uid": ref.uid,
        "priority": priority,
        "priority_class": priority_class,
        "pod_sets": pod_sets,
        "total_request": total_request(pod_sets),
        "expected_runtime_s": expected_runtime_s,
        "queue_order_at": queue_order_at or now or timezone.now(),
        "phase": phase,
        "labels": dict(labels),
        "annotations": dict(annotations),
        "preemptible": compat.is_preemptible(labels),
        "source": actor.source,
        "submitted_by": actor.user,
        "reason": "Waiting for the next admission cycle.",
    }


def _new_workload(actor: Actor, **fields: Any) -> Workload:
    """The unsaved row of a new workload."""
    return Workload(**_workload_values(actor, **fields))


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
    publish((w.tenant_id, w.queue_id, w.pk) for w in workloads)


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


def register_cluster_workloads(items: Sequence[Mapping[str, Any]]) -> int:
    """Many jobs found in the cluster become workloads in one insert: ``items`` hold the
    keyword arguments of ``register_cluster_workload``. All or nothing: when one of them
    collides with a live workload (IntegrityError), nothing is inserted and the caller
    registers them one by one to learn which. Returns how many were registered.

    PostgreSQL: one statement for the workloads, their timeline and their audit records
    (``queueing.actions.registration``); elsewhere Django's bulk inserts."""
    actor, now = Actor.cluster(), timezone.now()
    values = [
        _workload_values(
            actor,
            now=now,
            **{k: v for k, v in item.items() if k != "created_at"},
            queue_order_at=item.get("created_at"),
        )
        for item in items
    ]
    if connection.vendor == "postgresql":
        # One statement: no savepoint of its own (a failure undoes the caller's
        # transaction or savepoint), and outside any, no transaction either: a single
        # statement is atomic, committed when it returns (the sync's registrations).
        inside = connection.in_atomic_block
        with transaction.atomic(savepoint=False) if inside else contextlib.nullcontext():
            inserted = insert_workloads(actor, values, now)
            publish(inserted.changes, trees=inserted.trees)
        return len(inserted.changes)
    with transaction.atomic():
        created = Workload.objects.bulk_create(Workload(**v) for v in values)
        if any(w.pk is None for w in created):  # a backend that returns no ids
            raise NotSupportedError("bulk insert without returned ids")
        _record_new(actor, created, now)
    return len(created)


def workload_ref(workload: Workload) -> JobRef:
    return JobRef(
        workload.kind, workload.api_version, workload.namespace, workload.name, workload.object_uid
    )


def cancel_workload(
    actor: Actor, workload: Workload, *, reason: str = "", code: str = "Cancelled"
) -> Workload:
    """Stop a workload: delete its cluster object, then mark it Cancelled.

    ``code`` is the timeline step's reason (and its Kubernetes Event's): a person's
    cancel is "Cancelled", a stop at the running time limit names that.

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
            reason=code,
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
    """Move one workload to ``to_phase`` if it is still in one of ``expect`` (default: the
    phase the object shows), through ``transitions.transition_many``: when the row has
    moved on meanwhile nothing is written and None is returned; else its timeline event."""
    move = Move(
        workload.pk,
        to_phase,
        tuple(expect) if expect is not None else (workload.phase,),
        reason,
        message,
        fields,
    )
    outcome = transition_many([move], at=at, publish_changes=publish)
    if not outcome.made:
        return None
    workload.phase = to_phase
    return outcome.events[0]
