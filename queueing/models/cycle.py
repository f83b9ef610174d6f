from __future__ import annotations

from django.db import models


class CycleRun(models.Model):
    """One run of the admission cycle: what it decided and how long it took."""

    root = models.CharField(max_length=63, db_index=True)
    started_at = models.DateTimeField(db_index=True)
    duration_ms = models.FloatField(default=0)
    engine_ms = models.FloatField(default=0)
    admitted = models.PositiveIntegerField(default=0)
    preempted = models.PositiveIntegerField(default=0)
    requeued = models.PositiveIntegerField(default=0)
    pending = models.PositiveIntegerField(default=0)
    running = models.PositiveIntegerField(default=0)
    conflicts = models.PositiveIntegerField(
        default=0, help_text="Decisions dropped because the workload changed meanwhile."
    )
    errors = models.JSONField(default=list, blank=True)
    token = models.BigIntegerField(default=0, help_text="Fencing token of the lease it held.")
    worker = models.CharField(max_length=200, blank=True)
    stats = models.JSONField(default=dict, blank=True)
    holds = models.JSONField(
        default=list,
        blank=True,
        help_text=(
            "Free room on nodes kept for waiting workloads when the cycle ended: "
            '[{"node", "workload_id", "kind": "drain" | "reservation", "resources"}].'
        ),
    )

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"cycle {self.id} of {self.root} at {self.started_at:%H:%M:%S}"


class CycleLease(models.Model):
    """The singleton lease of a quota-tree root's cycle.

    Whoever holds an unexpired lease may cycle that root; every take increments
    ``token`` (a fencing token), and apply() writes only while its token is current.
    """

    name = models.CharField(max_length=63, unique=True)
    holder = models.CharField(max_length=200, blank=True)
    token = models.BigIntegerField(default=0)
    expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"lease {self.name} #{self.token} held by {self.holder or 'nobody'}"


class MetricCounter(models.Model):
    """A monotonic counter shared by every process (web, workers): Prometheus reads it."""

    name = models.CharField(max_length=100)
    label = models.CharField(max_length=200, blank=True)
    value = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["name", "label"], name="metriccounter_unique")
        ]

    def __str__(self) -> str:
        return f"{self.name}{{{self.label}}} = {self.value}"
