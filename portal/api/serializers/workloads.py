"""Workloads: rows, details, submission and cancellation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal import eta_text
from portal.api.fields import (
    INT32,
    FiniteFloatField,
    NameField,
    ObjectField,
    ResourcesField,
    StringMapField,
)
from portal.api.serializers.base import StrictSerializer, actor_of, int32, queues_of, quotas_of
from queueing import actions, compat, jobspec
from queueing.choices import (
    Phase,
    priority_band,
)
from queueing.events import iso
from queueing.models import (
    Workload,
    WorkloadEvent,
)
from queueing.quantities import describe, format_resources
from queueing.validation import as_amounts


class TolerationSerializer(StrictSerializer):
    """A Kubernetes toleration."""

    key = serializers.CharField(required=False, allow_blank=True, max_length=317)
    operator = serializers.ChoiceField(choices=["Exists", "Equal"], required=False)
    value = serializers.CharField(required=False, allow_blank=True, max_length=63)
    effect = serializers.ChoiceField(
        choices=["", "NoSchedule", "PreferNoSchedule", "NoExecute"], required=False
    )
    tolerationSeconds = serializers.IntegerField(  # Kubernetes' own spelling
        required=False, allow_null=True, min_value=0, max_value=INT32
    )


class PodSetSerializer(StrictSerializer):
    """``count`` pods, each requesting ``requests``."""

    name = serializers.CharField(required=False, max_length=63)
    count = serializers.IntegerField(min_value=1, max_value=100_000, default=1)
    requests = ResourcesField(help_text="Per pod.")
    node_selector = StringMapField(required=False)
    tolerations = TolerationSerializer(many=True, required=False)


class WorkloadSerializer(serializers.ModelSerializer):
    """A workload as lists and details show it."""

    tenant = NameField(read_only=True)
    quota = NameField(read_only=True)
    queue = NameField(read_only=True)
    submitted_by = NameField(read_only=True, attr="username", allow_null=True)
    pod_sets = serializers.SerializerMethodField()
    total_request = ResourcesField(read_only=True)
    priority_band = serializers.SerializerMethodField()
    kube_queue_phase = serializers.SerializerMethodField()

    class Meta:
        model = Workload
        fields = (
            "id",
            "name",
            "namespace",
            "tenant",
            "quota",
            "queue",
            "kind",
            "api_version",
            "priority",
            "priority_class",
            "preemptible",
            "priority_band",
            "pod_sets",
            "total_request",
            "expected_runtime_s",
            "phase",
            "kube_queue_phase",
            "attempts",
            "queue_order_at",
            "requeue_at",
            "admitted_at",
            "started_at",
            "finished_at",
            "position",
            "global_position",
            "eta_p50",
            "eta_p90",
            "reason",
            "message",
            "pool",
            "labels",
            "annotations",
            "source",
            "submitted_by",
            "created_at",
            "updated_at",
        )
        read_only_fields = fields

    @extend_schema_field(PodSetSerializer(many=True))
    def get_pod_sets(self, workload: Workload) -> list[dict[str, Any]]:
        return render_pod_sets(workload.pod_sets)

    @extend_schema_field({"type": "string", "readOnly": True, "example": "koord-batch"})
    def get_priority_band(self, workload: Workload) -> str:
        return priority_band(workload.priority)

    @extend_schema_field({"type": "string", "readOnly": True, "example": "Enqueued"})
    def get_kube_queue_phase(self, workload: Workload) -> str:
        return compat.kube_queue_phase(workload.phase)


# What a list row reads: plain values, the related names joined in (no model instances).
WORKLOAD_ROW_VALUES = (
    *(
        name
        for name in WorkloadSerializer.Meta.fields
        if name
        not in ("tenant", "quota", "queue", "submitted_by", "priority_band", "kube_queue_phase")
    ),
    "tenant__name",
    "quota__name",
    "queue__name",
    "submitted_by__username",
)
_TIMES = (
    "queue_order_at",
    "requeue_at",
    "admitted_at",
    "started_at",
    "finished_at",
    "eta_p50",
    "eta_p90",
    "created_at",
    "updated_at",
)


def workload_list_row(values: Mapping[str, Any]) -> dict[str, Any]:
    """WorkloadSerializer's output, from ``.values(*WORKLOAD_ROW_VALUES)``.

    The list endpoint renders thousands of rows a second; DRF's field-by-field rendering
    and the model instances it needs cost more than the queries. A test keeps the two
    identical.
    """
    row = {name: values[name] for name in WorkloadSerializer.Meta.fields if name in values}
    for name in _TIMES:
        row[name] = iso(values[name])
    row["tenant"] = values["tenant__name"]
    row["quota"] = values["quota__name"]
    row["queue"] = values["queue__name"]
    row["submitted_by"] = values["submitted_by__username"]
    row["priority_band"] = priority_band(values["priority"])
    row["kube_queue_phase"] = compat.kube_queue_phase(values["phase"])
    row["pod_sets"] = render_pod_sets(values["pod_sets"])
    row["total_request"] = format_resources(values["total_request"] or {})
    row["expected_runtime_s"] = (
        float(values["expected_runtime_s"]) if values["expected_runtime_s"] is not None else None
    )
    return {name: row[name] for name in WorkloadSerializer.Meta.fields}


def render_pod_sets(pod_sets: Any) -> list[dict[str, Any]]:
    return [
        {
            "name": pod_set.get("name", ""),
            "count": pod_set.get("count", 1),
            "requests": format_resources(pod_set.get("requests") or {}),
            "node_selector": pod_set.get("node_selector") or {},
            "tolerations": pod_set.get("tolerations") or [],
        }
        for pod_set in pod_sets or []
    ]


class WorkloadDetailSerializer(WorkloadSerializer):
    """One workload with why it waits and where it runs."""

    explanation = serializers.JSONField(read_only=True)
    assignment = serializers.JSONField(read_only=True)
    eta = serializers.JSONField(
        read_only=True,
        help_text=(
            "The engine's ETA: p50/p90 (epoch s), reason when there is none, moved "
            "(first, kept, earlier, later, overdue), last_move {moved, delta_s, at}, and "
            "by_age (its p50 is earlier than work ahead of it, which it passes by age)."
        ),
    )
    eta_note = serializers.SerializerMethodField(
        help_text="What moved the ETA, or why there is none, in words (the queue page's "
        "hover text; portal.eta_text)."
    )
    starts_by = serializers.SerializerMethodField(
        help_text=(
            "Aging's bound: the latest start the engine promises while the workload stays "
            "its queue's head (ISO 8601), or null."
        )
    )

    class Meta(WorkloadSerializer.Meta):
        fields = (
            *WorkloadSerializer.Meta.fields,
            "explanation",
            "assignment",
            "eta",
            "eta_note",
            "starts_by",
        )  # type: ignore[assignment]
        read_only_fields = fields  # type: ignore[assignment]

    def get_eta_note(self, w: Workload) -> str:
        return w.eta_note if w.eta_p50 is not None else eta_text.of_workload(w)[1]

    def get_starts_by(self, w: Workload) -> str | None:
        explanation = w.explanation if isinstance(w.explanation, dict) else {}
        return iso(eta_text.starts_by(w.phase, explanation.get("starts_by")))


class WorkloadSubmitSerializer(StrictSerializer):
    """A new workload. Name a queue, a quota or a namespace (the others follow from it).

    In kubernetes mode a suspended batch/v1 Job is created in the namespace: from
    ``manifest`` (a whole Job), from ``template`` (a pod template, run as
    ``pod_sets[0].count`` pods) or, with neither, from the pod sets alone. Pod sets are
    read from the manifest or template when not given, and must match it when given.
    """

    name = serializers.CharField(max_length=63, help_text="Job name (a Kubernetes name).")
    queue = NameField(queues_of, required=False, help_text="Queue name.")
    quota = NameField(quotas_of, required=False, help_text="Leaf quota name.")
    namespace = serializers.CharField(required=False, max_length=63)
    priority = int32(default=0)
    priority_class = serializers.CharField(required=False, default="", max_length=253)
    expected_runtime_s = FiniteFloatField(
        required=False, allow_null=True, min_value=0.001, max_value=1e9
    )
    pod_sets = PodSetSerializer(many=True, required=False, max_length=32)  # type: ignore[call-arg]
    labels = StringMapField(required=False)
    annotations = StringMapField(required=False)
    template = ObjectField(required=False, help_text="A pod template (kubernetes mode).")
    manifest = ObjectField(required=False, help_text="A full batch/v1 Job (kubernetes mode).")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        if "template" in attrs and "manifest" in attrs:
            raise serializers.ValidationError(
                {"template": ["Send a pod template or a full manifest, not both."]}
            )
        request = self.context["request"]
        quota, queue = attrs.get("quota"), attrs.get("queue")
        namespace = attrs.get("namespace")
        if quota is None and namespace:
            # Resolve here, among visible quotas, so another tenant's namespace reads as unknown.
            owner = actions.quota_for_namespace(namespace)
            if owner is not None and quotas_of(request).filter(pk=owner.pk).exists():
                attrs["quota"] = owner
            elif queue is None:
                raise serializers.ValidationError(
                    {"namespace": [f"No quota of yours claims namespace {namespace!r}."]}
                )
        if attrs.get("quota") is None and queue is None:
            raise serializers.ValidationError({"queue": ["Name a queue, a quota or a namespace."]})
        given = attrs.get("pod_sets")
        source = "template" if "template" in attrs else "manifest"
        try:
            if "template" in attrs:
                # The adapter wraps a pod template in a suspended Job of `count` pods.
                attrs["manifest"] = attrs.pop("template")
                count = int(given[0].get("count", 1)) if given else 1
                found = jobspec.pod_sets_from_template(attrs["manifest"], count)
                # A template without requests gets the pod set's (as the adapter does).
                checked = bool(found[0]["requests"])
            elif "manifest" in attrs:
                attrs["manifest"] = jobspec.suspended_job(
                    attrs["manifest"], attrs["name"], namespace
                )
                found, checked = jobspec.pod_sets_from_job(attrs["manifest"]), True
            else:
                found, checked = None, False
        except jobspec.ManifestError as exc:
            raise serializers.ValidationError({source: [str(exc)]}) from exc
        if found is not None and not given:
            attrs["pod_sets"] = found
        elif found is not None and checked:
            self._same_shape(given or [], found, source)
        if not attrs.get("pod_sets"):
            raise serializers.ValidationError(
                {"pod_sets": ["Give at least one pod set (or a manifest to read them from)."]}
            )
        return attrs

    @staticmethod
    def _same_shape(given: list[Any], found: list[dict[str, Any]], source: str) -> None:
        """The queue accounts the pod sets; the job must ask for the same (the adapter
        refuses it otherwise, after the fact). Said here, by field."""

        def shape(pod_set: Mapping[str, Any]) -> tuple[int, dict[str, int]]:
            requests = as_amounts(pod_set.get("requests") or {})
            return int(pod_set.get("count", 1)), {k: v for k, v in requests.items() if v}

        if len(given) != 1 or shape(given[0]) != shape(found[0]):
            count, requests = shape(found[0])
            raise serializers.ValidationError(
                {
                    "pod_sets": [
                        f"The {source} runs {count} pod(s) of {describe(requests)}; give no "
                        "pod_sets, or ones that match it."
                    ]
                }
            )

    def tenant_id(self) -> int | None:
        """The tenant the workload will belong to, for the permission check."""
        quota = self.validated_data.get("quota")
        queue = self.validated_data.get("queue")
        if quota is not None:
            return quota.tenant_id
        return queue.tenant_id if queue is not None else None

    def create(self, validated_data: dict[str, Any]) -> Workload:
        return actions.submit_workload(actor_of(self), tenant=None, **validated_data)


class CancelSerializer(StrictSerializer):
    """Why the workload is cancelled (optional)."""

    reason = serializers.CharField(required=False, allow_blank=True, max_length=500)


class PendingWorkloadSerializer(serializers.ModelSerializer):
    """A row of a queue's visibility list: where it stands, when it should start, why."""

    quota = NameField(read_only=True)
    total_request = ResourcesField(read_only=True)
    explanation = serializers.JSONField(read_only=True)

    class Meta:
        model = Workload
        fields = (
            "id",
            "name",
            "namespace",
            "quota",
            "priority",
            "phase",
            "position",
            "global_position",
            "eta_p50",
            "eta_p90",
            "reason",
            "explanation",
            "total_request",
            "queue_order_at",
            "requeue_at",
            "attempts",
        )
        read_only_fields = fields


class WorkloadEventSerializer(serializers.ModelSerializer):
    """One phase change of a workload."""

    from_phase = serializers.ChoiceField(
        choices=Phase.choices, allow_blank=True, read_only=True, help_text="Blank when submitted."
    )

    class Meta:
        model = WorkloadEvent
        fields = ("at", "from_phase", "to_phase", "reason", "message")
        read_only_fields = fields
