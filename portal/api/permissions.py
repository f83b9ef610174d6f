"""Who may call what. The rules themselves live in queueing.access (shared with the UI);
these classes only apply them. Objects of other tenants never reach a permission check:
querysets leave them out, so they are 404."""

from __future__ import annotations

from typing import Any

from rest_framework import permissions
from rest_framework.request import Request

from portal.models import APIToken


class TokenScope(permissions.BasePermission):
    """A read-only token may only read (and call views that declare they save nothing)."""

    message = "This token is read-only."

    def has_permission(self, request: Request, view: Any) -> bool:
        token = request.auth
        if not isinstance(token, APIToken) or not token.read_only:
            return True
        return request.method in permissions.SAFE_METHODS or getattr(view, "saves_nothing", False)
