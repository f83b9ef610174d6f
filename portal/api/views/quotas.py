"""Quotas."""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from portal.api import filtersets
from portal.api import serializers as s
from portal.api.views.base import VersionedCrudViewSet, actor, if_match_schema
from portal.api.views.preview import may_create_quota
from queueing import access, actions
from queueing.models import (
    Quota,
)
from queueing.quantities import format_resources


@if_match_schema
class QuotaViewSet(VersionedCrudViewSet):
    """The elastic-quota tree: your tenants' quotas and the cluster-owned nodes above them."""

    serializer_class = s.QuotaSerializer
    filterset_class = filtersets.QuotaFilterSet
    named = True
    lookup_value_regex = "[^/]+"
    ordering_fields = ("id", "name", "created_at", "updated_at")
    ordering = ("name",)

    def get_queryset(self) -> QuerySet[Quota]:
        return (
            access.visible_quotas(self.request.user)
            .select_related("tenant", "parent", "default_queue")
            .prefetch_related(
                # Children the caller may see: a cluster-owned node must not name the top
                # quotas of other tenants (those are 404 to this caller).
                Prefetch(
                    "children",
                    queryset=access.visible_quotas(self.request.user).only(
                        "id", "name", "parent_id"
                    ),
                )
            )
        )

    def may_create(self, serializer: BaseSerializer) -> bool:
        data = serializer.validated_data
        return may_create_quota(self.request.user, data.get("parent"), data)

    def may_change(self, obj: Quota) -> bool:
        return access.can_edit_quota(self.request.user, obj)

    def perform_update(self, serializer: BaseSerializer) -> None:
        data = serializer.validated_data
        moved = "parent" in data and data["parent"] != serializer.instance.parent  # type: ignore[union-attr]
        if moved and not access.can_create_quota_under(self.request.user, data["parent"]):
            raise exceptions.PermissionDenied("You may not move a quota under that parent.")
        super().perform_update(serializer)

    def perform_destroy(self, instance: Quota) -> None:
        actions.delete_quota(
            actor(self.request), instance, expected_version=self.expected_for_delete()
        )

    @extend_schema(responses=s.QuotaTreeSerializer(many=True), filters=False)
    @action(detail=False, pagination_class=None, filter_backends=[])
    def tree(self, request: Request) -> Response:
        """The quota forest you can see, nested from each root."""
        rows = list(
            access.visible_quotas(request.user)
            .select_related("tenant", "default_queue")
            .order_by("name", "id")
        )
        nodes: dict[int, dict[str, Any]] = {}
        for quota in rows:
            nodes[quota.pk] = {
                "id": quota.pk,
                "name": quota.name,
                "tenant": quota.tenant.name if quota.tenant else None,
                "min": format_resources(quota.min),
                "max": format_resources(quota.max),
                "shared_weight": format_resources(quota.shared_weight),
                "fair_weight": quota.fair_weight,
                "allow_lent": quota.allow_lent,
                "default_queue": quota.default_queue.name if quota.default_queue else None,
                "version": quota.version,
                "children": [],
            }
        forest: list[dict[str, Any]] = []
        for quota in rows:
            parent = nodes.get(quota.parent_id) if quota.parent_id else None
            (parent["children"] if parent else forest).append(nodes[quota.pk])
        return Response(forest)
