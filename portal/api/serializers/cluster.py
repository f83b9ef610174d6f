"""The cluster overview, cycles, the audit log and the caller."""

from __future__ import annotations

from rest_framework import serializers

from portal.api.fields import (
    NameField,
    ResourcesField,
)
from queueing.choices import (
    Role,
)
from queueing.models import (
    AuditEvent,
    CycleRun,
)


class ClusterQuotaSerializer(serializers.Serializer):
    """A quota's limits, usage and runtime quota (its subtree included)."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    tenant = serializers.CharField(allow_null=True)
    parent = serializers.CharField(allow_null=True)  # type: ignore[assignment]
    min = ResourcesField()
    max = ResourcesField()
    used = ResourcesField(help_text="Requests of its admitted and running workloads.")
    pending = ResourcesField(help_text="Requests of its waiting workloads.")
    runtime = ResourcesField(help_text="What it may use now, as of the last cycle.")
    runtime_at = serializers.DateTimeField(allow_null=True)
    workloads = serializers.DictField(child=serializers.IntegerField(), help_text="By phase.")


class ClusterCapacitySerializer(serializers.Serializer):
    """Schedulable nodes' capacity, in total."""

    nodes = serializers.IntegerField()
    schedulable_nodes = serializers.IntegerField()
    allocatable = ResourcesField()
    reserved = ResourcesField(help_text="Used by pods the queue does not manage.")
    used = ResourcesField(help_text="Held by admitted and running workloads.")
    free = ResourcesField()
    kept = ResourcesField(
        help_text=(
            "Of free, what the latest cycles kept for waiting workloads: drains for "
            "aged gangs that fit their quota but not the nodes, and the room preemptors "
            "need beyond what their victims release."
        )
    )


class ClusterSerializer(serializers.Serializer):
    """The cluster at a glance."""

    mode = serializers.ChoiceField(choices=["simulated", "kubernetes"])
    capacity = ClusterCapacitySerializer()
    quotas = ClusterQuotaSerializer(many=True)
    last_cycle = serializers.DateTimeField(allow_null=True)


class CycleRunSerializer(serializers.ModelSerializer):
    """One admission cycle: what it decided and how long it took."""

    class Meta:
        model = CycleRun
        fields = (
            "id",
            "root",
            "started_at",
            "duration_ms",
            "engine_ms",
            "admitted",
            "preempted",
            "requeued",
            "pending",
            "running",
            "conflicts",
            "errors",
            "worker",
            "stats",
        )
        read_only_fields = fields


class AuditEventSerializer(serializers.ModelSerializer):
    """Who changed what, when, with the state before and after."""

    actor = serializers.CharField(source="actor_name", read_only=True)
    tenant = NameField(read_only=True, allow_null=True)

    class Meta:
        model = AuditEvent
        fields = (
            "id",
            "at",
            "actor",
            "source",
            "action",
            "object_type",
            "object_id",
            "object_repr",
            "tenant",
            "before",
            "after",
        )
        read_only_fields = fields


class MeSerializer(serializers.Serializer):
    """Who is calling: the user, their roles, and the token's scope."""

    username = serializers.CharField()
    cluster_admin = serializers.BooleanField()
    roles = serializers.DictField(
        child=serializers.ChoiceField(choices=Role.choices), help_text="Tenant name -> role."
    )
    token = serializers.DictField(
        allow_null=True, help_text="The token in use (prefix, read_only, expires_at), if any."
    )
