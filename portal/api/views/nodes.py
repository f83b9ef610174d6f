"""Nodes of the simulated cluster."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from rest_framework import exceptions, mixins
from rest_framework.request import Request
from rest_framework.serializers import BaseSerializer

from portal.api import serializers as s
from portal.api.views.base import BaseViewSet, actor
from queueing import access, actions
from queueing.models import (
    SimNode,
)


class SimNodeViewSet(
    BaseViewSet,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
):
    """Nodes of the simulated cluster (simulated mode only). Cluster admins shape them."""

    serializer_class = s.SimNodeSerializer
    named = True
    lookup_value_regex = "[^/]+"
    ordering_fields = ("id", "name", "created_at")
    ordering = ("name",)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        if settings.KQ_CLUSTER != "simulated":
            raise exceptions.NotFound("There is no simulated cluster in kubernetes mode.")
        super().initial(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[SimNode]:
        return SimNode.objects.order_by("name", "id")

    def may_create(self, serializer: BaseSerializer) -> bool:
        return access.can_shape_cluster(self.request.user)

    def may_change(self, obj: SimNode) -> bool:
        return access.can_shape_cluster(self.request.user)

    def perform_destroy(self, instance: SimNode) -> None:
        actions.delete_sim_node(actor(self.request), instance)
