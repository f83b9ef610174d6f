"""GET /api/v1/cluster/: the cluster overview."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.conf import settings
from django.db.models import Count, Max, Q
from drf_spectacular.utils import extend_schema
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api import serializers as s
from portal.api.permissions import TokenScope
from queueing import access
from queueing.choices import HOLDING_PHASES, WAITING_PHASES
from queueing.cluster import get_cluster
from queueing.models import (
    CycleRun,
    Quota,
    UsageSample,
    Workload,
)


def _add(total: dict[str, int], amounts: dict[str, Any], times: int = 1) -> None:
    for resource, amount in (amounts or {}).items():
        total[resource] = total.get(resource, 0) + int(amount) * times


class ClusterView(APIView):
    """Capacity, usage and runtime quota per quota (the quotas you can see)."""

    permission_classes = [IsAuthenticated, TokenScope]

    @extend_schema(responses=s.ClusterSerializer)
    def get(self, request: Request) -> Response:
        nodes = get_cluster().nodes()
        allocatable: dict[str, int] = {}
        reserved: dict[str, int] = {}
        for node in nodes:
            if node.unschedulable:
                continue
            _add(allocatable, dict(node.allocatable))
            _add(reserved, dict(node.reserved))

        quotas = list(
            access.visible_quotas(request.user)
            .select_related("tenant", "parent")
            .order_by("name", "id")
        )
        ids = [q.pk for q in quotas]
        used: dict[int, dict[str, int]] = defaultdict(dict)
        pending: dict[int, dict[str, int]] = defaultdict(dict)
        counts: dict[int, dict[str, int]] = defaultdict(dict)
        # Identical shapes collapse in the GROUP BY, so this reads few rows even when
        # tens of thousands of workloads wait.
        live = (
            Workload.objects.filter(phase__in=(*WAITING_PHASES, *HOLDING_PHASES))
            .values("quota_id", "phase", "total_request")
            .annotate(n=Count("id"))
            .order_by()
        )
        for row in live:
            quota_id, phase, n = row["quota_id"], row["phase"], row["n"]
            target = used if phase in HOLDING_PHASES else pending
            _add(target[quota_id], row["total_request"], n)
            counts[quota_id][phase] = counts[quota_id].get(phase, 0) + n
        cluster_used: dict[str, int] = {}
        for amounts in used.values():
            _add(cluster_used, amounts)
        # A parent holds what its subtree holds.
        parent_of = dict(Quota.objects.values_list("id", "parent_id"))
        rolled_used: dict[int, dict[str, int]] = defaultdict(dict)
        rolled_pending: dict[int, dict[str, int]] = defaultdict(dict)
        rolled_counts: dict[int, dict[str, int]] = defaultdict(dict)
        for quota_id in set(used) | set(pending):
            at: int | None = quota_id
            seen: set[int] = set()
            while at is not None and at not in seen:
                seen.add(at)
                _add(rolled_used[at], used.get(quota_id, {}))
                _add(rolled_pending[at], pending.get(quota_id, {}))
                _add(rolled_counts[at], counts.get(quota_id, {}))
                at = parent_of.get(at)

        latest = dict(
            UsageSample.objects.filter(quota_id__in=ids)
            .values("quota_id")
            .annotate(at=Max("at"))
            .values_list("quota_id", "at")
        )
        runtime: dict[int, tuple[dict[str, int], Any]] = {}
        if latest:
            condition = Q()
            for quota_id, latest_at in latest.items():
                condition |= Q(quota_id=quota_id, at=latest_at)
            for quota_id, sampled_at, values in UsageSample.objects.filter(condition).values_list(
                "quota_id", "at", "runtime"
            ):
                runtime[quota_id] = (values, sampled_at)

        free = {
            resource: max(0, amount - reserved.get(resource, 0) - cluster_used.get(resource, 0))
            for resource, amount in allocatable.items()
        }
        last_cycle = (
            CycleRun.objects.order_by("-started_at").values_list("started_at", flat=True).first()
        )
        return Response(
            s.ClusterSerializer(
                {
                    "mode": settings.KQ_CLUSTER,
                    "capacity": {
                        "nodes": len(nodes),
                        "schedulable_nodes": sum(1 for n in nodes if not n.unschedulable),
                        "allocatable": allocatable,
                        "reserved": reserved,
                        "used": cluster_used,
                        "free": free,
                    },
                    "quotas": [
                        {
                            "id": q.pk,
                            "name": q.name,
                            "tenant": q.tenant.name if q.tenant else None,
                            "parent": q.parent.name if q.parent else None,
                            "min": q.min,
                            "max": q.max,
                            "used": rolled_used.get(q.pk, {}),
                            "pending": rolled_pending.get(q.pk, {}),
                            "runtime": runtime.get(q.pk, ({}, None))[0],
                            "runtime_at": runtime.get(q.pk, ({}, None))[1],
                            "workloads": rolled_counts.get(q.pk, {}),
                        }
                        for q in quotas
                    ],
                    "last_cycle": last_cycle,
                }
            ).data
        )
