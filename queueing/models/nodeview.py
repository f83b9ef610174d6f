from __future__ import annotations

from django.db import models


class ClusterNode(models.Model):
    """A node as the cycle last read it from the cluster (queueing.nodeview).

    Pages, the API and what-if previews read these rows instead of calling the
    cluster. Only ``nodeview.persist`` writes them, and only what changed.
    """

    name = models.CharField(max_length=253, unique=True)
    allocatable = models.JSONField(default=dict)
    reserved = models.JSONField(
        default=dict, blank=True, help_text="Requests of pods the queue does not manage."
    )
    labels = models.JSONField(default=dict, blank=True)
    taints = models.JSONField(default=list, blank=True)
    unschedulable = models.BooleanField(default=False, help_text="Cordoned.")
    #: Digest of the fields above: a cycle compares digests, not documents.
    digest = models.CharField(max_length=64)
    changed_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
