"""POST /api/v1/preview/: what-if of a quota edit or a new quota; saves nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api import serializers as s
from portal.api.permissions import TokenScope
from queueing import access, whatif
from queueing.models import (
    Quota,
    Workload,
)


class PreviewView(APIView):
    """What a quota change would do, before you make it. Nothing is saved.

    POST the quota and the fields you would change (as for PATCH /quotas/{id}/); the
    answer gives each affected quota's runtime quota and each affected workload's
    position and ETA before and after. You need the right to edit the quota.
    """

    permission_classes = [IsAuthenticated, TokenScope]
    saves_nothing = True

    @extend_schema(request=s.PreviewSerializer, responses=s.PreviewResultSerializer)
    def post(self, request: Request) -> Response:
        serializer = s.PreviewSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        new = serializer.validated_data.get("new")
        if new is not None:
            if not may_create_quota(request.user, new["parent"], new):
                raise exceptions.PermissionDenied("You may not create a quota there.")
            preview = whatif.preview_quota_create(**s.new_quota_arguments(new)).as_dict()
            return Response(filter_preview(preview, request.user, new=new["name"]))
        quota = serializer.validated_data["quota"]
        if not access.can_edit_quota(request.user, quota):
            raise exceptions.PermissionDenied("You may not change this quota.")
        preview = whatif.preview_quota_change(quota, serializer.changes()).as_dict()
        return Response(filter_preview(preview, request.user))


def may_create_quota(user: Any, parent: Quota | None, data: Mapping[str, Any]) -> bool:
    """Cluster admins anywhere; tenant admins inside their own subtree, for their tenant."""
    if not access.can_create_quota_under(user, parent):
        return False
    if access.is_cluster_admin(user):
        return True
    return "tenant" not in data or (
        parent is not None and data["tenant"] is not None and data["tenant"].pk == parent.tenant_id
    )


def filter_preview(preview: dict[str, Any], user: Any, *, new: str = "") -> dict[str, Any]:
    """Keep what the caller may see: visible quotas (and the one it proposes to
    create), their own tenants' workloads."""
    if access.is_cluster_admin(user):
        return preview
    quota_names = set(access.visible_quotas(user).values_list("name", flat=True))
    if new:
        quota_names.add(new)
    workload_ids = [w["id"] for w in preview.get("workloads", [])]
    visible_ids = set(
        access.visible(Workload.objects.filter(id__in=workload_ids), user).values_list(
            "id", flat=True
        )
    )
    return {
        **preview,
        "quotas": [q for q in preview.get("quotas", []) if q["name"] in quota_names],
        "workloads": [w for w in preview.get("workloads", []) if w["id"] in visible_ids],
        "full_demand": [q for q in preview.get("full_demand", []) if q["name"] in quota_names],
    }
