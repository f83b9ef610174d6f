from __future__ import annotations

from django.conf import settings
from django.db import models

from queueing.choices import ACTIVE_PHASES, Phase, Source
from queueing.engine.explanation import BY_AGE_NOTE
from queueing.models.fields import JSONField
from queueing.models.queue import Queue
from queueing.models.quota import Quota
from queueing.models.tenancy import Tenant


class Workload(models.Model):
    """One job waiting for or holding admission (kube-queue's QueueUnit).

    ``pod_sets`` is a list of ``{"name", "count", "requests", "node_selector",
    "tolerations"}`` with per-pod requests in canonical units; ``total_request`` is
    their sum, kept for fast aggregation. The cycle writes ``explanation``,
    ``reason``, ``position``, ``global_position`` and the ETA.
    """

    # Tenant and quota have no index of their own: each leads a composite index below
    # (Meta), which serves their lookups. Every index is written again by each update
    # that moves a row (issue 10: the cycle's and the sync's writes).
    tenant = models.ForeignKey(
        Tenant, on_delete=models.PROTECT, related_name="workloads", db_index=False
    )
    quota = models.ForeignKey(
        Quota, on_delete=models.PROTECT, related_name="workloads", db_index=False
    )
    queue = models.ForeignKey(Queue, on_delete=models.PROTECT, related_name="workloads")
    name = models.CharField(max_length=253)
    namespace = models.CharField(max_length=63)
    kind = models.CharField(max_length=32, default="Job")
    api_version = models.CharField(max_length=64, default="batch/v1")
    object_uid = models.CharField(max_length=64, blank=True)  # indexed: workload_object_uid
    priority = models.IntegerField(default=0)
    priority_class = models.CharField(max_length=253, blank=True)
    pod_sets = JSONField(default=list)
    total_request = JSONField(default=dict)
    expected_runtime_s = models.FloatField(null=True, blank=True)
    queue_order_at = models.DateTimeField()
    phase = models.CharField(max_length=10, choices=Phase.choices, default=Phase.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    requeue_at = models.DateTimeField(null=True, blank=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    wait_s = models.FloatField(
        null=True,
        blank=True,
        help_text="Seconds from its queue-order time to its latest admission.",
    )
    assignment = JSONField(default=dict, blank=True)
    pool = models.CharField(max_length=253, blank=True)
    preempted_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    nominated = models.BooleanField(
        default=False, help_text="Victims were evicted for it; their capacity is reserved for it."
    )
    awaiting = models.BooleanField(
        default=False,
        help_text=(
            "Nominated while it awaits work of its quota that ends within the preemption "
            "grace period: nothing was evicted for it."
        ),
    )
    preemptible = models.BooleanField(
        default=True,
        help_text=(
            'False when its preemptible label says "false" (koord-queue): admitted only '
            "within its quota's min and never preempted."
        ),
    )
    explanation = JSONField(null=True, blank=True)
    reason = models.CharField(max_length=500, blank=True)
    position = models.PositiveIntegerField(null=True, blank=True)
    global_position = models.PositiveIntegerField(null=True, blank=True)
    eta_p50 = models.DateTimeField(null=True, blank=True)
    eta_p90 = models.DateTimeField(null=True, blank=True)
    #: The engine's structured ETA of the last forecast (queueing.forecasting.stored_eta):
    #: epoch p50/p90, why there is none, and what last moved it. What the next cycle
    #: passes back for hysteresis, across workers and restarts.
    eta = JSONField(null=True, blank=True)
    #: The first forecast of this workload, written once (what calibration learns from).
    first_seen_at = models.DateTimeField(null=True, blank=True)
    eta_first_p50 = models.DateTimeField(null=True, blank=True)
    eta_first_p90 = models.DateTimeField(null=True, blank=True)
    #: The uncalibrated simulated start of that first forecast (calibration.Residuals).
    eta_first_forecast = models.DateTimeField(null=True, blank=True)
    message = models.TextField(blank=True)
    labels = JSONField(default=dict, blank=True)
    annotations = JSONField(default=dict, blank=True)
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.API)
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["queue_order_at", "id"]
        # No index holds what a cycle's annotations rewrite (position, ETA, reason...):
        # their update then writes no index entry and stays on its page (a HOT update;
        # the table keeps room for it, fillfactor, migration 0011). A queue's page of
        # waiting rows sorts them by position from workload_phase_queue instead.
        indexes = [
            models.Index(fields=["phase", "queue"], name="workload_phase_queue"),
            models.Index(fields=["tenant", "phase"], name="workload_tenant_phase"),
            models.Index(fields=["quota", "phase"], name="workload_quota_phase"),
            models.Index(fields=["-created_at"], name="workload_created"),
            # The sync's "is this job already ours?" for jobs no active workload stands for.
            models.Index(fields=["object_uid"], name="workload_object_uid"),
            # The rows a deleted workload or user is unset from (SET_NULL): only those
            # that name one are indexed, so the writes of all others do not touch these.
            models.Index(
                fields=["preempted_by"],
                condition=models.Q(preempted_by__isnull=False),
                name="workload_preempted_by",
            ),
            models.Index(
                fields=["submitted_by"],
                condition=models.Q(submitted_by__isnull=False),
                name="workload_submitted_by",
            ),
        ]
        constraints = [
            # One live workload per cluster object name; a finished one may be recreated.
            models.UniqueConstraint(
                fields=["kind", "namespace", "name"],
                condition=models.Q(phase__in=[p.value for p in ACTIVE_PHASES]),
                name="workload_unique_active_object",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    #: Why its ETA is earlier than that of work ahead of it (``eta["by_age"]``).
    BY_AGE_NOTE = BY_AGE_NOTE

    @property
    def eta_note(self) -> str:
        """What moved the ETA shown (from ``eta``), or the precise reason there is none."""
        stored = self.eta or {}
        if stored.get("p50") is None:
            return str(stored.get("reason") or "")
        last = stored.get("last_move") or {}
        moved, delta = last.get("moved"), float(last.get("delta_s") or 0.0)
        if moved == "first":
            text = "First forecast"
        elif moved in ("earlier", "later"):
            text = f"Moved {abs(delta):.0f} s {moved}: the queue or the cluster changed enough"
        elif moved == "overdue":
            text = f"Re-forecast ({delta:+.0f} s) after the earlier estimate passed"
        else:
            return ""
        if stored.get("moved") == "kept":
            text += "; kept since (newer forecasts were within the tolerance)"
        text += "."
        if stored.get("by_age"):
            text += " " + BY_AGE_NOTE
        return text


class WorkloadEvent(models.Model):
    """One phase change of a workload: its timeline."""

    # No index of its own: wlevent_workload_at leads with it (every move inserts one).
    workload = models.ForeignKey(
        Workload, on_delete=models.CASCADE, related_name="events", db_index=False
    )
    at = models.DateTimeField()
    from_phase = models.CharField(max_length=10, choices=Phase.choices, blank=True)
    to_phase = models.CharField(max_length=10, choices=Phase.choices)
    reason = models.CharField(max_length=64, blank=True)
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["workload", "at"], name="wlevent_workload_at")]

    def __str__(self) -> str:
        return f"{self.workload_id}: {self.from_phase or '-'} -> {self.to_phase}"
