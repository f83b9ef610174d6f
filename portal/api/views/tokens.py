"""Personal API tokens."""

from __future__ import annotations

from django.db.models import QuerySet
from rest_framework import mixins
from rest_framework.serializers import BaseSerializer

from portal.api import serializers as s
from portal.api.views.base import BaseViewSet, actor
from portal.models import APIToken
from portal.tokens import revoke_token


class APITokenViewSet(
    BaseViewSet,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
):
    """Your personal API tokens. The key is in the answer to the create, and never again."""

    serializer_class = s.APITokenSerializer
    ordering_fields = ("id", "created_at", "last_used_at")
    ordering = ("-created_at",)
    queryset = APIToken.objects.none()  # for the schema; requests use get_queryset

    def get_queryset(self) -> QuerySet[APIToken]:
        if not self.request.user.is_authenticated:
            return APIToken.objects.none()
        return APIToken.objects.filter(user=self.request.user)

    def may_create(self, serializer: BaseSerializer) -> bool:
        return True

    def may_change(self, obj: APIToken) -> bool:
        return obj.user_id == self.request.user.pk

    def perform_destroy(self, instance: APIToken) -> None:
        revoke_token(actor(self.request), instance)
