"""What every serializer shares: strict input, the scopes of names a caller may give, and the actor."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Count, Q, QuerySet
from rest_framework import serializers
from rest_framework.request import Request

from portal.api.fields import (
    INT32,
)
from queueing import access
from queueing.actions import Actor
from queueing.choices import (
    WAITING_PHASES,
    Phase,
    Policy,
    Source,
)
from queueing.models import (
    Queue,
    Quota,
    Tenant,
)


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
