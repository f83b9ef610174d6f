"""``Authorization: Token <key>`` on WebSocket handshakes, for clients without a session.

The pages connect with their session cookie; the command-line client (``kq watch``)
sends its API token in the handshake instead. A handshake that sends a token is judged
by that token alone: an unknown, revoked or expired key connects as nobody, and the
consumer closes with 4403 as it does for anyone who may not watch.
"""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware
from django.contrib.auth.models import AnonymousUser

from portal import tokens

KEYWORD = b"token"


def key_from_headers(headers: Any) -> str | None:
    """The key of an ``Authorization: Token <key>`` header, "" for a malformed one."""
    for name, value in headers or ():
        if name.lower() != b"authorization":
            continue
        parts = value.split()
        if not parts or parts[0].lower() != KEYWORD:
            return None
        if len(parts) != 2:
            return ""
        try:
            return str(parts[1].decode("ascii"))
        except UnicodeError:
            return ""
    return None


@database_sync_to_async
def user_for_key(key: str) -> Any:
    try:
        return tokens.authenticate_key(key).user
    except tokens.TokenInvalid:
        return AnonymousUser()


class TokenAuthMiddleware(BaseMiddleware):
    """Sets ``scope["user"]`` from a token header; leaves session users alone otherwise."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        key = key_from_headers(scope.get("headers"))
        if key is not None:
            user = await user_for_key(key) if key else AnonymousUser()
            scope = dict(scope, user=user)
        return await super().__call__(scope, receive, send)
