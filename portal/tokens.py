"""Personal API tokens: create, revoke, authenticate. Every token write goes through here.

The UI (token page) and the API (``/api/v1/tokens/``) both call these functions; each
create and revoke leaves an audit event (no tenant: only cluster admins read them).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from portal.models import APIToken
from queueing.actions import Actor, audit
from queueing.events import iso

KEY_PREFIX = "kq_"
PREFIX_LENGTH = 10  # "kq_" and 7 characters of the secret: enough to tell keys apart
LAST_USED_RESOLUTION = timedelta(minutes=1)  # at most one write per token per minute
MAX_TOKENS_PER_USER = 100


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class NewToken:
    """A token just created, with the only copy of its key."""

    token: APIToken
    key: str


def _snapshot(token: APIToken) -> dict[str, Any]:
    return {
        "user_id": token.user_id,
        "name": token.name,
        "prefix": token.prefix,
        "read_only": token.read_only,
        "expires_at": iso(token.expires_at),
    }


@transaction.atomic
def create_token(
    actor: Actor,
    user: Any,
    *,
    name: str = "",
    read_only: bool = False,
    expires_at: datetime | None = None,
) -> NewToken:
    """Create a token for ``user``; the key in the result is never stored."""
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": ["expires_at must be in the future."]})
    if len(name) > 100:
        raise ValidationError({"name": ["name must be at most 100 characters."]})
    if APIToken.objects.filter(user=user).count() >= MAX_TOKENS_PER_USER:
        raise ValidationError(
            {"non_field_errors": [f"A user may hold at most {MAX_TOKENS_PER_USER} tokens."]}
        )
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    token = APIToken.objects.create(
        user=user,
        name=name,
        prefix=key[:PREFIX_LENGTH],
        digest=digest(key),
        read_only=read_only,
        expires_at=expires_at,
    )
    audit(actor, "token.create", token, after=_snapshot(token), tenant_id=None)
    return NewToken(token, key)


@transaction.atomic
def revoke_token(actor: Actor, token: APIToken) -> None:
    """Revoke a token: it stops working at once."""
    audit(actor, "token.revoke", token, before=_snapshot(token), tenant_id=None)
    token.delete()


class TokenInvalid(Exception):
    """The key is unknown, revoked or expired; the message is for people."""


def authenticate_key(key: str, *, now: datetime | None = None) -> APIToken:
    """The live token a key belongs to (with its user loaded), or TokenInvalid."""
    if not key.startswith(KEY_PREFIX):
        raise TokenInvalid("Invalid token.")
    wanted = digest(key)
    token = APIToken.objects.select_related("user").filter(digest=wanted).first()
    # The lookup is by digest; compare again in constant time for good measure.
    if token is None or not hmac.compare_digest(token.digest, wanted):
        raise TokenInvalid("Invalid token.")
    now = now or timezone.now()
    if token.expires_at is not None and token.expires_at <= now:
        raise TokenInvalid("Token expired.")
    if not token.user.is_active:
        raise TokenInvalid("User inactive or deleted.")
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        # Bookkeeping, not a change anyone audits; conditional so racing requests write once.
        APIToken.objects.filter(pk=token.pk, last_used_at=token.last_used_at).update(
            last_used_at=now
        )
        token.last_used_at = now
    return token
