"""The workload page: explanation, timeline, the cluster object, and cancel."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from portal import queries
from portal.views.common import require_role, role_flags, visible_tenant_or_404
from queueing import actions, compat
from queueing.actions import ActionError, Actor
from queueing.choices import TERMINAL_PHASES, WAITING_PHASES, Role, Source
from queueing.models import Workload


def workload_or_404(tenant_id: int, pk: int) -> Workload:
    workload = (
        Workload.objects.select_related("queue", "quota", "tenant", "submitted_by")
        .filter(tenant_id=tenant_id, pk=pk)
        .first()
    )
    if workload is None:
        raise Http404("No such workload.")
    return workload


def explanation_context(workload: Workload) -> dict[str, Any]:
    """The stored explanation with the workloads it names resolved to links."""
    explanation = dict(workload.explanation or {})
    named = set(explanation.get("ahead") or []) | set(explanation.get("victims") or [])
    if explanation.get("blocked_by"):
        named.add(explanation["blocked_by"])
    lookup: dict[int, dict[str, Any]] = {
        w["id"]: dict(w)
        for w in Workload.objects.filter(pk__in=[int(i) for i in named]).values(
            "id", "name", "namespace", "tenant_id", "tenant__name", "phase", "priority"
        )
    }

    def resolve(ids: Any) -> list[dict[str, Any]]:
        return [lookup.get(int(i), {"id": int(i), "name": f"#{i}"}) for i in ids or []]

    resources = set()
    for key in ("shortfall", "largest_free_slot", "to_free", "borrowable"):
        resources |= set(explanation.get(key) or {})
    return {
        "explanation": explanation,
        "ahead": resolve(explanation.get("ahead")),
        "victims": resolve(explanation.get("victims")),
        "blocked_by": resolve([explanation["blocked_by"]]) if explanation.get("blocked_by") else [],
        "explain_resources": queries.resource_order(resources),
        "known_keys": {
            "workload_id",
            "kind",
            "quota",
            "shortfall",
            "limit",
            "largest_free_slot",
            "eligible_nodes",
            "ahead",
            "blocked_by",
            "to_free",
            "victims",
            "borrowable",
            "requeue_at",
            "detail",
            "sentence",
        },
    }


@login_required
def workload_page(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    tenant = visible_tenant_or_404(request, name)
    workload = workload_or_404(tenant.pk, pk)
    context: dict[str, Any] = {
        "tenant": tenant,
        "w": workload,
        "row": queries.wire_rows(Workload.objects.filter(pk=workload.pk))[0],
        "timeline": list(workload.events.order_by("at", "id")),
        "waiting": workload.phase in WAITING_PHASES,
        "finished": workload.phase in TERMINAL_PHASES,
        "kube_phase": compat.kube_queue_phase(workload.phase),
        "kubectl": f"kubectl -n {workload.namespace} get {workload.kind.lower()} {workload.name} -o yaml",
        "pod_sets": [
            {**ps, "resources": queries.resource_order(ps.get("requests") or {})}
            for ps in workload.pod_sets
        ],
        **explanation_context(workload),
        **role_flags(request, tenant),
    }
    if request.GET.get("partial") == "live":
        return render(request, "portal/_workload_live.html", context)
    return render(request, "portal/workload.html", context)


@login_required
@require_POST
def workload_cancel(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    tenant = visible_tenant_or_404(request, name)
    workload = workload_or_404(tenant.pk, pk)
    require_role(request, tenant, Role.MEMBER)
    reason = request.POST.get("reason", "").strip()[:500]
    try:
        actions.cancel_workload(Actor.of(request.user, Source.UI), workload, reason=reason)
        messages.success(request, f"{workload} is cancelled.")
    except ActionError as exc:
        messages.error(request, str(exc))
    return redirect("workload", name=tenant.name, pk=workload.pk)
