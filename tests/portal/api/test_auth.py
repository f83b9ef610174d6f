"""Tokens (hashed at rest, expiry, read-only scope, the command), sessions with CSRF, and
throttling per token with 429 and Retry-After."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.test import APIClient

from portal import tokens
from portal.models import APIToken
from queueing.models import AuditEvent, Quota
from tests.builders import SYSTEM
from tests.portal.api.conftest import ApiWorld

pytestmark = pytest.mark.django_db


def test_keys_are_stored_only_as_digests(api: ApiWorld) -> None:
    key = api.keys["member"]
    token = APIToken.objects.get(user=api.users["member"])
    assert token.digest == hashlib.sha256(key.encode()).hexdigest()
    stored = [str(v) for v in APIToken.objects.values_list(flat=False)[0]]
    assert not any(key in value for value in stored)
    assert key.startswith(token.prefix)


def test_a_token_created_through_the_api_is_shown_once_and_works(api: ApiWorld) -> None:
    created = api.call("member", "post", "/api/v1/tokens/", {"name": "notebook"})
    assert created.status_code == 201
    key = created.json()["key"]
    assert key.startswith("kq_")
    listed = api.call("member", "get", "/api/v1/tokens/").json()["results"]
    assert all(row["key"] is None for row in listed)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/v1/workloads/").status_code == 200
    event = AuditEvent.objects.filter(action="token.create").latest("id")
    assert key not in str(event.after)


def test_a_revoked_token_stops_working_at_once(api: ApiWorld) -> None:
    token = APIToken.objects.get(user=api.users["member"])
    other = api.call("member", "post", "/api/v1/tokens/", {}).json()
    assert api.call("member", "delete", f"/api/v1/tokens/{token.pk}/").status_code == 204
    response = api.call("member", "get", "/api/v1/workloads/")
    assert response.status_code == 401
    assert response.json()["detail"] == "Invalid token."
    assert response["WWW-Authenticate"] == "Token"
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {other['key']}")
    assert client.get("/api/v1/workloads/").status_code == 200
    assert AuditEvent.objects.filter(action="token.revoke").count() == 1


def test_an_expired_token_is_refused(api: ApiWorld) -> None:
    new = tokens.create_token(
        SYSTEM, api.users["member"], expires_at=timezone.now() + timedelta(hours=1)
    )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {new.key}")
    assert client.get("/api/v1/workloads/").status_code == 200
    APIToken.objects.filter(pk=new.token.pk).update(expires_at=timezone.now())
    response = client.get("/api/v1/workloads/")
    assert response.status_code == 401
    assert response.json()["detail"] == "Token expired."


def test_expiry_must_be_in_the_future(api: ApiWorld) -> None:
    past = (timezone.now() - timedelta(days=1)).isoformat()
    response = api.call("member", "post", "/api/v1/tokens/", {"expires_at": past})
    assert response.status_code == 400
    assert "expires_at" in response.json()["fields"]


@pytest.mark.parametrize(
    "header", ["Token", "Token a b", "Token kq_nope", "Token not-even-ours", "Bearer x"]
)
def test_bad_credentials_are_401(api: ApiWorld, header: str) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get("/api/v1/workloads/")
    assert response.status_code == 401
    assert response.json()["code"] in ("authentication_failed", "not_authenticated")


def test_an_inactive_users_token_is_refused(api: ApiWorld) -> None:
    user = api.users["member"]
    user.is_active = False
    user.save()
    assert api.call("member", "get", "/api/v1/workloads/").status_code == 401


def test_read_only_tokens_read_but_never_write(api: ApiWorld) -> None:
    assert api.call("read_only", "get", "/api/v1/quotas/").status_code == 200
    response = api.call("read_only", "patch", "/api/v1/quotas/team-a-dev/", {"max": {"cpu": "6"}})
    assert response.status_code == 403
    assert response.json()["detail"] == "This token is read-only."
    assert api.call("read_only", "post", "/api/v1/tokens/", {}).status_code == 403
    assert Quota.objects.get(name="team-a-dev").version == 1


def test_last_used_is_recorded_at_most_once_a_minute(api: ApiWorld) -> None:
    token = APIToken.objects.get(user=api.users["member"])
    assert token.last_used_at is None
    api.call("member", "get", "/api/v1/tenants/")
    token.refresh_from_db()
    first = token.last_used_at
    assert first is not None
    api.call("member", "get", "/api/v1/tenants/")
    token.refresh_from_db()
    assert token.last_used_at == first


def test_create_token_command_prints_a_working_key(api: ApiWorld) -> None:
    out = StringIO()
    call_command("create_token", "mo", "--read-only", stdout=out)
    key = out.getvalue().strip()
    token = APIToken.objects.get(digest=tokens.digest(key))
    assert token.read_only
    assert token.user == api.users["member"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/v1/workloads/").status_code == 200
    assert client.post("/api/v1/tokens/", {}, format="json").status_code == 403
    with pytest.raises(CommandError, match="No user"):
        call_command("create_token", "nobody", stdout=StringIO())
    out = StringIO()
    call_command("create_token", "mo", "--expires-in-days", "2", stdout=out)
    expires = APIToken.objects.get(digest=tokens.digest(out.getvalue().strip())).expires_at
    assert expires is not None
    assert timedelta(days=1) < expires - timezone.now() <= timedelta(days=2)


def test_sessions_work_and_writes_need_the_csrf_token(api: ApiWorld) -> None:
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(api.users["tenant_admin"])
    assert client.get("/api/v1/quotas/").status_code == 200
    refused = client.patch("/api/v1/quotas/team-a-dev/", {"max": {"cpu": "6"}}, format="json")
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["detail"]
    client.get("/login/")  # sets the csrftoken cookie, as a page would
    csrf = client.cookies["csrftoken"].value
    accepted = client.patch(
        "/api/v1/quotas/team-a-dev/", {"max": {"cpu": "6"}}, format="json", HTTP_X_CSRFTOKEN=csrf
    )
    assert accepted.status_code == 200


def test_throttling_is_per_token_with_retry_after(api: ApiWorld, settings: Any) -> None:
    settings.KQ_API_RATES = {"token": "3/min", "anon": "2/min"}
    for _ in range(3):
        assert api.call("member", "get", "/api/v1/tenants/").status_code == 200
    throttled = api.call("member", "get", "/api/v1/tenants/")
    assert throttled.status_code == 429
    assert throttled.json()["code"] == "throttled"
    assert 1 <= int(throttled["Retry-After"]) <= 60
    # Another token has its own budget.
    assert api.call("viewer", "get", "/api/v1/tenants/").status_code == 200


def test_throttle_rates_are_checked_at_startup() -> None:
    from portal.api.throttling import parse_rate

    assert parse_rate("600/min") == (600, 60)
    assert parse_rate("5/s") == (5, 1)
