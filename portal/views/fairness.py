"""Fairness over time: a tenant's (and each of its quotas') entitlement, runtime quota,
usage and decayed usage with preemptions and quota edits marked; and, for cluster
admins, every tenant side by side. The numbers come from portal.fairness."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from portal import fairness, queries
from portal.views.common import require_cluster_admin, role_flags, visible_tenant_or_404
from queueing.models import Quota, UsageSample

DEFAULT_WINDOW = "6h"


def _choice(request: HttpRequest, key: str, allowed: list[str], default: str) -> str:
    value = request.GET.get(key, default)
    return value if value in allowed else default


def _chart(
    chart_id: str, title: str, series: fairness.Series, backfilled_until: Any = None
) -> dict[str, Any]:
    data = series.as_json()
    data["backfilled_until"] = (
        int(backfilled_until.timestamp() * 1000) if backfilled_until is not None else None
    )
    return {
        "id": chart_id,
        "data_id": f"{chart_id}-data",
        "title": title,
        "data": data,
        "table": series.table(),
        "resource": series.resource,
        "marks": series.marks,
        "empty": not series.times,
    }


@login_required
def tenant_fairness(request: HttpRequest, name: str) -> HttpResponse:
    tenant = visible_tenant_or_404(request, name)
    quotas = list(Quota.objects.filter(tenant=tenant).select_related("parent"))
    tops = queries.tenant_top_quotas(tenant, quotas)
    resources = queries.resource_order(
        {r for q in quotas for r in (q.min or {})} | {r for q in quotas for r in (q.max or {})}
    ) or ["cpu"]
    resource = _choice(request, "resource", resources, resources[0])
    window = _choice(request, "window", list(fairness.WINDOWS), DEFAULT_WINDOW)
    since = timezone.now() - fairness.WINDOWS[window]
    backfilled = _backfilled_until([q.pk for q in quotas])
    charts = [
        _chart(
            "fair-tenant",
            f"{tenant}: {resource} entitlement, runtime quota, usage and decayed usage",
            fairness.history(tops, resource, since),
            backfilled,
        )
    ]
    for row in queries.quota_tree(quotas):
        charts.append(
            _chart(
                f"fair-quota-{row.quota.pk}",
                f"Quota {row.quota.name}: {resource}",
                fairness.history([row.quota], resource, since),
                backfilled,
            )
        )
    context = {
        "tenant": tenant,
        "charts": charts,
        "resource": resource,
        "resources": resources,
        "window": window,
        "windows": list(fairness.WINDOWS),
        "backfilled_until": backfilled,
    }
    context.update(role_flags(request, tenant))
    return render(request, "portal/fairness.html", context)


def _backfilled_until(quota_ids: list[int]) -> Any:
    """The end of the demo seed's estimated history, when there is one (it is marked)."""
    return (
        UsageSample.objects.filter(quota_id__in=quota_ids, backfilled=True)
        .order_by("-at")
        .values_list("at", flat=True)
        .first()
    )


@login_required
def cluster_fairness(request: HttpRequest) -> HttpResponse:
    require_cluster_admin(request)
    windows = {"1h": fairness.WINDOWS["1h"], "1d": fairness.WINDOWS["1d"]}
    result = fairness.compare(windows)
    chart = {
        "tenants": [row.tenant.name for row in result["rows"]],
        "hour": [_pct(row.received["1h"]) for row in result["rows"]],
        "day": [_pct(row.received["1d"]) for row in result["rows"]],
    }
    return render(request, "portal/fairness_cluster.html", {"result": result, "chart": chart})


def _pct(value: float | None) -> float | None:
    return None if value is None else round(value * 100, 1)
