"""Server-rendered pages. Views read through queries and write through queueing.actions."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.db.models import Count, Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from queueing import access
from queueing.choices import HOLDING_PHASES, WAITING_PHASES, Phase
from queueing.models import Queue, Quota, Tenant, Workload
from queueing.quantities import format_resources


def visible_tenant_or_404(request: HttpRequest, name: str) -> Tenant:
    """A tenant the user may see; any other name is a 404, never a 403."""
    tenant = access.visible_tenants(request.user).filter(name=name).first()
    if tenant is None:
        raise Http404("No such tenant.")
    return tenant


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
    rows = [(tenant, counts.get(tenant.pk, {"pending": 0, "running": 0})) for tenant in tenants]
    return render(request, "portal/home.html", {"rows": rows})


@login_required
def tenant_page(request: HttpRequest, name: str) -> HttpResponse:
    tenant = visible_tenant_or_404(request, name)
    context = tenant_context(tenant)
    context["role"] = access.role_in(request.user, tenant.pk)
    if request.GET.get("partial") == "workloads":
        return render(request, "portal/_workloads.html", context)
    return render(request, "portal/tenant.html", context)


def tenant_context(tenant: Tenant) -> dict[str, Any]:
    queues = list(
        Queue.objects.filter(tenant=tenant).annotate(
            pending=Count("workloads", filter=Q(workloads__phase__in=WAITING_PHASES)),
            admitted=Count("workloads", filter=Q(workloads__phase=Phase.ADMITTED)),
            running=Count("workloads", filter=Q(workloads__phase=Phase.RUNNING)),
        )
    )
    quotas = [
        {
            "quota": quota,
            "min": format_resources(quota.min),
            "max": format_resources(quota.max),
        }
        for quota in Quota.objects.filter(tenant=tenant).select_related("parent")
    ]
    live = Workload.objects.filter(tenant=tenant).select_related("queue", "quota")
    pending = list(
        live.filter(phase__in=WAITING_PHASES).order_by("global_position", "queue_order_at", "id")[
            :200
        ]
    )
    holding = list(live.filter(phase__in=HOLDING_PHASES).order_by("-admitted_at", "-id")[:200])
    finished = list(
        live.filter(phase__in=[Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED]).order_by(
            "-finished_at", "-id"
        )[:20]
    )
    return {
        "tenant": tenant,
        "queues": queues,
        "quotas": quotas,
        "pending": pending,
        "holding": holding,
        "finished": finished,
    }
