"""Security events the audit log keeps: clients throttled for failed authentication and
logins locked out (django-axes). They change no domain state, so they are written here
rather than through queueing.actions; each is one row, written at most once per window
for a given client or account so that a flood cannot flood the audit log too.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import DatabaseError
from django.dispatch import receiver
from django.utils import timezone

from queueing.choices import Source
from queueing.models import AuditEvent

log = logging.getLogger("portal.security")


def record(
    action: str, *, object_type: str, object_id: str, source: str, details: dict[str, Any]
) -> None:
    """One audit row; a database outage must not turn a 429 into a 500."""
    log.warning("%s %s=%s %s", action, object_type, object_id, details)
    try:
        AuditEvent.objects.create(
            at=timezone.now(),
            actor=None,
            actor_name="anonymous",
            source=source,
            action=action,
            object_type=object_type,
            object_id=object_id[:64],
            object_repr=f"{object_type} {object_id}"[:300],
            tenant=None,
            after=details,
        )
    except DatabaseError:
        log.exception("could not audit %s for %s %s", action, object_type, object_id)


try:  # django-axes is a runtime dependency; its signal tells of a lockout.
    from axes.signals import user_locked_out  # type: ignore[import-untyped]
except ImportError:  # pragma: no cover - axes is pinned in requirements.txt
    user_locked_out = None

if user_locked_out is not None:

    @receiver(user_locked_out, dispatch_uid="kq-audit-lockout")
    def audit_lockout(sender: Any, request: Any, username: str, ip_address: str, **_: Any) -> None:
        record(
            "auth.locked_out",
            object_type="login",
            object_id=username or ip_address or "",
            source=Source.UI,
            details={"username": username, "ip_address": ip_address},
        )


def lockout_response(request: Any, original_response: Any = None, credentials: Any = None) -> Any:
    """django-axes' answer to a locked-out login: our page, 429, with Retry-After."""
    from axes.helpers import get_cool_off  # type: ignore[import-untyped]
    from django.http import HttpResponse
    from django.template.loader import render_to_string

    cool_off = get_cool_off(request)
    seconds = int(cool_off.total_seconds()) if cool_off else 900
    page = render_to_string(
        "429.html", {"retry_after_min": max(1, round(seconds / 60))}, request=request
    )
    response = HttpResponse(page, status=429)
    response["Retry-After"] = str(seconds)
    return response
