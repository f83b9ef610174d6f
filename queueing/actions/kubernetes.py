"""Where a quota or queue is edited: here, or in Kubernetes (an ElasticQuota, a
ResourceQuota or a kube-queue Queue it mirrors; docs/kube-queue-compat.md)."""

from __future__ import annotations

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from queueing.actions.base import ActionError, Actor, audit, publish, snapshot_of
from queueing.choices import Source
from queueing.events import config_message, queue_row, quota_row
from queueing.models import Queue, Quota


@transaction.atomic
def set_kube_ref(actor: Actor, obj: Quota | Queue, kube_ref: str) -> None:
    """Record the Kubernetes object a quota or queue mirrors ("": managed here again)."""
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
    if isinstance(current, Quota):
        audit(actor, "quota.update", current, before=before, after=snapshot_of(current))
        publish(
            current.tenant_id, config_message("quotas", current.tenant_id, [quota_row(current)])
        )
    else:
        audit(actor, "queue.update", current, before=before, after=snapshot_of(current))
        publish(
            current.tenant_id, config_message("queues", current.tenant_id, [queue_row(current)])
        )


def refuse_if_kube_managed(actor: Actor, obj: Quota | Queue) -> None:
    """A quota or queue mirrored from Kubernetes is edited there (GitOps): an edit from
    the pages or the API would be overwritten by the next look at the object."""
    if obj.kube_ref and actor.source in (Source.UI, Source.API):
        what = "Quota" if isinstance(obj, Quota) else "Queue"
        raise ActionError(
            f"{what} {obj.name!r} is managed in Kubernetes ({obj.kube_ref}): edit that "
            "object instead."
        )
