"""Personal API tokens."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal import tokens
from portal.api.fields import (
    reject_nul,
)
from portal.api.serializers.base import StrictModelSerializer, actor_of
from portal.models import APIToken


class APITokenSerializer(StrictModelSerializer):
    """A personal API token; ``key`` appears once, in the answer to the create."""

    key = serializers.SerializerMethodField(
        help_text="The secret key: in the answer to the create only, never again."
    )

    class Meta:
        model = APIToken
        fields = (
            "id",
            "name",
            "prefix",
            "read_only",
            "expires_at",
            "created_at",
            "last_used_at",
            "key",
        )
        read_only_fields = ("prefix", "created_at", "last_used_at")

    @extend_schema_field({"type": "string", "nullable": True, "readOnly": True})
    def get_key(self, token: APIToken) -> str | None:
        return getattr(token, "key", None)

    def validate_name(self, value: str) -> str:
        reject_nul(value, "name")
        return value

    def create(self, validated_data: dict[str, Any]) -> APIToken:
        request = self.context["request"]
        new = tokens.create_token(actor_of(self), request.user, **validated_data)
        new.token.key = new.key  # type: ignore[attr-defined]  # shown this once
        return new.token
