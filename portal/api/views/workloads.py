"""Workloads: list (rows read in one query), detail, submit, cancel, timeline."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, QuerySet, Subquery, Value
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from portal.api import filtersets
from portal.api import serializers as s
from portal.api.pagination import Pagination
from portal.api.views.base import BaseViewSet, actor
from queueing import access, actions
from queueing.models import (
    Workload,
)


class WorkloadViewSet(
    BaseViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin
):
    """Workloads of your tenants. Submit with POST; cancel with POST .../cancel/."""

    filterset_class = filtersets.WorkloadFilterSet
    ordering_fields = (
        "id",
        "name",
        "priority",
        "phase",
        "queue_order_at",
        "created_at",
        "position",
        "global_position",
        "eta_p50",
    )
    ordering = ("-id",)

    def get_queryset(self) -> QuerySet[Workload]:
        queryset = Workload.objects.all()
        if self.action != "list":
            queryset = queryset.select_related("tenant", "quota", "queue", "submitted_by")
        return access.visible(queryset, self.request.user)

    @extend_schema(responses=s.WorkloadSerializer(many=True))
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """One statement per page, whatever the table size:

            SELECT <row values>, (SELECT COUNT(*) FROM <matching>) AS total
            FROM workload ... WHERE id IN (SELECT id FROM <matching> ORDER BY ... LIMIT n)
            ORDER BY ...

        The inner select sorts and slices ids only (a late row lookup: sorting 50,000
        full rows costs more than the rest of the request); the page's rows are read as
        values with the names joined in (no model instances); the count rides along as
        an uncorrelated subquery, run once. Each round trip to the database counts when
        the machine is busy.
        """
        matching = self.filter_queryset(self.get_queryset())
        paginator = self.paginator
        assert isinstance(paginator, Pagination)
        limit = paginator.get_limit(request) or paginator.default_limit
        offset = paginator.get_offset(request)
        total = Subquery(
            matching.order_by()
            .annotate(one=Value(1))
            .values("one")
            .annotate(n=Count("*"))  # COUNT(*): an index-only scan can answer it
            .values("n")
        )
        page = list(
            Workload.objects.filter(id__in=matching.values("id")[offset : offset + limit])
            .annotate(total=total)
            .order_by(*matching.query.order_by)
            .values(*s.WORKLOAD_ROW_VALUES, "total")
        )
        # Past the last page no row carries the total: count it then.
        count = page[0]["total"] if page else (matching.count() if offset else 0)
        paginator.request, paginator.limit, paginator.offset, paginator.count = (
            request,
            limit,
            offset,
            count,
        )
        return self.get_paginated_response([s.workload_list_row(values) for values in page])

    def get_serializer_class(self) -> type[BaseSerializer]:
        if self.action == "create":
            return s.WorkloadSubmitSerializer
        if self.action == "list":
            return s.WorkloadSerializer
        if self.action == "cancel":
            return s.CancelSerializer
        return s.WorkloadDetailSerializer

    def detail_write(self, action_name: str | None) -> bool:
        return action_name == "cancel"

    def may_create(self, serializer: BaseSerializer) -> bool:
        return access.can_submit(self.request.user, serializer.tenant_id())  # type: ignore[attr-defined]

    def may_change(self, obj: Workload) -> bool:
        return access.can_submit(self.request.user, obj.tenant_id)

    @extend_schema(request=s.WorkloadSubmitSerializer, responses={201: s.WorkloadDetailSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        self.perform_create(serializer)
        workload = self.get_queryset().get(pk=serializer.instance.pk)  # type: ignore[union-attr]
        data = s.WorkloadDetailSerializer(workload, context=self.get_serializer_context()).data
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.CancelSerializer, responses=s.WorkloadDetailSerializer)
    @action(detail=True, methods=["post"], filter_backends=[])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Stop a workload: its job is deleted from the cluster and it becomes Cancelled."""
        workload = self.get_object()
        serializer = s.CancelSerializer(
            data=request.data or {}, context=self.get_serializer_context()
        )
        serializer.is_valid(raise_exception=True)
        actions.cancel_workload(
            actor(request), workload, reason=serializer.validated_data.get("reason", "")
        )
        workload = self.get_queryset().get(pk=workload.pk)
        return Response(
            s.WorkloadDetailSerializer(workload, context=self.get_serializer_context()).data
        )

    @extend_schema(responses=s.WorkloadEventSerializer(many=True), filters=False)
    @action(detail=True, pagination_class=None, filter_backends=[])
    def events(self, request: Request, pk: str | None = None) -> Response:
        """The workload's timeline: every phase change, oldest first."""
        workload = self.get_object()
        events = workload.events.order_by("at", "id")[:1000]
        return Response(s.WorkloadEventSerializer(events, many=True).data)
