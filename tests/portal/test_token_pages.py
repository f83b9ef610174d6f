"""Tokens are created and revoked in the UI, only by their owner; the key is shown once."""

from __future__ import annotations

import re

import pytest

from portal.models import APIToken
from portal.tokens import authenticate_key
from queueing.models import AuditEvent
from tests import builders

pytestmark = pytest.mark.django_db


def test_create_shows_the_key_once_and_it_works(client):
    ana = builders.user("ana")
    client.force_login(ana)
    response = client.post(
        "/tokens/", {"op": "create", "name": "ci", "read_only": "on", "expires_in_days": "30"}
    )
    assert response.status_code == 200
    key = re.search(r'id="new-key" value="([^"]+)"', response.content.decode()).group(1)
    token = authenticate_key(key)
    assert (token.user, token.name, token.read_only) == (ana, "ci", True)
    assert token.expires_at is not None
    assert key not in client.get("/tokens/").content.decode()  # shown once
    assert AuditEvent.objects.filter(action="token.create", actor=ana).exists()


def test_bad_input_is_refused(client):
    client.force_login(builders.user("ana"))
    response = client.post("/tokens/", {"op": "create", "expires_in_days": "0"})
    assert response.status_code == 400
    assert not APIToken.objects.exists()


def test_revoke_only_your_own(client):
    from portal import tokens
    from queueing.actions import Actor

    ana, bob = builders.user("ana"), builders.user("bob")
    bobs = tokens.create_token(Actor.system(), bob, name="bob's").token
    client.force_login(ana)
    assert client.post("/tokens/", {"op": "revoke", "token": bobs.pk}).status_code == 404
    assert "bob&#x27;s" not in client.get("/tokens/").content.decode()
    client.force_login(bob)
    assert client.post("/tokens/", {"op": "revoke", "token": bobs.pk}).status_code == 302
    assert not APIToken.objects.exists()


def test_anonymous_users_are_sent_to_log_in(client):
    response = client.get("/tokens/")
    assert response.status_code == 302
    assert "/login/" in response["Location"]


def test_the_last_admin_cannot_leave_through_the_members_page(client):
    from queueing import actions
    from queueing.models import Membership

    tenant = actions.create_tenant(builders.SYSTEM, name="blue")
    ana = builders.user("ana", tenant=tenant, role="admin")
    client.force_login(ana)
    membership = Membership.objects.get(user=ana)
    response = client.post(
        f"/tenants/{tenant.name}/members/",
        {"op": "remove", "membership": membership.pk},
        follow=True,
    )
    assert response.status_code == 200
    assert "last admin" in response.content.decode()
    assert Membership.objects.filter(pk=membership.pk, role="admin").exists()
