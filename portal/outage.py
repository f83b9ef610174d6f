"""Answers for when a service behind the web process is away, and the 500 page.

PostgreSQL restarting, or a connection pool with no connection to lend, raises in
whatever view was running; without this every such request printed a traceback and
answered a bare 500. The outage is the operator's to fix and the caller's to wait out:
503 with Retry-After and one sentence, in JSON under /api/ and as a page elsewhere, and
one log line per request rather than a traceback.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

log = logging.getLogger("portal.outage")

RETRY_AFTER_S = 5
MESSAGE = "The database is not answering right now; nothing was changed. Try again shortly."


def is_outage(exc: BaseException | None) -> bool:
    if exc is None:
        return False
    if isinstance(exc, OperationalError | InterfaceError):
        return True
    # psycopg_pool.PoolTimeout: no connection to lend within the pool's timeout.
    return type(exc).__name__ in ("PoolTimeout", "TooManyRequests") or (
        isinstance(exc, DatabaseError) and "connection" in str(exc).lower()
    )


def outage_response(request: HttpRequest) -> HttpResponse:
    response: HttpResponse
    if request.path.startswith("/api/"):
        body = {"status": 503, "code": "unavailable", "detail": MESSAGE, "fields": {}}
        response = JsonResponse(body, status=503)
    else:
        page = render_to_string("503.html", {"message": MESSAGE})  # no request: no session
        response = HttpResponse(page, status=503)
    response["Retry-After"] = str(RETRY_AFTER_S)
    return response


class ServiceOutageMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> Any:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if not is_outage(exc):
            return None
        first_line = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        log.warning("503 %s %s: %s", request.method, request.path, first_line)
        return outage_response(request)


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: an outage raised outside any view (in a middleware reading the session,
    say) is still a 503; anything else is our 500 page (JSON under /api/)."""
    if is_outage(sys.exc_info()[1]):
        return outage_response(request)
    if request.path.startswith("/api/"):
        body = {
            "status": 500,
            "code": "server_error",
            "detail": "Something went wrong on our side; it has been logged.",
            "fields": {},
        }
        return JsonResponse(body, status=500)
    # No request context: the context processors may be what failed.
    from django.template import loader

    return HttpResponse(loader.get_template("500.html").render(), status=500)
