"""One JSON shape for every error the API returns.

    {"status": 400, "code": "invalid", "detail": "min: min cpu (8) is more than max cpu (4).",
     "fields": {"min": ["min cpu (8) is more than max cpu (4)."]}}

``fields`` names each offending input field (nested ones with dots: ``pod_sets.0.count``);
``non_field_errors`` holds what belongs to no single field. ``detail`` is the first
message, readable on its own. Domain errors map as: ValidationError -> 400, ActionError
-> 409 ``refused``, ConflictError -> 409 ``conflict`` (412 ``precondition_failed`` when
the stale version came in ``If-Match``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from queueing.actions import ActionError, ConflictError

NON_FIELD = "non_field_errors"


class Refused(exceptions.APIException):
    """An action refused the request as asked (it names why)."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "refused"
    default_detail = "The request cannot be carried out."


class Conflict(exceptions.APIException):
    """The write was based on a stale version; nothing changed."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"
    default_detail = "The object changed meanwhile; reload and try again."


class PayloadTooLarge(exceptions.APIException):
    """A body over DATA_UPLOAD_MAX_MEMORY_SIZE (KQ_MAX_BODY_BYTES); nothing was read."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"
    default_detail = "The request body is too large."


class PreconditionFailed(exceptions.APIException):
    """If-Match named a version that is no longer current; nothing changed."""

    status_code = status.HTTP_412_PRECONDITION_FAILED
    default_code = "precondition_failed"
    default_detail = "If-Match does not match the current version."


def flatten(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """Nested DRF error details -> {"a.0.b": [messages]}."""
    out: dict[str, list[str]] = {}
    if isinstance(detail, Mapping):
        for key, value in detail.items():
            name = NON_FIELD if key in ("__all__", NON_FIELD) and not prefix else str(key)
            for sub, messages in flatten(value, f"{prefix}.{name}" if prefix else name).items():
                out.setdefault(sub, []).extend(messages)
    elif isinstance(detail, list | tuple):
        if all(not isinstance(item, Mapping | list | tuple) for item in detail):
            out.setdefault(prefix or NON_FIELD, []).extend(str(item) for item in detail)
        else:
            for index, item in enumerate(detail):
                if not item:
                    continue
                key = f"{prefix}.{index}" if prefix else str(index)
                for sub, messages in flatten(item, key).items():
                    out.setdefault(sub, []).extend(messages)
    else:
        out.setdefault(prefix or NON_FIELD, []).append(str(detail))
    return out


def body(status_code: int, code: str, detail: str, fields: Mapping[str, list[str]] | None = None):
    return {"status": status_code, "code": code, "detail": detail, "fields": dict(fields or {})}


def _summary(fields: Mapping[str, list[str]]) -> str:
    for name, messages in fields.items():
        if messages:
            return messages[0] if name == NON_FIELD else f"{name}: {messages[0]}"
    return "Invalid input."


def _code_of(exc: exceptions.APIException) -> str:
    codes = exc.get_codes()
    if isinstance(codes, str):
        return codes
    return exc.default_code


def to_api_exception(exc: Exception) -> Exception:
    """Domain and Django exceptions -> DRF exceptions (others pass through)."""
    if isinstance(exc, DjangoValidationError):
        if hasattr(exc, "error_dict"):
            return exceptions.ValidationError(exc.message_dict)
        return exceptions.ValidationError({NON_FIELD: exc.messages})
    if isinstance(exc, ConflictError):
        return Conflict(str(exc))
    if isinstance(exc, ActionError):
        return Refused(str(exc))
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return PayloadTooLarge(f"The request body may be at most {limit} bytes.")
    if isinstance(exc, Http404):
        return exceptions.NotFound()
    if isinstance(exc, DjangoPermissionDenied):
        return exceptions.PermissionDenied()
    return exc


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    exc = to_api_exception(exc)
    request = context.get("request")
    if request is not None and isinstance(
        exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed
    ):
        # Failed authentication is counted too (it never reaches the throttles): past the
        # anonymous rate, or many wrong keys of one prefix, a 429 instead of another 401.
        from portal.api.throttling import count_failed_auth

        wait = count_failed_auth(request)
        if wait is not None:
            exc = exceptions.Throttled(wait=math.ceil(wait))
    response = drf_exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return response
    if isinstance(exc, exceptions.ValidationError):
        fields = flatten(exc.detail)
        response.data = body(response.status_code, "invalid", _summary(fields), fields)
    else:
        detail = exc.detail
        text = str(detail) if not isinstance(detail, list | dict) else _summary(flatten(detail))
        response.data = body(response.status_code, _code_of(exc), text)
    return response


@csrf_exempt  # it changes nothing; answering 404 must not turn into a CSRF page
def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """Unknown paths under /api/ answer in the same shape as everything else."""
    return JsonResponse(body(404, "not_found", "No such API path."), status=404)


class ErrorSerializer(serializers.Serializer):
    """The error shape, for the schema."""

    status = serializers.IntegerField()
    code = serializers.CharField()
    detail = serializers.CharField()
    fields = serializers.DictField(  # type: ignore[assignment]  # the metaclass collects it
        child=serializers.ListField(child=serializers.CharField())
    )
