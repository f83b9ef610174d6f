"""Home, tenant switcher and tenant overview. Views read through queries; writes go
through queueing.actions (see the form views)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET

from portal import charts, overview, queries
from portal.views.common import role_flags, visible_tenant_or_404
from queueing import access
from queueing.choices import HOLDING_PHASES, WAITING_PHASES
from queueing.models import Tenant, Workload


@login_required
def home(request: HttpRequest) -> HttpResponse:
    tenants = list(access.visible_tenants(request.user))
    if len(tenants) == 1 and not access.is_cluster_admin(request.user):
        return redirect("tenant", name=tenants[0].name)
    counts = {
        row["tenant_id"]: row
        for row in Workload.objects.filter(tenant__in=tenants)
        .values("tenant_id")
        .annotate(
            pending=Count("id", filter=Q(phase__in=WAITING_PHASES)),
            running=Count("id", filter=Q(phase__in=HOLDING_PHASES)),
        )
    }
    roles = access.roles_by_tenant(request.user)
    rows = [
        (tenant, counts.get(tenant.pk, {"pending": 0, "running": 0}), roles.get(tenant.pk))
        for tenant in tenants
    ]
    return render(request, "portal/home.html", {"rows": rows})


@login_required
@require_GET
def switch_tenant(request: HttpRequest) -> HttpResponse:
    """The tenant switcher: a plain GET form, so it works without JavaScript."""
    name = request.GET.get("tenant", "")
    if not name:
        return redirect("home")
    tenant = visible_tenant_or_404(request, name)
    return redirect("tenant", name=tenant.name)


@login_required
def tenant_page(request: HttpRequest, name: str) -> HttpResponse:
    tenant = visible_tenant_or_404(request, name)
    context = tenant_context(tenant)
    context.update(role_flags(request, tenant))
    context["editable"] = {
        row.quota.pk
        for row in context["quota_rows"]
        if access.can_edit_quota(request.user, row.quota)
    }
    if request.GET.get("partial") == "live":
        return render(request, "portal/_tenant_live.html", context)
    return render(request, "portal/tenant.html", context)


def tenant_context(tenant: Tenant) -> dict[str, Any]:
    view = overview.tenant_overview(tenant)
    mine = view.quotas
    series = queries.usage_series(view.leaves)
    usage_charts = []
    for resource, points in series.items():
        unit, divisor = charts.usage_unit(resource)
        scaled = [(at, value / divisor) for at, value in points]
        usage_charts.append(
            {
                "resource": resource,
                "unit": unit,
                "svg": charts.line_chart(
                    f"usage-{resource.replace('/', '-').replace('.', '-')}",
                    f"Decayed {resource} usage of {tenant}",
                    unit,
                    scaled,
                ),
                "latest": scaled[-1][1] if scaled else None,
            }
        )
    min_depth = min((row.depth for row in mine), default=0)
    return {
        "tenant": tenant,
        "queues": view.queues,
        "quota_rows": mine,
        "min_depth": min_depth,
        "fair_share": view.fair_share,
        "usage_charts": usage_charts,
        "last_cycle_at": queries.last_cycle_at(),
        "live_url": reverse("tenant", args=[tenant.name]) + "?partial=live",
    }
