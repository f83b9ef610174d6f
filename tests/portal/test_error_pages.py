"""Production-safe answers: the product's own 404/403/500/503 pages (never Django's debug
pages), security headers with a CSP that allows no inline script, 403s logged as one
line, a database outage answered 503 with a clear message, bodies bounded."""

from __future__ import annotations

import io
import json
import logging
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import OperationalError
from django.test import Client, override_settings

from portal.logfilters import ClientErrorsInOneLine
from portal.outage import server_error
from queueing.choices import Role
from tests import builders

pytestmark = pytest.mark.django_db

DEBUG_MARKERS = ("URLconf", "Django tried these URL patterns", "Traceback", "DEBUG = True")


def test_debug_is_off_unless_asked() -> None:
    assert django_settings.DEBUG is False


@pytest.mark.parametrize("path", ["/no-such-page/", "/api-nothing", "/static/nothing.css"])
def test_an_unknown_url_gets_the_products_404_page(client: Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404
    page = response.content.decode()
    assert not any(marker in page for marker in DEBUG_MARKERS)
    if not path.startswith("/static/"):
        assert "<h1>Not found</h1>" in page
        assert "Koord-Queue" in page


@pytest.fixture
def console() -> Iterator[io.StringIO]:
    """What the configured console handler (settings.LOGGING) writes."""
    [handler] = [h for h in logging.getLogger().handlers if h.get_name() == "console"]
    assert isinstance(handler, logging.StreamHandler)
    out = io.StringIO()
    previous = handler.setStream(out)
    yield out
    handler.setStream(previous)


def test_a_forbidden_page_is_the_products_403_logged_as_one_line(
    world: Any, console: io.StringIO
) -> None:
    viewer = builders.user("vic", tenant=world.tenant, role=Role.VIEWER)
    client = Client()
    client.force_login(viewer)
    response = client.get(f"/tenants/{world.tenant.name}/audit/")
    assert response.status_code == 403
    page = response.content.decode()
    assert "<h1>Not allowed</h1>" in page
    assert not any(marker in page for marker in DEBUG_MARKERS)
    err = console.getvalue()
    lines = [line for line in err.splitlines() if "Forbidden" in line]
    assert len(lines) == 1, err
    assert "Traceback" not in err


def test_the_filter_keeps_tracebacks_of_server_errors() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        info = sys.exc_info()

    def record(status: int) -> logging.LogRecord:
        rec = logging.LogRecord("django.request", logging.ERROR, __file__, 1, "x", None, info)
        rec.status_code = status
        return rec

    kept, dropped = record(500), record(403)
    ClientErrorsInOneLine().filter(kept)
    ClientErrorsInOneLine().filter(dropped)
    assert kept.exc_info is info
    assert dropped.exc_info is None


def test_pages_carry_security_headers(client: Client) -> None:
    response = client.get("/login/")
    csp = response["Content-Security-Policy"]
    directives = dict(
        (part.split()[0], part.split()[1:]) for part in csp.split(";") if part.strip()
    )
    assert directives["script-src"] == ["'self'"]
    assert directives["frame-ancestors"] == ["'none'"]
    assert directives["object-src"] == ["'none'"]
    assert "'unsafe-inline'" not in directives["script-src"] + directives["default-src"]
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"


def test_no_template_has_inline_script() -> None:
    root = Path(django_settings.BASE_DIR) / "templates"
    offenders = []
    for path in root.rglob("*.html"):
        text = path.read_text()
        for tag in re.findall(r"<script\b[^>]*>", text):
            if "src=" not in tag and 'type="application/json"' not in tag:
                offenders.append(f"{path.name}: {tag}")
        if re.search(r"\son[a-z]+\s*=", text):
            offenders.append(f"{path.name}: an inline event handler")
    assert offenders == []


def test_hsts_and_secure_cookies_over_tls() -> None:
    # KQ_TLS is read at start-up; these are the settings it turns on.
    with override_settings(SECURE_HSTS_SECONDS=31536000):
        client = Client()
        secure = client.get("/login/", secure=True)
        plain = client.get("/login/")
    assert secure["Strict-Transport-Security"].startswith("max-age=31536000")
    assert "Strict-Transport-Security" not in plain


def test_the_500_page_is_ours_and_json_under_the_api(rf: Any) -> None:
    page = server_error(rf.get("/tenants/x/"))
    assert page.status_code == 500
    assert "Something went wrong" in page.content.decode()
    api = server_error(rf.get("/api/v1/workloads/"))
    assert api.status_code == 500
    assert json.loads(api.content)["code"] == "server_error"


def test_a_database_outage_in_a_view_is_a_503_with_a_clear_message(
    world: Any, monkeypatch: pytest.MonkeyPatch, console: io.StringIO
) -> None:
    member = builders.user("mo", tenant=world.tenant, role=Role.MEMBER)
    client = Client()
    client.force_login(member)
    from portal.api import views

    def down(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("connection to server at 127.0.0.1 failed: Connection refused")

    monkeypatch.setattr(views.WorkloadViewSet, "list", down)
    api = client.get("/api/v1/workloads/")
    assert api.status_code == 503
    assert api.json() == {
        "status": 503,
        "code": "unavailable",
        "detail": "The database is not answering right now; nothing was changed. "
        "Try again shortly.",
        "fields": {},
    }
    assert api["Retry-After"] == "5"
    err = console.getvalue()
    assert "Traceback" not in err
    assert "503 GET /api/v1/workloads/" in err


def test_a_database_outage_outside_a_view_is_a_503_page(rf: Any) -> None:
    try:
        raise OperationalError("server closed the connection unexpectedly")
    except OperationalError:
        response = server_error(rf.get("/tenants/team-a/"))
    assert response.status_code == 503
    assert "Back shortly" in response.content.decode()
    assert response["Retry-After"] == "5"


def test_a_body_over_the_limit_is_refused_before_it_is_parsed(world: Any, settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048
    from portal import tokens

    member = builders.user("mo", tenant=world.tenant, role=Role.MEMBER)
    key = tokens.create_token(builders.SYSTEM, member).key
    client = Client(HTTP_AUTHORIZATION=f"Token {key}")

    def body(padding: int) -> str:
        return json.dumps(
            {"name": "big", "queue": world.queue.name, "annotations": {"pad": "x" * padding},
             "pod_sets": [{"count": 1, "requests": {"cpu": "1"}}]}
        )  # fmt: skip

    big = client.post("/api/v1/workloads/", body(4096), content_type="application/json")
    assert big.status_code == 413
    assert json.loads(big.content)["code"] == "too_large"
    assert json.loads(big.content)["detail"] == "The request body may be at most 2048 bytes."
    # The same body under the limit is read, validated and accepted.
    small = client.post("/api/v1/workloads/", body(100), content_type="application/json")
    assert small.status_code == 201, small.content
