"""GET /api/v1/cluster/: the cluster overview."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal import overview
from portal.api import serializers as s
from portal.api.permissions import TokenScope
from queueing import access


class ClusterView(APIView):
    """Capacity, usage and runtime quota per quota (the quotas you can see)."""

    permission_classes = [IsAuthenticated, TokenScope]

    @extend_schema(responses=s.ClusterSerializer)
    def get(self, request: Request) -> Response:
        quotas = access.visible_quotas(request.user).select_related("tenant", "parent")
        # The cycle's node view: no cycle yet is no nodes, not an error.
        view = overview.cluster_overview(list(quotas))
        rows = sorted(view.quotas, key=lambda row: (row.quota.name, row.quota.pk))
        return Response(
            s.ClusterSerializer(
                {
                    "mode": settings.KQ_CLUSTER,
                    "capacity": view.capacity,
                    "quotas": [
                        {
                            "id": row.quota.pk,
                            "name": row.quota.name,
                            "tenant": row.quota.tenant.name if row.quota.tenant else None,
                            "parent": row.quota.parent.name if row.quota.parent else None,
                            "min": row.quota.min,
                            "max": row.quota.max,
                            "used": row.used,
                            "pending": row.pending,
                            "runtime": row.runtime or {},
                            # The runtime quota is the latest cycle's (Quota.runtime).
                            "runtime_at": view.last_cycle if row.runtime is not None else None,
                            "workloads": row.workloads,
                        }
                        for row in rows
                    ],
                    "last_cycle": view.last_cycle,
                }
            ).data
        )
