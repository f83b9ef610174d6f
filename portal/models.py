"""The web layer's own state: personal API tokens."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class APIToken(models.Model):
    """A personal API token (``Authorization: Token <key>``).

    The key is shown once, when it is created; only its SHA-256 digest is stored, so a
    leaked database does not leak working keys. Keys carry 256 bits of randomness, which
    is why a fast digest is enough here (a slow password hash would cost every request).
    ``prefix`` is the key's harmless start, shown in lists so people can tell keys apart.
    A read-only token may only read (and preview, which saves nothing).
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, blank=True, help_text="What the token is for.")
    prefix = models.CharField(max_length=16)
    digest = models.CharField(max_length=64, unique=True)
    read_only = models.BooleanField(default=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name or 'unnamed'})"
