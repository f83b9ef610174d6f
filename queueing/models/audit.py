from __future__ import annotations

from django.conf import settings
from django.db import models

from queueing.choices import Source
from queueing.models.tenancy import Tenant


class AuditEvent(models.Model):
    """Who changed what, when, with the state before and after."""

    at = models.DateTimeField(db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_name = models.CharField(max_length=150)
    source = models.CharField(max_length=10, choices=Source.choices)
    action = models.CharField(max_length=64, db_index=True)
    object_type = models.CharField(max_length=32)
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=300)
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_events"
    )
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["object_type", "object_id"], name="audit_object")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.object_repr}"
