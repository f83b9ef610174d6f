"""Nodes of the simulated cluster."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from portal.api.fields import (
    ResourcesField,
    StringMapField,
    reject_nul,
)
from portal.api.serializers.base import StrictModelSerializer, StrictSerializer, actor_of
from queueing import actions
from queueing.models import (
    SimNode,
)
from queueing.validation import canonical


class TaintSerializer(StrictSerializer):
    """A Kubernetes node taint."""

    key = serializers.CharField(max_length=317)
    value = serializers.CharField(required=False, allow_blank=True, default="", max_length=63)
    effect = serializers.ChoiceField(choices=["NoSchedule", "PreferNoSchedule", "NoExecute"])


class SimNodeSerializer(StrictModelSerializer):
    """A node of the simulated cluster."""

    allocatable = ResourcesField()
    reserved = ResourcesField(required=False)
    labels = StringMapField(required=False)
    taints = TaintSerializer(many=True, required=False, max_length=32)  # type: ignore[call-arg]

    immutable = ("name",)

    class Meta:
        model = SimNode
        fields = (
            "id",
            "name",
            "allocatable",
            "reserved",
            "labels",
            "taints",
            "unschedulable",
            "created_at",
        )
        read_only_fields = ("created_at",)
        extra_kwargs = {"name": {"validators": [], "max_length": 253}}

    def validate_name(self, value: str) -> str:
        reject_nul(value, "name")
        if self.instance is None and SimNode.objects.filter(name=value).exists():
            raise serializers.ValidationError(f"A node named {value!r} already exists.")
        return value

    def create(self, validated_data: dict[str, Any]) -> SimNode:
        return actions.upsert_sim_node(actor_of(self), **validated_data)

    def update(self, instance: SimNode, validated_data: dict[str, Any]) -> SimNode:
        current = {
            "allocatable": instance.allocatable,
            "reserved": instance.reserved,
            "labels": instance.labels,
            "taints": instance.taints,
            "unschedulable": instance.unschedulable,
        }
        for key in ("allocatable", "reserved"):  # canonical already: not parsed again
            current[key] = canonical(current[key])
        current.update(validated_data)
        return actions.upsert_sim_node(actor_of(self), name=instance.name, **current)
