from typing import Any

from django.http import HttpRequest


def navigation(request: HttpRequest) -> dict[str, Any]:
    """The running mode (footer) and the tenant switcher's choices (top bar)."""
    from django.conf import settings

    from queueing import access

    context: dict[str, Any] = {"kq_cluster_mode": settings.KQ_CLUSTER}
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        context["nav_tenants"] = list(access.visible_tenants(user).only("name", "display_name"))
        context["nav_current"] = request.session.get("kq_tenant", "")
        context["nav_cluster_admin"] = access.is_cluster_admin(user)
    return context
