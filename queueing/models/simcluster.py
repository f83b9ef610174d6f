from __future__ import annotations

from django.db import models

from queueing.choices import SimJobState


class SimNode(models.Model):
    """A node of the built-in simulated cluster."""

    name = models.CharField(max_length=253, unique=True)
    allocatable = models.JSONField(default=dict)
    reserved = models.JSONField(
        default=dict, blank=True, help_text="Requests of pods the queue does not manage."
    )
    labels = models.JSONField(default=dict, blank=True)
    taints = models.JSONField(default=list, blank=True)
    unschedulable = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class SimJob(models.Model):
    """A job of the simulated cluster: created suspended, runs for a while once admitted."""

    uid = models.CharField(max_length=64, unique=True)
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    labels = models.JSONField(default=dict, blank=True)
    annotations = models.JSONField(default=dict, blank=True)
    pod_sets = models.JSONField(default=list)
    priority = models.IntegerField(null=True, blank=True)
    priority_class = models.CharField(max_length=253, blank=True)
    runtime_s = models.FloatField(default=60.0)
    suspended = models.BooleanField(default=True)
    state = models.CharField(
        max_length=10, choices=SimJobState.choices, default=SimJobState.SUSPENDED
    )
    node_selector = models.JSONField(default=dict, blank=True)
    assignment = models.JSONField(default=dict, blank=True)
    will_fail = models.BooleanField(default=False)
    admissions = models.PositiveIntegerField(
        default=0, help_text="How many times it was unsuspended (idempotence check)."
    )
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    message = models.TextField(blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["namespace", "name"], name="simjob_unique_name")
        ]
        indexes = [models.Index(fields=["state"], name="simjob_state")]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"
