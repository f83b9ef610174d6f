from __future__ import annotations

from django.db import models

from queueing.models.quota import Quota


class UsageLedger(models.Model):
    """Per quota, decayed consumed resource-seconds: fair share's memory.

    ``usage`` maps resource name to a float of canonical-unit-seconds, decayed with the
    configured half-life up to ``updated_at``.
    """

    quota = models.OneToOneField(Quota, on_delete=models.CASCADE, related_name="ledger")
    usage = models.JSONField(default=dict)
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"ledger of {self.quota}"


class UsageSample(models.Model):
    """A periodic copy of a ledger and the live usage, for the usage-over-time chart."""

    quota = models.ForeignKey(Quota, on_delete=models.CASCADE, related_name="usage_samples")
    at = models.DateTimeField()
    decayed = models.JSONField(default=dict)
    used = models.JSONField(default=dict)
    runtime = models.JSONField(default=dict)
    # Estimated history written for the demo seed (queueing.history), not measured;
    # the fairness charts mark it as such.
    backfilled = models.BooleanField(default=False)

    class Meta:
        ordering = ["at"]
        indexes = [models.Index(fields=["quota", "at"], name="usagesample_quota_at")]

    def __str__(self) -> str:
        return f"{self.quota} at {self.at:%Y-%m-%d %H:%M}"
