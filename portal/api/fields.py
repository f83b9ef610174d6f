"""Serializer fields the API shares: quantities, names of related objects, string maps."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from django.db.models import Model, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from queueing.quantities import QuantityError, format_resources, parse_amount
from queueing.validation import Amounts

INT32 = 2**31 - 1
INT64 = 2**63 - 1
MAX_JSON_BYTES = 256 * 1024


def reject_nul(value: Any, where: str = "value") -> None:
    """Refuse NUL characters anywhere: PostgreSQL cannot store them in text or jsonb."""
    if isinstance(value, str):
        if "\x00" in value:
            raise serializers.ValidationError(f"{where} contains a NUL character.")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            reject_nul(key, where)
            reject_nul(item, where)
    elif isinstance(value, list | tuple):
        for item in value:
            reject_nul(item, where)


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": {"oneOf": [{"type": "string"}, {"type": "integer", "minimum": 0}]},
        "description": 'Resource name -> Kubernetes quantity ("500m", "4Gi", 8). '
        "Answers use the shortest exact spelling.",
        "example": {"cpu": "500m", "memory": "4Gi", "nvidia.com/gpu": 1},
    }
)
class ResourcesField(serializers.Field):
    """A map of resource name to Kubernetes quantity.

    Input is parsed here, once, into canonical ``Amounts`` that the action takes as they
    are (errors name the resource). Output is canonical amounts written back as
    quantities ("8", "500m", "64Gi").
    """

    default_error_messages = {"not_a_map": "Expected a map of resource name to quantity."}

    def to_internal_value(self, data: Any) -> Amounts:
        if not isinstance(data, Mapping):
            self.fail("not_a_map")
        reject_nul(data, self.field_name or "value")
        errors: list[str] = []
        out = Amounts()
        for name, value in data.items():
            if isinstance(value, float) and not math.isfinite(value):
                errors.append(f"{name}: {value!r} is not a quantity.")
                continue
            try:
                amount = parse_amount(str(name), value)
            except QuantityError as exc:
                errors.append(str(exc))
                continue
            if amount > INT64:
                errors.append(f"{name}: {value} is more than any cluster holds.")
                continue
            out[str(name)] = amount
        if errors:
            raise serializers.ValidationError(errors)
        return out

    def to_representation(self, value: Any) -> dict[str, str]:
        return format_resources(value or {})


@extend_schema_field(
    {"type": "object", "additionalProperties": {"type": "string"}, "example": {"team": "vision"}}
)
class StringMapField(serializers.Field):
    """A map of string to string (labels, annotations, node selectors)."""

    default_error_messages = {"not_a_map": "Expected a map of string to string."}

    def __init__(self, *, max_items: int = 64, **kwargs: Any) -> None:
        self.max_items = max_items
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> dict[str, str]:
        if not isinstance(data, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in data.items()
        ):
            self.fail("not_a_map")
        reject_nul(data, self.field_name or "value")
        if len(data) > self.max_items:
            raise serializers.ValidationError(f"At most {self.max_items} entries.")
        for key, value in data.items():
            if not key or len(key) > 317 or len(value) > 4096:
                raise serializers.ValidationError(f"{key[:40]!r}: key or value is too long.")
        return dict(data)

    def to_representation(self, value: Any) -> dict[str, str]:
        return dict(value or {})


@extend_schema_field({"type": "object", "additionalProperties": True})
class ObjectField(serializers.Field):
    """A JSON object of bounded size (a Job manifest, a pod template)."""

    default_error_messages = {
        "not_an_object": "Expected a JSON object.",
        "too_big": f"At most {MAX_JSON_BYTES // 1024} KiB.",
    }

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, Mapping):
            self.fail("not_an_object")
        reject_nul(data, self.field_name or "value")
        if len(json.dumps(data)) > MAX_JSON_BYTES:
            self.fail("too_big")
        return dict(data)

    def to_representation(self, value: Any) -> Any:
        return value


class FiniteFloatField(serializers.FloatField):
    """A float that is a number: no NaN or infinity (DRF accepts the strings "nan", "inf")."""

    def to_internal_value(self, data: Any) -> float:
        value = super().to_internal_value(data)
        if not math.isfinite(value):
            self.fail("invalid")
        return value


@extend_schema_field(OpenApiTypes.STR)
class NameField(serializers.RelatedField):
    """Refers to a related object by its unique name, among the objects the caller may see.

    ``scope(request)`` returns that queryset, so naming another tenant's object reads
    exactly like naming one that does not exist.
    """

    default_error_messages = {
        "does_not_exist": "No {model} named {value!r}.",
        "invalid": "Give the name as a string.",
    }

    def __init__(
        self,
        scope: Callable[[Any], QuerySet[Any]] | None = None,
        *,
        attr: str = "name",
        **kwargs: Any,
    ) -> None:
        self.scope = scope
        self.attr = attr
        super().__init__(**kwargs)

    def get_queryset(self) -> QuerySet[Any]:
        assert self.scope is not None, "a writable NameField needs a scope"
        return self.scope(self.context["request"])

    def to_internal_value(self, data: Any) -> Model:
        if not isinstance(data, str) or not data or len(data) > 253 or "\x00" in data:
            self.fail("invalid")
        queryset = self.get_queryset()
        found = queryset.filter(**{self.attr: data}).first()
        if found is None:
            self.fail("does_not_exist", model=queryset.model._meta.verbose_name, value=data)
        return found

    def to_representation(self, value: Any) -> str:
        return str(getattr(value, self.attr))

    def use_pk_only_optimization(self) -> bool:
        return False

    def get_choices(self, cutoff: int | None = None) -> dict[Any, Any]:
        return {}  # never list other objects (no browsable forms)
