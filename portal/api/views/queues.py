"""Queues."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from django.db.models import Count, F, Q, QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from portal.api import filtersets
from portal.api import serializers as s
from portal.api.views.base import VersionedCrudViewSet, actor, if_match_schema
from queueing import access, actions
from queueing.choices import WAITING_PHASES, Phase
from queueing.models import (
    Queue,
    Quota,
    Workload,
)


@if_match_schema
class QueueViewSet(VersionedCrudViewSet):
    """Queues of your tenants, with how many workloads wait, hold admission and run."""

    serializer_class = s.QueueSerializer
    filterset_class = filtersets.QueueFilterSet
    named = True
    lookup_value_regex = "[^/]+"
    ordering_fields = ("id", "name", "priority", "created_at")
    ordering = ("-priority", "name")

    def get_queryset(self) -> QuerySet[Queue]:
        queryset = access.visible(Queue.objects.select_related("tenant"), self.request.user)
        if self.action in ("list", "retrieve"):
            queryset = queryset.annotate(
                pending=Count("workloads", filter=Q(workloads__phase__in=WAITING_PHASES)),
                admitted=Count("workloads", filter=Q(workloads__phase=Phase.ADMITTED)),
                running=Count("workloads", filter=Q(workloads__phase=Phase.RUNNING)),
            )
        return queryset

    def decorate(self, objects: Sequence[Queue]) -> None:
        names: dict[int, list[str]] = defaultdict(list)
        for queue_id, name in Quota.objects.filter(default_queue__in=objects).values_list(
            "default_queue_id", "name"
        ):
            names[queue_id].append(name)
        for queue in objects:
            queue.default_for = names.get(queue.pk, [])  # type: ignore[attr-defined]

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        queue = self.get_object()
        self.decorate([queue])
        return Response(self.get_serializer(queue).data)

    def may_create(self, serializer: BaseSerializer) -> bool:
        return access.can_edit_queue(self.request.user, serializer.validated_data["tenant"].pk)

    def may_change(self, obj: Queue) -> bool:
        return access.can_edit_queue(self.request.user, obj.tenant_id)

    def perform_destroy(self, instance: Queue) -> None:
        actions.delete_queue(
            actor(self.request), instance, expected_version=self.expected_for_delete()
        )

    @extend_schema(
        responses=s.PendingWorkloadSerializer(many=True),
        filters=False,
        description="The visibility list: every waiting workload of the queue in the order "
        "the engine would consider it, with its position, ETA (p50, p90) and why it waits.",
    )
    @action(detail=True, filter_backends=[])
    def pending(self, request: Request, pk: str | None = None) -> Response:
        queue = self.get_object()
        workloads = (
            Workload.objects.filter(queue=queue, phase__in=WAITING_PHASES)
            .select_related("quota")
            .only(*s.PendingWorkloadSerializer.Meta.fields, "quota__name", "queue_id")
            .order_by(
                F("position").asc(nulls_last=True),
                F("global_position").asc(nulls_last=True),
                "queue_order_at",
                "id",
            )
        )
        page = self.paginate_queryset(workloads)
        return self.get_paginated_response(
            s.PendingWorkloadSerializer(page, many=True, context=self.get_serializer_context()).data
        )
