"""Filters for list endpoints (django-filter), named after the model they filter."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import forms
from django.db.models import QuerySet
from django_filters import rest_framework as filters
from django_filters.fields import IsoDateTimeField

from queueing.choices import Phase, Role
from queueing.models import AuditEvent, CycleRun, Membership, Queue, Quota, Workload


class UTCDateTimeField(IsoDateTimeField):
    """ISO 8601, normalised to UTC: PostgreSQL refuses offsets beyond ±15:59 that ISO allows."""

    def to_python(self, value: Any) -> datetime | None:
        parsed = super().to_python(value)
        if parsed is None:
            return None
        try:
            return parsed.astimezone(UTC)
        except OverflowError as exc:
            raise forms.ValidationError("Date and time out of range.", code="invalid") from exc


class DateTimeFilter(filters.IsoDateTimeFilter):
    field_class = UTCDateTimeField


# Ids are 64-bit primary keys; priorities are 32-bit. A number outside its column's range
# is a caller's mistake to be named (400), not an OverflowError in the database driver.
ID_MAX = 2**63 - 1
INT32 = 2**31 - 1


class IdFilter(filters.NumberFilter):
    """A primary key: a whole number from 1 to 2^63-1."""

    field_class = forms.IntegerField

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("max_value", ID_MAX)
        super().__init__(*args, **kwargs)


class Int32Filter(filters.NumberFilter):
    """A 32-bit integer column such as priority."""

    field_class = forms.IntegerField

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", -INT32 - 1)
        kwargs.setdefault("max_value", INT32)
        super().__init__(*args, **kwargs)


class WorkloadFilterSet(filters.FilterSet):
    tenant = filters.CharFilter(field_name="tenant__name", help_text="Tenant name.")
    tenant_id = IdFilter(field_name="tenant_id")
    queue = filters.CharFilter(field_name="queue__name", help_text="Queue name.")
    queue_id = IdFilter(field_name="queue_id")
    quota = filters.CharFilter(field_name="quota__name", help_text="Quota name.")
    quota_id = IdFilter(field_name="quota_id")
    phase = filters.MultipleChoiceFilter(
        choices=Phase.choices,
        method="filter_phase",
        help_text="Repeat to match any of several phases.",
    )
    name = filters.CharFilter(field_name="name", help_text="Exact name.")
    name_contains = filters.CharFilter(field_name="name", lookup_expr="icontains")
    namespace = filters.CharFilter(field_name="namespace")
    priority_min = Int32Filter(field_name="priority", lookup_expr="gte")
    priority_max = Int32Filter(field_name="priority", lookup_expr="lte")
    created_after = DateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = DateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = Workload
        fields: list[str] = []

    def filter_phase(self, queryset: QuerySet, name: str, value: list[str]) -> QuerySet:
        # One IN (the index's friend), not django-filter's OR of equalities plus DISTINCT.
        return queryset.filter(phase__in=value) if value else queryset


class QuotaFilterSet(filters.FilterSet):
    name = filters.CharFilter(field_name="name")
    tenant = filters.CharFilter(field_name="tenant__name", help_text="Tenant name.")
    parent = filters.CharFilter(field_name="parent__name", help_text="Parent quota name.")
    root = filters.BooleanFilter(field_name="parent", lookup_expr="isnull")

    class Meta:
        model = Quota
        fields: list[str] = []


class QueueFilterSet(filters.FilterSet):
    name = filters.CharFilter(field_name="name")
    tenant = filters.CharFilter(field_name="tenant__name", help_text="Tenant name.")

    class Meta:
        model = Queue
        fields: list[str] = []


class MembershipFilterSet(filters.FilterSet):
    tenant = filters.CharFilter(field_name="tenant__name", help_text="Tenant name.")
    user = filters.CharFilter(field_name="user__username", help_text="Username.")
    role = filters.ChoiceFilter(choices=Role.choices)

    class Meta:
        model = Membership
        fields: list[str] = []


class CycleRunFilterSet(filters.FilterSet):
    root = filters.CharFilter(field_name="root")
    since = DateTimeFilter(field_name="started_at", lookup_expr="gte")

    class Meta:
        model = CycleRun
        fields: list[str] = []


class AuditEventFilterSet(filters.FilterSet):
    tenant = filters.CharFilter(field_name="tenant__name", help_text="Tenant name.")
    action = filters.CharFilter(field_name="action")
    object_type = filters.CharFilter(field_name="object_type")
    object_id = filters.CharFilter(field_name="object_id")
    actor = filters.CharFilter(field_name="actor_name")
    since = DateTimeFilter(field_name="at", lookup_expr="gte")
    until = DateTimeFilter(field_name="at", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields: list[str] = []
