"""Who may see and do what: one place for the tenant rules that pages, API and streams share.

Cluster admins (Django superusers) see and do everything. Everyone else sees the tenants
they are members of: viewers read, members submit and cancel, admins edit their tenant's
queues and quotas.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from queueing.choices import ROLE_RANK, Role
from queueing.models import Membership, Tenant


def is_cluster_admin(user: Any) -> bool:
    return bool(getattr(user, "is_authenticated", False) and getattr(user, "is_superuser", False))


def visible_tenants(user: Any) -> QuerySet[Tenant]:
    if is_cluster_admin(user):
        return Tenant.objects.all()
    if not getattr(user, "is_authenticated", False):
        return Tenant.objects.none()
    return Tenant.objects.filter(memberships__user=user).distinct()


def role_in(user: Any, tenant_id: int | None) -> str | None:
    """The user's role in a tenant; cluster admins are admins everywhere."""
    if is_cluster_admin(user):
        return Role.ADMIN
    if tenant_id is None or not getattr(user, "is_authenticated", False):
        return None
    return (
        Membership.objects.filter(user=user, tenant_id=tenant_id)
        .values_list("role", flat=True)
        .first()
    )


def has_role(user: Any, tenant_id: int | None, needed: str) -> bool:
    role = role_in(user, tenant_id)
    return role is not None and ROLE_RANK[Role(role)] >= ROLE_RANK[Role(needed)]


def roles_by_tenant(user: Any) -> dict[int, str]:
    if not getattr(user, "is_authenticated", False):
        return {}
    if is_cluster_admin(user):
        return dict.fromkeys(Tenant.objects.values_list("id", flat=True), Role.ADMIN.value)
    return dict(Membership.objects.filter(user=user).values_list("tenant_id", "role"))


def can_edit_quota(user: Any, quota: Any) -> bool:
    """Tenant admins edit the quotas inside their subtree; the top quota of a tenant
    (its entitlement, under a cluster-owned parent) and cluster quotas are for cluster
    admins. Validation keeps every edit within the parent's limits."""
    if is_cluster_admin(user):
        return True
    if quota.tenant_id is None or quota.parent_id is None:
        return False
    parent_tenant = quota.parent.tenant_id if quota.parent is not None else None
    return parent_tenant == quota.tenant_id and has_role(user, quota.tenant_id, Role.ADMIN)


def can_create_quota_under(user: Any, parent: Any) -> bool:
    """A new quota under ``parent``: cluster admins anywhere, tenant admins under their own."""
    if is_cluster_admin(user):
        return True
    return (
        parent is not None
        and parent.tenant_id is not None
        and has_role(user, parent.tenant_id, Role.ADMIN)
    )
