"""OpenAPI generation: every operation documents the error answers it can give, in the
one error shape (see portal.api.errors), so clients and schemathesis know them."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema as BaseAutoSchema
from drf_spectacular.utils import OpenApiResponse

from portal.api.errors import ErrorSerializer

ERRORS = {
    "400": "Invalid input or query; `fields` names what to fix.",
    "401": "No credentials, or a bad token.",
    "403": "Your role (or a read-only token) does not allow this.",
    "404": "No such object, or not one of your tenants'.",
    "409": "Refused as asked, or based on a stale version; nothing changed.",
    "412": "If-Match names a stale version; nothing changed.",
    "413": "The request body is larger than the server accepts (KQ_MAX_BODY_BYTES); "
    "nothing was read or changed.",
    "429": "Too many requests; see Retry-After.",
    "503": "The database is not answering right now; nothing was changed. Try again after "
    "Retry-After seconds.",
}
# Answers that carry a Retry-After header (seconds).
RETRY_AFTER = {
    "Retry-After": {
        "schema": {"type": "integer", "minimum": 0},
        "description": "Seconds to wait before trying again.",
    }
}


class AutoSchema(BaseAutoSchema):
    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)
        if direction != "response":
            return responses
        # Any operation may meet a database outage (portal.outage answers it).
        codes = ["503"]
        if "public" not in getattr(self.view, "schema_tags", ()):
            codes += ["400", "401", "403", "429"]
            if "{" in self.path:
                codes.append("404")
            if self.method in ("POST", "PUT", "PATCH", "DELETE"):
                codes.append("409")
            if self.method in ("POST", "PUT", "PATCH"):
                codes.append("413")  # a body over DATA_UPLOAD_MAX_MEMORY_SIZE
            if self.method in ("PUT", "PATCH", "DELETE") and getattr(self.view, "versioned", False):
                codes.append("412")
        for code in codes:
            if code not in responses:
                responses[code] = self._get_response_for_code(
                    OpenApiResponse(ErrorSerializer, description=ERRORS[code]), code
                )
                if code in ("429", "503"):
                    responses[code]["headers"] = dict(RETRY_AFTER)
        return responses


class TokenAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "portal.api.authentication.TokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Token <key>`; create one with `manage.py create_token <user>`.",
        }
