"""The cluster page for cluster admins: nodes, the whole quota tree, recent cycles."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from portal import charts, overview, queries
from portal.views.common import page_number, require_cluster_admin
from queueing.models import Quota

NODES_PER_PAGE = 100


@login_required
def cluster_page(request: HttpRequest) -> HttpResponse:
    require_cluster_admin(request)
    context = cluster_context(page_number(request))
    if request.GET.get("partial") == "live":
        return render(request, "portal/_cluster_live.html", context)
    return render(request, "portal/cluster.html", context)


def cluster_context(page: int) -> dict[str, Any]:
    latest = queries.latest_holds()
    view = overview.cluster_overview(list(Quota.objects.select_related("tenant", "parent")), latest)
    held = queries.node_usage()
    holds = queries.node_holds(latest)
    pools: dict[str, dict[str, dict[str, int]]] = {}
    rows = []
    for node in view.nodes:
        pool = node.labels.get("koord-queue/pool", "") or "—"
        used = held.get(node.name, {})
        kept_for = holds.get(node.name, [])
        kept: dict[str, int] = {}
        for h in kept_for:
            queries.add_into(kept, h.resources)
        # At most what the node has free now (a hold read from the last cycle may
        # outlast room that work has taken since); the pool adds up the nodes'.
        kept = {k: min(v, _free(node.allocatable, node.reserved, used, k)) for k, v in kept.items()}
        totals = pools.setdefault(
            pool, {"allocatable": {}, "reserved": {}, "used": {}, "kept": {}, "count": {}}
        )
        queries.add_into(totals["allocatable"], node.allocatable)
        queries.add_into(totals["reserved"], node.reserved)
        queries.add_into(totals["used"], used)
        queries.add_into(totals["kept"], kept)
        queries.add_into(totals["count"], {"nodes": 1})
        rows.append(
            {
                "node": node,
                "pool": pool,
                "kept_for": kept_for,
                "bars": [
                    _bar(name, node.allocatable, node.reserved, used, kept)
                    for name in queries.resource_order(node.allocatable)
                    if name != "pods"
                ],
            }
        )
    pool_rows = [
        {
            "name": name,
            "nodes": totals["count"].get("nodes", 0),
            "bars": [
                _bar(
                    resource,
                    totals["allocatable"],
                    totals["reserved"],
                    totals["used"],
                    totals["kept"],
                )
                for resource in queries.resource_order(totals["allocatable"])
                if resource != "pods"
            ],
        }
        for name, totals in sorted(pools.items())
    ]
    paginator = Paginator(rows, NODES_PER_PAGE)
    node_page = paginator.get_page(page)
    tree = view.quotas
    cycles = queries.recent_cycles(60)
    chronological = list(reversed(cycles))
    chart = charts.bar_chart(
        "cycle-durations",
        "Duration of recent admission cycles",
        "ms",
        [(f"{c.started_at:%H:%M:%S}", c.duration_ms, c.engine_ms) for c in chronological],
    )
    return {
        "pools": pool_rows,
        "nodes": node_page,
        "node_count": len(rows),
        "node_error": view.node_error,
        "tree": tree,
        "cycles": cycles[:20],
        "cycle_chart": chart,
    }


def _bar(name: str, allocatable: Any, reserved: Any, used: Any, kept: Any) -> dict[str, Any]:
    """One resource of a node (or pool): its values and the stack's geometry."""
    values = {
        "allocatable": int(allocatable.get(name, 0)),
        "reserved": int(reserved.get(name, 0)),
        "used": int(used.get(name, 0)),
    }
    values["kept"] = min(int(kept.get(name, 0)), _free(allocatable, reserved, used, name))
    return {"resource": name, "values": values, "stack": _stack(values)}


def _free(allocatable: Any, reserved: Any, used: Any, name: str) -> int:
    return max(
        0, int(allocatable.get(name, 0)) - int(reserved.get(name, 0)) - int(used.get(name, 0))
    )


def _stack(values: dict[str, int]) -> dict[str, float]:
    """Percentages of a node's capacity: reserved by others, held by the queue, kept
    free for waiting workloads, free."""
    total = values["allocatable"]
    if total <= 0:
        return {"reserved": 0.0, "used": 0.0, "kept": 0.0, "free": 0.0}
    r = 100.0 * values["reserved"] / total
    u = 100.0 * values["used"] / total
    k = 100.0 * values["kept"] / total
    return {"reserved": r, "used": u, "kept": k, "free": max(0.0, 100.0 - r - u - k)}
