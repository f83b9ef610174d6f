"""Failed authentication is limited: wrong or missing tokens count against the anonymous
rate (per address) and against the key's prefix (from any address), with 429 and
Retry-After, audited once per window; the login form locks an account and an address
(django-axes), with 429 and Retry-After, audited."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from queueing.models import AuditEvent
from tests.portal.api.conftest import ApiWorld

pytestmark = pytest.mark.django_db

# Rates per day: a fixed window that turned over mid-test (each minute would) would
# reset the count; a day's turns over at midnight UTC only.


def seconds_to_midnight_utc() -> float:
    now = time.time()
    return (int(now // 86400) + 1) * 86400 - now


def _client(key: str | None, address: str = "10.0.0.1") -> APIClient:
    client = APIClient(REMOTE_ADDR=address)
    if key is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


@pytest.mark.parametrize("key", [None, "kq_wrongwrongwrongwrong", "not-even-ours"])
def test_failed_authentication_is_throttled_at_the_anonymous_rate(
    api: ApiWorld, settings: Any, key: str | None
) -> None:
    settings.KQ_API_RATES = {"token": "1000/day", "anon": "5/day"}
    settings.KQ_API_AUTH_FAIL_RATE = "1000/day"
    client = _client(key)
    statuses = [client.get("/api/v1/workloads/").status_code for _ in range(5)]
    assert statuses == [401] * 5
    throttled = client.get("/api/v1/workloads/")
    assert throttled.status_code == 429
    assert throttled.json()["code"] == "throttled"
    assert abs(int(throttled["Retry-After"]) - seconds_to_midnight_utc()) <= 5
    # Another address has its own budget; a valid token is not held back by it.
    assert _client(key, "10.0.0.2").get("/api/v1/workloads/").status_code == 401
    assert api.call("member", "get", "/api/v1/workloads/").status_code == 200
    # Audited once for the window, not once per refused request.
    assert client.get("/api/v1/workloads/").status_code == 429
    [event] = AuditEvent.objects.filter(action="auth.throttled")
    assert (event.object_type, event.object_id) == ("anon", "10.0.0.1")
    assert event.after["rate"] == "5/day"


def test_guessing_one_key_from_many_addresses_is_throttled_by_prefix(
    api: ApiWorld, settings: Any
) -> None:
    settings.KQ_API_RATES = {"token": "1000/day", "anon": "1000/day"}
    settings.KQ_API_AUTH_FAIL_RATE = "3/day"
    prefix = api.keys["member"][:10]
    statuses = [
        _client(f"{prefix}guess{i}", f"10.1.0.{i}").get("/api/v1/tenants/").status_code
        for i in range(4)
    ]
    assert statuses == [401, 401, 401, 429]
    assert AuditEvent.objects.filter(action="auth.throttled", object_type="prefix").count() == 1
    # Keys of another prefix are unaffected.
    assert _client("kq_ZZZZZZZguess", "10.1.0.9").get("/api/v1/tenants/").status_code == 401


def test_a_successful_anonymous_request_shares_the_count(api: ApiWorld, settings: Any) -> None:
    settings.KQ_API_RATES = {"token": "1000/day", "anon": "3/day"}
    client = _client(None, "10.2.0.1")
    assert client.get("/api/schema/").status_code == 200  # anonymous and allowed
    assert client.get("/api/schema/").status_code == 200
    assert client.get("/api/v1/tenants/").status_code == 401
    assert client.get("/api/v1/tenants/").status_code == 429


def _login(client: Client, username: str, password: str) -> Any:
    return client.post("/login/", {"username": username, "password": password})


@pytest.fixture
def login_limits(settings: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 3


def test_an_account_is_locked_after_failed_logins_from_any_address(
    api: ApiWorld, login_limits: None
) -> None:
    user = api.users["member"]
    user.set_password("right-password-1")
    user.save()
    statuses = [
        _login(Client(REMOTE_ADDR=f"10.3.0.{i}"), user.username, "wrong").status_code
        for i in range(3)
    ]
    assert statuses == [200, 200, 429]  # the form with its error, then the lockout
    locked = _login(Client(REMOTE_ADDR="10.3.0.99"), user.username, "right-password-1")
    assert locked.status_code == 429
    assert int(locked["Retry-After"]) == 15 * 60
    assert "Too many attempts" in locked.content.decode()
    event = AuditEvent.objects.filter(action="auth.locked_out").latest("id")
    assert event.after["username"] == user.username
    # Another account from another address still signs in.
    other = api.users["viewer"]
    other.set_password("right-password-2")
    other.save()
    ok = _login(Client(REMOTE_ADDR="10.3.0.50"), other.username, "right-password-2")
    assert ok.status_code == 302


def test_an_address_is_locked_after_failed_logins_for_any_account(
    api: ApiWorld, login_limits: None
) -> None:
    statuses = [
        _login(Client(REMOTE_ADDR="10.4.0.1"), name, "wrong").status_code
        for name in ("nobody-1", "nobody-2", "nobody-3")
    ]
    assert statuses == [200, 200, 429]
    user = api.users["viewer"]
    user.set_password("right-password-3")
    user.save()
    locked = _login(Client(REMOTE_ADDR="10.4.0.1"), user.username, "right-password-3")
    assert locked.status_code == 429
    assert "Retry-After" in locked
    assert AuditEvent.objects.filter(action="auth.locked_out").exists()
    # The same account from another address is fine: it was the address that was locked.
    ok = _login(Client(REMOTE_ADDR="10.4.0.2"), user.username, "right-password-3")
    assert ok.status_code == 302
