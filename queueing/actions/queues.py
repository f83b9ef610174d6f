"""Queues: the order and policy workloads wait under."""

from __future__ import annotations

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
    full_clean,
    publish,
    snapshot_of,
    stale_message,
)
from queueing.actions.kubernetes import refuse_if_kube_managed
from queueing.choices import ACTIVE_PHASES, normalize_policy
from queueing.events import config_message, queue_row, quota_row
from queueing.models import Queue, Quota, Tenant, Workload
from queueing.validation import Errors

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
    "aging_bound_s",
    "max_execution_s",
)


#: A bound past a week is no bound against starvation (and NaN/inf are no numbers).
AGING_BOUND_MAX_S = 7 * 24 * 3600.0
#: A running-time limit longer than a year is a typo, not a limit.
MAX_EXECUTION_MAX_S = 366 * 24 * 3600


def _clean_queue(queue: Queue) -> None:
    try:
        queue.policy = normalize_policy(queue.policy)
    except ValueError as exc:
        raise ValidationError({"policy": [str(exc)]}) from exc
    full_clean(queue, exclude=("tenant",))
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
    bound = queue.aging_bound_s
    if bound is not None and not (0 <= bound <= AGING_BOUND_MAX_S):
        errors.add(
            "aging_bound_s",
            f"aging_bound_s must be between 0 and {AGING_BOUND_MAX_S:g} seconds (or empty to "
            f"turn aging off), not {bound}.",
        )
    limit = queue.max_execution_s
    if limit is not None and not (1 <= limit <= MAX_EXECUTION_MAX_S):
        errors.add(
            "max_execution_s",
            f"max_execution_s must be between 1 and {MAX_EXECUTION_MAX_S} seconds (or empty "
            f"for no limit), not {limit}.",
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
    _publish_queue(queue)
    return queue


@transaction.atomic
def update_queue(
    actor: Actor, queue: Queue, *, expected_version: int | None = None, **changes: Any
) -> Queue:
    unknown = set(changes) - set(QUEUE_EDITABLE)
    if unknown:
        raise ActionError(f"Queue field(s) {', '.join(sorted(unknown))} cannot be changed.")
    current = Queue.objects.select_for_update().get(pk=queue.pk)
    check_version("Queue", current, expected_version)
    refuse_if_kube_managed(actor, current)
    before = snapshot_of(current)
    for key, value in changes.items():
        setattr(current, key, value)
    _clean_queue(current)
    fields = {key: getattr(current, key) for key in changes}
    updated = Queue.objects.filter(pk=current.pk, version=current.version).update(
        **fields, version=F("version") + 1, updated_at=timezone.now()
    )
    if updated != 1:  # a database that does not lock rows let another edit in
        now = Queue.objects.values_list("version", flat=True).get(pk=current.pk)
        raise ConflictError(stale_message("Queue", current.name, now, current.version))
    current.refresh_from_db()
    audit(actor, "queue.update", current, before=before, after=snapshot_of(current))
    _publish_queue(current)
    return current


@transaction.atomic
def delete_queue(actor: Actor, queue: Queue, *, expected_version: int | None = None) -> None:
    queue = Queue.objects.select_for_update().get(pk=queue.pk)
    check_version("Queue", queue, expected_version)
    refuse_if_kube_managed(actor, queue)
    if Workload.objects.filter(queue=queue, phase__in=ACTIVE_PHASES).exists():
        raise ActionError(f"Queue {queue.name!r} has live workloads; it cannot be deleted.")
    if Workload.objects.filter(queue=queue).exists():
        raise ActionError(f"Queue {queue.name!r} has a workload history; it cannot be deleted.")
    defaulting = list(Quota.objects.filter(default_queue=queue))
    Quota.objects.filter(default_queue=queue).update(default_queue=None)
    audit(actor, "queue.delete", queue, before=snapshot_of(queue))
    publish(queue.tenant_id, config_message("queues", queue.tenant_id, removed=[queue.pk]))
    for quota in defaulting:  # they lost their default queue: say so
        quota.default_queue_id = None
        publish(quota.tenant_id, config_message("quotas", quota.tenant_id, [quota_row(quota)]))
    queue.delete()


def _publish_queue(queue: Queue) -> None:
    publish(queue.tenant_id, config_message("queues", queue.tenant_id, [queue_row(queue)]))
