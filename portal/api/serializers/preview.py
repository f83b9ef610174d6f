"""What-if previews of a quota edit or a new quota."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from portal.api.fields import (
    FiniteFloatField,
    NameField,
    ResourcesField,
)
from portal.api.serializers.base import StrictSerializer, quotas_of, tenants_of


class NewQuotaPreviewSerializer(StrictSerializer):
    """A quota that does not exist yet, as POST /quotas/ would create it."""

    name = serializers.CharField(max_length=63)
    parent = NameField(  # type: ignore[assignment]  # a field, not Field.parent
        quotas_of, help_text="The quota to create it under."
    )
    tenant = NameField(
        tenants_of,
        allow_null=True,
        required=False,
        help_text="Owning tenant; defaults to the parent's.",
    )
    min = ResourcesField(required=False)
    max = ResourcesField(required=False)
    shared_weight = ResourcesField(required=False)
    fair_weight = FiniteFloatField(required=False)
    allow_lent = serializers.BooleanField(required=False)
    namespaces = serializers.ListField(
        child=serializers.CharField(max_length=63), required=False, max_length=100
    )


class PreviewSerializer(StrictSerializer):
    """A proposed quota change -- an existing ``quota`` and the fields you would change,
    or a ``new`` quota; the answer predicts its effect and nothing is saved."""

    quota = NameField(quotas_of, required=False, help_text="The quota to change.")
    min = ResourcesField(required=False)
    max = ResourcesField(required=False)
    shared_weight = ResourcesField(required=False)
    fair_weight = FiniteFloatField(required=False)
    allow_lent = serializers.BooleanField(required=False)
    new = NewQuotaPreviewSerializer(required=False, help_text="A quota to create instead.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "new" in attrs:
            extra = sorted(set(attrs) - {"new"})
            if extra:
                raise serializers.ValidationError(
                    {extra[0]: ["Give either a quota to change or a new quota, not both."]}
                )
        elif "quota" not in attrs:
            raise serializers.ValidationError(
                {"quota": ["Name the quota to change, or describe a new one."]}
            )
        return attrs

    def changes(self) -> dict[str, Any]:
        return {k: v for k, v in self.validated_data.items() if k != "quota"}


class PreviewStateSerializer(serializers.Serializer):
    """A quota's amounts at one side of the change."""

    runtime = ResourcesField()
    used = ResourcesField()
    min = ResourcesField()
    max = ResourcesField()


class PreviewQuotaSerializer(serializers.Serializer):
    """A quota before and after the change."""

    name = serializers.CharField()
    before = PreviewStateSerializer()
    after = PreviewStateSerializer()
    changed = serializers.BooleanField()


class PreviewPlaceSerializer(serializers.Serializer):
    """Where a workload stands at one side of the change."""

    position = serializers.IntegerField(allow_null=True)
    global_position = serializers.IntegerField(allow_null=True)
    eta_p50 = serializers.DateTimeField(allow_null=True)
    eta_p90 = serializers.DateTimeField(allow_null=True)
    admitted = serializers.BooleanField()


class PreviewWorkloadSerializer(serializers.Serializer):
    """A workload before and after the change."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    namespace = serializers.CharField()
    queue = serializers.CharField()
    before = PreviewPlaceSerializer()
    after = PreviewPlaceSerializer()


class PreviewFullDemandSerializer(serializers.Serializer):
    """A quota whose runtime quota the change would move if every quota asked for all
    it may hold (what a weight or max edit does under contention)."""

    name = serializers.CharField()
    before = ResourcesField()
    after = ResourcesField()


class PreviewResultSerializer(serializers.Serializer):
    """The predicted effect of a quota change."""

    quotas = PreviewQuotaSerializer(many=True, help_text="Every quota of the tree you may see.")
    workloads = PreviewWorkloadSerializer(
        many=True, help_text="Your waiting workloads whose admission, position or ETA changes."
    )
    summary = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="Counts over the whole tree: admitted, preempted and changed, before and after.",
    )
    full_demand = PreviewFullDemandSerializer(
        many=True,
        help_text="Runtime quotas (of quotas you may see) that the change would move under "
        "full demand: useful when it changes nothing now.",
    )
