"""Serializers: parse and check input, then call ONE action; render objects for answers.

Names follow the model (``Queue`` -> ``QueueSerializer``). Related objects are named by
their unique name, looked up among what the caller may see. Every serializer rejects
fields it does not know; fields that cannot change after creation (``name``,
``tenant`` …) are accepted on update only with their current value, so a GET-edit-PUT
round trip works while a rename attempt is an error, not silently ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Count, Q, QuerySet
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request

from portal import tokens
from portal.api.fields import (
    INT32,
    FiniteFloatField,
    NameField,
    ObjectField,
    ResourcesField,
    StringMapField,
    reject_nul,
)
from portal.models import APIToken
from queueing import access, actions, compat, jobspec
from queueing.actions import Actor
from queueing.choices import (
    WAITING_PHASES,
    Phase,
    Policy,
    ReclaimPolicy,
    Role,
    Source,
    WithinQuotaPreemption,
    priority_band,
)
from queueing.models import (
    AuditEvent,
    CycleRun,
    Membership,
    Queue,
    Quota,
    SimNode,
    Tenant,
    Workload,
    WorkloadEvent,
)
from queueing.quantities import describe, format_resources, parse_resources

# --- scopes: what a caller may name ------------------------------------------------------


def tenants_of(request: Request) -> QuerySet[Tenant]:
    return access.visible_tenants(request.user)


def quotas_of(request: Request) -> QuerySet[Quota]:
    return access.visible_quotas(request.user)


def queues_of(request: Request) -> QuerySet[Queue]:
    return access.visible(Queue.objects.all(), request.user)


def active_users(request: Request) -> QuerySet[Any]:
    return get_user_model().objects.filter(is_active=True)


def actor_of(serializer: serializers.BaseSerializer) -> Actor:
    return Actor.of(serializer.context["request"].user, Source.API)


# --- base ----------------------------------------------------------------------------------


class StrictMixin:
    """Reject unknown fields; accept immutable ones on update only when unchanged."""

    immutable: tuple[str, ...] = ()
    create_only: tuple[str, ...] = ()

    def to_internal_value(self, data: Any) -> Any:
        errors: dict[str, Any] = {}
        if isinstance(data, Mapping):
            known = self.fields  # type: ignore[attr-defined]
            errors.update({str(n): ["Unknown field."] for n in data if n not in known})
            if getattr(self, "instance", None) is not None:
                errors.update(
                    {n: ["Can only be given when creating."] for n in self.create_only if n in data}
                )
        try:
            value = super().to_internal_value(data)  # type: ignore[misc]
        except serializers.ValidationError as exc:
            if not errors or not isinstance(exc.detail, dict):
                raise
            errors = {**exc.detail, **errors}
        if errors:
            raise serializers.ValidationError(errors)
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        instance = getattr(self, "instance", None)
        if instance is not None:
            errors = {
                name: [f"{name} cannot be changed."]
                for name in self.immutable
                if name in attrs and attrs[name] != getattr(instance, name)
            }
            if errors:
                raise serializers.ValidationError(errors)
            for name in self.immutable:
                attrs.pop(name, None)
        return attrs


class StrictSerializer(StrictMixin, serializers.Serializer):
    pass


class StrictModelSerializer(StrictMixin, serializers.ModelSerializer):
    """A ModelSerializer whose writes go through actions (create/update must be given)."""

    def create(self, validated_data: dict[str, Any]) -> Any:
        raise NotImplementedError(f"{type(self).__name__} cannot create")

    def update(self, instance: Any, validated_data: dict[str, Any]) -> Any:
        raise NotImplementedError(f"{type(self).__name__} cannot update")


# A queue's live counts, as aggregates over its workloads (``workloads__`` in annotations).
QUEUE_COUNTS = {
    "pending": Count("id", filter=Q(phase__in=WAITING_PHASES)),
    "admitted": Count("id", filter=Q(phase=Phase.ADMITTED)),
    "running": Count("id", filter=Q(phase=Phase.RUNNING)),
}

# Queue policies as the API accepts them: kube-queue's FIFO is an alias of Block.
POLICY_CHOICES = [*Policy.values, "FIFO"]


def int32(**kwargs: Any) -> serializers.IntegerField:
    kwargs.setdefault("min_value", -INT32 - 1)
    kwargs.setdefault("max_value", INT32)
    return serializers.IntegerField(**kwargs)


# --- tenants and memberships ---------------------------------------------------------------


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
        if roles is None:
            return access.role_in(self.context["request"].user, tenant.pk)
        return roles.get(tenant.pk)

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


# --- quotas ----------------------------------------------------------------------------------


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
            "allow_lent",
            "namespaces",
            "default_queue",
            "default_queue_policy",
            "children",
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
    allow_lent = serializers.BooleanField()
    default_queue = serializers.CharField(allow_null=True)
    version = serializers.IntegerField()
    children = serializers.ListField(child=serializers.DictField())


# --- queues ----------------------------------------------------------------------------------


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
    quotas = serializers.SerializerMethodField()
    pending = serializers.SerializerMethodField(help_text="Waiting workloads.")
    admitted = serializers.SerializerMethodField(help_text="Admitted, not yet running.")
    running = serializers.SerializerMethodField(help_text="Running workloads.")
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
            "quotas",
            "pending",
            "admitted",
            "running",
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


# --- workloads -------------------------------------------------------------------------------


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


def _iso(value: datetime | None) -> str | None:
    """As DRF's DateTimeField renders it (UTC as "Z")."""
    if value is None:
        return None
    text = value.astimezone(UTC).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def workload_row(values: Mapping[str, Any]) -> dict[str, Any]:
    """WorkloadSerializer's output, from ``.values(*WORKLOAD_ROW_VALUES)``.

    The list endpoint renders thousands of rows a second; DRF's field-by-field rendering
    and the model instances it needs cost more than the queries. A test keeps the two
    identical.
    """
    row = {name: values[name] for name in WorkloadSerializer.Meta.fields if name in values}
    for name in _TIMES:
        row[name] = _iso(values[name])
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

    class Meta(WorkloadSerializer.Meta):
        fields = (*WorkloadSerializer.Meta.fields, "explanation", "assignment")  # type: ignore[assignment]
        read_only_fields = fields  # type: ignore[assignment]


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
            requests = parse_resources(pod_set.get("requests") or {})
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


# --- cluster, cycles, audit ------------------------------------------------------------------


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


# --- preview ---------------------------------------------------------------------------------


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


# --- tokens and simulated nodes --------------------------------------------------------------


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
        # Canonical amounts go back as quantities the action parses to the same numbers.
        for key in ("allocatable", "reserved"):
            current[key] = ResourcesField().to_representation(current[key])
        current.update(validated_data)
        return actions.upsert_sim_node(actor_of(self), name=instance.name, **current)


__all__ = [
    "APITokenSerializer",
    "AuditEventSerializer",
    "CancelSerializer",
    "ClusterSerializer",
    "CycleRunSerializer",
    "MembershipSerializer",
    "PendingWorkloadSerializer",
    "PreviewResultSerializer",
    "PreviewSerializer",
    "QueueSerializer",
    "QuotaSerializer",
    "QuotaTreeSerializer",
    "SimNodeSerializer",
    "TenantSerializer",
    "WorkloadDetailSerializer",
    "WorkloadEventSerializer",
    "WorkloadSerializer",
    "WorkloadSubmitSerializer",
]
