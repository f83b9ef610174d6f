"""Tenants and memberships."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework import mixins
from rest_framework.serializers import BaseSerializer

from portal.api import filtersets
from portal.api import serializers as s
from portal.api.views.base import BaseViewSet, actor
from queueing import access, actions
from queueing.models import (
    Membership,
    Tenant,
)


class TenantViewSet(
    BaseViewSet,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
):
    """Tenants you belong to (all of them for cluster admins)."""

    serializer_class = s.TenantSerializer
    named = True
    lookup_value_regex = "[^/]+"
    ordering_fields = ("id", "name", "created_at")
    ordering = ("name",)

    def get_queryset(self) -> QuerySet[Tenant]:
        return access.visible_tenants(self.request.user)

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        if self.request is not None and self.request.user.is_authenticated:
            context["roles"] = access.roles_by_tenant(self.request.user)
        return context

    def may_create(self, serializer: BaseSerializer) -> bool:
        return access.can_edit_tenant(self.request.user)

    def may_change(self, obj: Tenant) -> bool:
        return access.can_edit_tenant(self.request.user, obj)

    def perform_destroy(self, instance: Tenant) -> None:
        actions.delete_tenant(actor(self.request), instance)


class MembershipViewSet(
    BaseViewSet,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
):
    """Who belongs to your tenants, and as what. Tenant admins manage them."""

    serializer_class = s.MembershipSerializer
    filterset_class = filtersets.MembershipFilterSet
    ordering_fields = ("id", "created_at")
    ordering = ("tenant__name", "user__username")

    def get_queryset(self) -> QuerySet[Membership]:
        return access.visible(
            Membership.objects.select_related("tenant", "user"), self.request.user
        )

    def may_create(self, serializer: BaseSerializer) -> bool:
        return access.can_manage_members(self.request.user, serializer.validated_data["tenant"].pk)

    def may_change(self, obj: Membership) -> bool:
        return access.can_manage_members(self.request.user, obj.tenant_id)

    def perform_destroy(self, instance: Membership) -> None:
        actions.remove_membership(actor(self.request), instance)
