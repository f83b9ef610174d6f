"""Tenants and memberships."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.api.fields import (
    NameField,
    reject_nul,
)
from portal.api.serializers.base import StrictModelSerializer, active_users, actor_of, tenants_of
from queueing import access, actions
from queueing.choices import (
    Role,
)
from queueing.models import (
    Membership,
    Tenant,
)


class TenantSerializer(StrictModelSerializer):
    """A team: owns quotas, queues and workloads. ``role`` is yours in it."""

    role = serializers.SerializerMethodField(help_text="Your role in this tenant.")

    immutable = ("name",)

    class Meta:
        model = Tenant
        fields = ("id", "name", "display_name", "description", "role", "created_at")
        extra_kwargs = {"display_name": {"max_length": 200}}

    @extend_schema_field(
        {"type": "string", "enum": [*Role.values], "nullable": True, "readOnly": True}
    )
    def get_role(self, tenant: Tenant) -> str | None:
        roles = self.context.get("roles")
        if roles is None or tenant.pk not in roles:  # not read ahead (a tenant just created)
            return access.role_in(self.context["request"].user, tenant.pk)
        return roles[tenant.pk]

    def validate_description(self, value: str) -> str:
        reject_nul(value, "description")
        return value

    def create(self, validated_data: dict[str, Any]) -> Tenant:
        return actions.create_tenant(actor_of(self), **validated_data)

    def update(self, instance: Tenant, validated_data: dict[str, Any]) -> Tenant:
        return actions.update_tenant(actor_of(self), instance, **validated_data)


class MembershipSerializer(StrictModelSerializer):
    """A user's role in a tenant: viewers read, members submit, admins edit."""

    tenant = NameField(tenants_of, help_text="Tenant name.")
    user = NameField(active_users, attr="username", help_text="Username.")
    role = serializers.ChoiceField(choices=Role.choices)

    immutable = ("tenant", "user")

    class Meta:
        model = Membership
        fields = ("id", "tenant", "user", "role", "created_at")
        validators: list[Any] = []  # validate() says "already a member" by field

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        if (
            self.instance is None
            and Membership.objects.filter(tenant=attrs["tenant"], user=attrs["user"]).exists()
        ):
            raise serializers.ValidationError(
                {"user": [f"{attrs['user']} is already a member; change the role instead."]}
            )
        return attrs

    def create(self, validated_data: dict[str, Any]) -> Membership:
        return actions.set_membership(
            actor_of(self), validated_data["tenant"], validated_data["user"], validated_data["role"]
        )

    def update(self, instance: Membership, validated_data: dict[str, Any]) -> Membership:
        role = validated_data.get("role", instance.role)
        return actions.set_membership(actor_of(self), instance.tenant, instance.user, role)
