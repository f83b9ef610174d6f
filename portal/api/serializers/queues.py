"""Queues."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.api.fields import (
    INT32,
    FiniteFloatField,
    NameField,
)
from portal.api.serializers.base import (
    POLICY_CHOICES,
    QUEUE_COUNTS,
    StrictModelSerializer,
    actor_of,
    int32,
    tenants_of,
)
from queueing import actions
from queueing.choices import (
    ReclaimPolicy,
    WithinQuotaPreemption,
)
from queueing.models import (
    Queue,
    Quota,
    Workload,
)


class QueueSerializer(StrictModelSerializer):
    """An ordering context of a tenant, with its live counts."""

    tenant = NameField(tenants_of, help_text="Owning tenant.")
    policy = serializers.ChoiceField(
        choices=POLICY_CHOICES,
        required=False,
        help_text="Priority, Block or Intelligent; FIFO (kube-queue) means Block.",
    )
    priority = int32(required=False)
    priority_threshold = int32(required=False)
    max_depth = serializers.IntegerField(required=False, min_value=0, max_value=INT32)
    preempt_within_quota = serializers.ChoiceField(
        choices=WithinQuotaPreemption.choices, required=False
    )
    reclaim = serializers.ChoiceField(choices=ReclaimPolicy.choices, required=False)
    admission_timeout_s = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=INT32
    )
    backoff_base_s = FiniteFloatField(required=False, min_value=0, max_value=1e9)
    backoff_max_s = FiniteFloatField(required=False, min_value=0, max_value=1e9)
    backoff_jitter = FiniteFloatField(required=False, min_value=0, max_value=1)
    aging_bound_s = FiniteFloatField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=7 * 24 * 3600,
        help_text=(
            "Against starvation: after waiting this many seconds a head that fits its "
            "quota's max and the cluster claims its whole request back from borrowing "
            "siblings. Default 300; null turns aging off (on purpose)."
        ),
    )
    max_execution_s = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=actions.queues.MAX_EXECUTION_MAX_S,
        help_text=(
            "Stop a workload once it has held its admission this many seconds (koord-queue's "
            "maximumExecutionTimeSeconds, for every workload of the queue); a workload's own "
            "shorter limit wins. Null: no limit."
        ),
    )
    quotas = serializers.SerializerMethodField()
    pending = serializers.SerializerMethodField(help_text="Waiting workloads.")
    admitted = serializers.SerializerMethodField(help_text="Admitted, not yet running.")
    running = serializers.SerializerMethodField(help_text="Running workloads.")
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

    class Meta:
        model = Queue
        fields = (
            "id",
            "name",
            "tenant",
            "policy",
            "priority",
            "priority_threshold",
            "max_depth",
            "preempt_within_quota",
            "reclaim",
            "admission_timeout_s",
            "backoff_base_s",
            "backoff_max_s",
            "backoff_jitter",
            "aging_bound_s",
            "max_execution_s",
            "quotas",
            "pending",
            "admitted",
            "running",
            "source",
            "kube_ref",
            "version",
            "created_at",
            "updated_at",
        )
        read_only_fields = ("created_at", "updated_at")
        extra_kwargs: dict[str, Any] = {"name": {"validators": []}}

    @extend_schema_field(
        {
            "type": "array",
            "items": {"type": "string"},
            "readOnly": True,
            "description": "Quotas whose default queue this is.",
        }
    )
    def get_quotas(self, queue: Queue) -> list[str]:
        names = getattr(queue, "default_for", None)
        if names is None:
            names = list(Quota.objects.filter(default_queue=queue).values_list("name", flat=True))
        return sorted(names)

    def _count(self, queue: Queue, name: str) -> int:
        """Lists annotate the counts in their one query; a single queue counts here."""
        if not hasattr(queue, name):
            counts = Workload.objects.filter(queue=queue).aggregate(**QUEUE_COUNTS)
            for key, value in counts.items():
                setattr(queue, key, value)
        return int(getattr(queue, name))

    @extend_schema_field(serializers.IntegerField())
    def get_pending(self, queue: Queue) -> int:
        return self._count(queue, "pending")

    @extend_schema_field(serializers.IntegerField())
    def get_admitted(self, queue: Queue) -> int:
        return self._count(queue, "admitted")

    @extend_schema_field(serializers.IntegerField())
    def get_running(self, queue: Queue) -> int:
        return self._count(queue, "running")

    def create(self, validated_data: dict[str, Any]) -> Queue:
        validated_data.pop("version", None)
        return actions.create_queue(actor_of(self), **validated_data)

    def update(self, instance: Queue, validated_data: dict[str, Any]) -> Queue:
        expected = self.context.get("expected_version", validated_data.pop("version", None))
        validated_data.pop("version", None)
        return actions.update_queue(
            actor_of(self), instance, expected_version=expected, **validated_data
        )
