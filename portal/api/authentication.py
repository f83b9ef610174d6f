"""``Authorization: Token <key>`` with personal API tokens (see portal.tokens)."""

from __future__ import annotations

from typing import Any

from rest_framework import authentication, exceptions
from rest_framework.request import Request

from portal import tokens


class TokenAuthentication(authentication.BaseAuthentication):
    """Authenticates ``Token <key>``; ``request.auth`` is the APIToken."""

    keyword = "Token"

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(
                "Send the key as 'Authorization: Token <key>', with no spaces in the key."
            )
        try:
            key = header[1].decode()
        except UnicodeError as exc:
            raise exceptions.AuthenticationFailed("Invalid token.") from exc
        try:
            token = tokens.authenticate_key(key)
        except tokens.TokenInvalid as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from exc
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return self.keyword
