"""Cycle runs and the audit log: read only."""

from __future__ import annotations

from django.db.models import QuerySet
from rest_framework import mixins

from portal.api import filtersets
from portal.api import serializers as s
from portal.api.views.base import BaseViewSet
from queueing import access
from queueing.models import (
    AuditEvent,
    CycleRun,
)


class CycleRunViewSet(BaseViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """Admission cycles, newest first: what each decided and how long it took."""

    serializer_class = s.CycleRunSerializer
    filterset_class = filtersets.CycleRunFilterSet
    ordering_fields = ("id", "started_at", "duration_ms")
    ordering = ("-started_at",)

    def get_queryset(self) -> QuerySet[CycleRun]:
        return CycleRun.objects.all()


class AuditEventViewSet(BaseViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """Who changed what, newest first: your tenants' events (all for cluster admins)."""

    serializer_class = s.AuditEventSerializer
    filterset_class = filtersets.AuditEventFilterSet
    ordering_fields = ("id", "at")
    ordering = ("-at",)

    def get_queryset(self) -> QuerySet[AuditEvent]:
        return access.visible_audit(self.request.user).select_related("tenant")
