from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from queueing.choices import Role

dns_label = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    "Use a Kubernetes name: lower-case letters, digits and '-', at most 63 characters.",
)


class Tenant(models.Model):
    """A team. Owns a quota subtree, the namespaces of its quotas, and queues."""

    name = models.CharField(max_length=63, unique=True, validators=[dns_label])
    display_name = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.display_name or self.name


class Membership(models.Model):
    """A user's role in a tenant: viewers read, members submit, admins edit."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="membership_unique_user_tenant")
        ]
        ordering = ["tenant__name", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} as {self.role}"
