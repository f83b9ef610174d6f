"""Access helpers every view uses: tenants a user cannot see are 404, too-low roles 403."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest

from queueing import access
from queueing.choices import Role
from queueing.models import Tenant


def visible_tenant_or_404(request: HttpRequest, name: str) -> Tenant:
    """A tenant the user may see; any other name is a 404, never a 403."""
    tenant = access.visible_tenants(request.user).filter(name=name).first()
    if tenant is None:
        raise Http404("No such tenant.")
    if request.session.get("kq_tenant") != tenant.name:
        request.session["kq_tenant"] = tenant.name  # the switcher's current tenant
    return tenant


def require_role(request: HttpRequest, tenant: Tenant, needed: str) -> str:
    """The user's role in a tenant they can see; 403 when it is below ``needed``."""
    role = access.role_in(request.user, tenant.pk)
    if role is None or not access.has_role(request.user, tenant.pk, needed):
        raise PermissionDenied(f"This needs the {needed} role in {tenant.name}.")
    return role


def require_cluster_admin(request: HttpRequest) -> None:
    if not access.is_cluster_admin(request.user):
        raise PermissionDenied("Only cluster admins may open this page.")


def role_flags(request: HttpRequest, tenant: Tenant) -> dict[str, Any]:
    role = access.role_in(request.user, tenant.pk)
    return {
        "role": role,
        "can_submit": access.has_role(request.user, tenant.pk, Role.MEMBER),
        "is_tenant_admin": access.has_role(request.user, tenant.pk, Role.ADMIN),
        "is_cluster_admin": access.is_cluster_admin(request.user),
    }


# A page beyond this would start past any table's rows; bounding it keeps the offset inside
# the database's 64-bit LIMIT/OFFSET (a page=10^30 once answered 500).
MAX_PAGE = 1_000_000


def page_number(request: HttpRequest, name: str = "page") -> int:
    raw = request.GET.get(name, "1")
    if not (raw.isascii() and raw.isdigit()):
        return 1
    return MAX_PAGE if len(raw) > 7 else min(MAX_PAGE, max(1, int(raw)))
