from __future__ import annotations

from django.db import models

from queueing.choices import Policy, ReclaimPolicy, WithinQuotaPreemption
from queueing.models.tenancy import Tenant, dns_label


class Queue(models.Model):
    """An ordering context of a tenant (kube-queue / koord-queue Queue).

    Workloads of one or more quotas wait here; the policy decides which heads the cycle
    may consider, ``priority`` orders queues against each other.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="queues")
    name = models.CharField(max_length=63, unique=True, validators=[dns_label])
    policy = models.CharField(max_length=12, choices=Policy.choices, default=Policy.PRIORITY)
    priority = models.IntegerField(
        default=0,
        help_text=(
            "Higher queues are considered first, before fair share and workload priority; "
            "work they admit is not preempted for work of lower queues (a guaranteed min "
            "is still reclaimed)."
        ),
    )
    priority_threshold = models.IntegerField(
        default=0, help_text="Intelligent: workloads at or above this priority block the queue."
    )
    max_depth = models.PositiveIntegerField(
        default=0, help_text="How far the cycle looks past the head; 0 = no limit."
    )
    preempt_within_quota = models.CharField(
        max_length=16,
        choices=WithinQuotaPreemption.choices,
        default=WithinQuotaPreemption.LOWER_PRIORITY,
    )
    reclaim = models.CharField(
        max_length=16, choices=ReclaimPolicy.choices, default=ReclaimPolicy.ANY
    )
    admission_timeout_s = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Requeue an admitted workload that has not started after this many seconds.",
    )
    backoff_base_s = models.FloatField(default=10.0)
    backoff_max_s = models.FloatField(default=600.0)
    backoff_jitter = models.FloatField(default=0.1)
    aging_bound_s = models.FloatField(
        null=True,
        blank=True,
        default=300.0,
        help_text=(
            "Against starvation: a head that fits its quota's max and the cluster claims its "
            "whole request after waiting this many seconds. Empty turns it off (on purpose)."
        ),
    )
    max_execution_s = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text=(
            "Stop a workload of this queue once it has held its admission this many seconds "
            "(koord-queue's maximumExecutionTimeSeconds, for the whole queue). Empty: no limit; "
            "a workload's own, shorter limit still applies."
        ),
    )
    kube_ref = models.CharField(
        max_length=200,
        blank=True,
        db_index=True,
        help_text=(
            "The Kubernetes object this mirrors (Kind namespace/name), when it is managed in "
            "Kubernetes; empty when it is managed here."
        ),
    )
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-priority", "name"]

    def __str__(self) -> str:
        return self.name

    @property
    def source(self) -> str:
        """Where it is edited: "kubernetes" (read-only here) or "here"."""
        return "kubernetes" if self.kube_ref else "here"
