"""Tenants and who belongs to them."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from queueing.actions.base import (
    ActionError,
    Actor,
    audit,
    full_clean,
    publish,
    snapshot_of,
)
from queueing.choices import Role, Source
from queueing.events import config_message, member_row, tenant_row
from queueing.models import Membership, Tenant


@transaction.atomic
def create_tenant(
    actor: Actor, *, name: str, display_name: str = "", description: str = ""
) -> Tenant:
    tenant = Tenant(name=name, display_name=display_name, description=description)
    full_clean(tenant)
    tenant.save()
    audit(actor, "tenant.create", tenant, after=snapshot_of(tenant))
    publish(tenant.pk, config_message("tenants", tenant.pk, [tenant_row(tenant)]))
    return tenant


@transaction.atomic
def update_tenant(actor: Actor, tenant: Tenant, **changes: Any) -> Tenant:
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    before = snapshot_of(tenant)
    for key, value in changes.items():
        if key not in ("display_name", "description"):
            raise ActionError(f"{key} of a tenant cannot be changed.")
        setattr(tenant, key, value)
    full_clean(tenant)
    tenant.save()
    audit(actor, "tenant.update", tenant, before=before, after=snapshot_of(tenant))
    publish(tenant.pk, config_message("tenants", tenant.pk, [tenant_row(tenant)]))
    return tenant


@transaction.atomic
def delete_tenant(actor: Actor, tenant: Tenant) -> None:
    if tenant.quotas.exists() or tenant.queues.exists() or tenant.workloads.exists():
        raise ActionError(
            f"Tenant {tenant.name!r} still has quotas, queues or workloads; remove them first."
        )
    before = snapshot_of(tenant)
    audit(actor, "tenant.delete", tenant, before=before, tenant_id=None)
    publish(tenant.pk, config_message("tenants", tenant.pk, removed=[tenant.pk]))
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
    else:
        return membership  # nothing changed: no audit, no event
    publish(tenant.pk, config_message("members", tenant.pk, [member_row(membership)]))
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
    publish(
        membership.tenant_id,
        config_message("members", membership.tenant_id, removed=[membership.user_id]),
    )
    membership.delete()
