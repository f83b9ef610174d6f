from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import models

from queueing.models.fields import JSONField
from queueing.models.tenancy import Tenant, dns_label

if TYPE_CHECKING:
    from queueing.models.queue import Queue


class Quota(models.Model):
    """A node of the elastic-quota tree (Koordinator ElasticQuota).

    ``min`` is guaranteed, ``max`` is the ceiling, ``shared_weight`` divides idle
    capacity among siblings; all three are maps of resource name to canonical integer
    amount (cpu in millicores, memory in bytes, devices as counts). A quota without a
    parent is a root: the cluster. Workloads attach to leaves.
    """

    name = models.CharField(max_length=63, unique=True, validators=[dns_label])
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.PROTECT, related_name="quotas"
    )
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    min = JSONField(default=dict, blank=True)
    max = JSONField(default=dict, blank=True)
    shared_weight = JSONField(default=dict, blank=True)
    fair_weight = models.FloatField(
        default=1.0,
        help_text=(
            "Fair-share weight: the dominant share that orders quotas is divided by it, so a "
            "quota of weight 2 is served as if it used half as much (Kueue's fairSharing weight)."
        ),
    )
    allow_lent = models.BooleanField(default=True, help_text="May lend its unused min to siblings.")
    namespaces = JSONField(
        default=list, blank=True, help_text="Namespaces whose workloads default to this quota."
    )
    default_queue: models.ForeignKey[Queue | None, Queue | None] = models.ForeignKey(
        "queueing.Queue", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    runtime = JSONField(
        default=dict,
        blank=True,
        help_text="Runtime quota at the last cycle (written by the cycle).",
    )
    used = JSONField(
        default=dict, blank=True, help_text="Usage at the last cycle (written by the cycle)."
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
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def source(self) -> str:
        """Where it is edited: "kubernetes" (read-only here) or "here"."""
        return "kubernetes" if self.kube_ref else "here"

    @property
    def is_root(self) -> bool:
        return self.parent_id is None
