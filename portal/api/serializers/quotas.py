"""Quotas: input parsed once by ResourcesField, written by one action."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.api.fields import (
    INT32,
    FiniteFloatField,
    NameField,
    ResourcesField,
)
from portal.api.serializers.base import (
    POLICY_CHOICES,
    StrictModelSerializer,
    actor_of,
    queues_of,
    quotas_of,
    tenants_of,
)
from queueing import actions
from queueing.choices import (
    Policy,
)
from queueing.models import (
    Quota,
)


def new_quota_arguments(data: Mapping[str, Any]) -> dict[str, Any]:
    """What creating (or previewing) a quota takes from validated data; the tenant
    defaults to the parent's."""
    parent = data.get("parent")
    return {
        "name": data["name"],
        "tenant": data.get("tenant", parent.tenant if parent is not None else None),
        "parent": parent,
        "min": data.get("min"),
        "max": data.get("max"),
        "shared_weight": data.get("shared_weight"),
        "fair_weight": data.get("fair_weight", 1.0),
        "allow_lent": data.get("allow_lent", True),
        "namespaces": data.get("namespaces", ()),
    }


class QuotaSerializer(StrictModelSerializer):
    """A node of the elastic-quota tree. Amounts are Kubernetes quantities."""

    tenant = NameField(
        tenants_of,
        allow_null=True,
        required=False,
        help_text="Owning tenant; defaults to the parent's. Null for cluster-owned nodes.",
    )
    parent = NameField(  # type: ignore[assignment]  # a field, not Field.parent
        quotas_of, allow_null=True, required=False, help_text="Parent quota; null for a root."
    )
    min = ResourcesField(required=False, help_text="Guaranteed amounts.")
    max = ResourcesField(required=False, help_text="Ceiling.")
    shared_weight = ResourcesField(
        required=False, help_text="Weight per resource when idle capacity is shared."
    )
    fair_weight = FiniteFloatField(
        required=False,
        help_text=(
            "Fair-share weight (default 1; greater than 0, at most 1000): the dominant share "
            "that orders quotas is divided by it (Kueue's fairSharing weight)."
        ),
    )
    namespaces = serializers.ListField(
        child=serializers.CharField(max_length=63), required=False, max_length=100
    )
    default_queue = NameField(
        queues_of,
        allow_null=True,
        required=False,
        help_text="Queue its workloads join unless they name one (created with the quota).",
    )
    default_queue_policy = serializers.ChoiceField(
        choices=POLICY_CHOICES,
        write_only=True,
        required=False,
        help_text="Policy of the default queue created with the quota.",
    )
    children = serializers.SerializerMethodField()
    # "source" (a model property, read-only): "kubernetes" when mirrored from kube_ref
    # and edited there (edits here are refused), "here" otherwise.
    kube_ref = serializers.CharField(
        read_only=True,
        help_text="The Kubernetes object it mirrors (Kind namespace/name), or empty.",
    )
    version = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=INT32,
        help_text="Send the version you read; a stale one is refused with 409.",
    )

    immutable = ("name", "tenant")
    create_only = ("default_queue_policy",)

    class Meta:
        model = Quota
        fields = (
            "id",
            "name",
            "tenant",
            "parent",
            "min",
            "max",
            "shared_weight",
            "fair_weight",
            "allow_lent",
            "namespaces",
            "default_queue",
            "default_queue_policy",
            "children",
            "source",
            "kube_ref",
            "version",
            "created_at",
            "updated_at",
        )
        read_only_fields = ("created_at", "updated_at")
        # Uniqueness is the action's to check (with the tree lock held); no extra query here.
        extra_kwargs: dict[str, Any] = {"name": {"validators": []}}

    @extend_schema_field(
        {"type": "array", "items": {"type": "string"}, "readOnly": True, "description": "Names."}
    )
    def get_children(self, quota: Quota) -> list[str]:
        return sorted(child.name for child in quota.children.all())

    def create(self, validated_data: dict[str, Any]) -> Quota:
        if "default_queue" in validated_data:
            raise serializers.ValidationError(
                {"default_queue": ["A new quota gets a default queue of its own."]}
            )
        return actions.create_quota(
            actor_of(self),
            **new_quota_arguments(validated_data),
            default_queue_policy=validated_data.get("default_queue_policy", Policy.PRIORITY),
        )

    def update(self, instance: Quota, validated_data: dict[str, Any]) -> Quota:
        expected = self.context.get("expected_version", validated_data.pop("version", None))
        validated_data.pop("version", None)
        return actions.update_quota(
            actor_of(self), instance, expected_version=expected, **validated_data
        )


class QuotaTreeSerializer(serializers.Serializer):
    """A quota and its subtree (what the caller may see of it)."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    tenant = serializers.CharField(allow_null=True)
    min = ResourcesField()
    max = ResourcesField()
    shared_weight = ResourcesField()
    fair_weight = serializers.FloatField()
    allow_lent = serializers.BooleanField()
    default_queue = serializers.CharField(allow_null=True)
    version = serializers.IntegerField()
    children = serializers.ListField(child=serializers.DictField())
