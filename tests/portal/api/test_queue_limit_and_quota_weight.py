"""A queue's maximum execution time and a quota's fair-share weight through the API
(issue 12 item 7): read, set, cleared, refused when bad or not yours, nothing saved then."""

from __future__ import annotations

import pytest

from queueing.models import AuditEvent, Queue, Quota
from tests.portal.api.test_validation import assert_error

pytestmark = pytest.mark.django_db

QUOTA = "/api/v1/quotas/team-a-dev/"


def queue_url(api) -> str:
    return f"/api/v1/queues/{api.queue.pk}/"


def test_the_queue_limit_is_read_set_and_cleared(api) -> None:
    url = queue_url(api)
    assert api.call("tenant_admin", "get", url).json()["max_execution_s"] is None
    got = api.call("tenant_admin", "patch", url, {"max_execution_s": 3600, "version": 1})
    assert got.status_code == 200, got.json()
    assert got.json()["max_execution_s"] == 3600
    assert Queue.objects.get(pk=api.queue.pk).max_execution_s == 3600
    event = AuditEvent.objects.filter(action="queue.update").latest("id")
    assert (event.before["max_execution_s"], event.after["max_execution_s"]) == (None, 3600)
    off = api.call("tenant_admin", "patch", url, {"max_execution_s": None, "version": 2})
    assert off.status_code == 200, off.json()
    assert Queue.objects.get(pk=api.queue.pk).max_execution_s is None


def test_a_new_queue_takes_its_limit(api) -> None:
    body = {"name": "team-a-batch", "tenant": "team-a", "max_execution_s": 600}
    got = api.call("tenant_admin", "post", "/api/v1/queues/", body)
    assert got.status_code == 201, got.json()
    assert Queue.objects.get(name="team-a-batch").max_execution_s == 600


@pytest.mark.parametrize("bad", [0, -5, 10**9, "soon", 1.5, True])
def test_a_bad_queue_limit_is_a_clear_400_and_saves_nothing(api, bad) -> None:
    body = assert_error(
        api.call("tenant_admin", "patch", queue_url(api), {"max_execution_s": bad}),
        400,
        "invalid",
        "max_execution_s",
    )
    assert body["fields"]["max_execution_s"][0]
    queue = Queue.objects.get(pk=api.queue.pk)
    assert (queue.max_execution_s, queue.version) == (None, 1)


@pytest.mark.parametrize(
    ("persona", "status"), [("member", 403), ("viewer", 403), ("outsider", 404)]
)
def test_only_its_admins_set_a_queue_limit(api, persona, status) -> None:
    got = api.call(persona, "patch", queue_url(api), {"max_execution_s": 60})
    assert got.status_code == status, got.json()
    assert Queue.objects.get(pk=api.queue.pk).max_execution_s is None


def test_the_fair_weight_is_read_set_and_shown_in_the_tree(api) -> None:
    assert api.call("tenant_admin", "get", QUOTA).json()["fair_weight"] == 1.0
    got = api.call("tenant_admin", "patch", QUOTA, {"fair_weight": 2.5, "version": 1})
    assert got.status_code == 200, got.json()
    assert got.json()["fair_weight"] == 2.5
    assert Quota.objects.get(name="team-a-dev").fair_weight == 2.5
    event = AuditEvent.objects.filter(action="quota.update").latest("id")
    assert (event.before["fair_weight"], event.after["fair_weight"]) == (1.0, 2.5)
    tree = api.call("cluster_admin", "get", "/api/v1/quotas/tree/").json()
    weights: dict[str, float] = {}
    stack = list(tree)
    while stack:
        node = stack.pop()
        weights[node["name"]] = node["fair_weight"]
        stack.extend(node["children"])
    assert weights["team-a-dev"] == 2.5
    assert weights["team-a-train"] == 1.0


def test_a_new_quota_takes_its_weight(api) -> None:
    body = {"name": "team-a-heavy", "parent": "team-a-q", "fair_weight": 4, "max": {"cpu": "2"}}
    got = api.call("tenant_admin", "post", "/api/v1/quotas/", body)
    assert got.status_code == 201, got.json()
    assert Quota.objects.get(name="team-a-heavy").fair_weight == 4.0


@pytest.mark.parametrize("bad", [0, -1, 1001, "nan", "inf", "heavy", None])
def test_a_bad_fair_weight_is_a_clear_400_and_saves_nothing(api, bad) -> None:
    body = assert_error(
        api.call("tenant_admin", "patch", QUOTA, {"fair_weight": bad}),
        400,
        "invalid",
        "fair_weight",
    )
    assert body["fields"]["fair_weight"][0]
    quota = Quota.objects.get(name="team-a-dev")
    assert (quota.fair_weight, quota.version) == (1.0, 1)


def test_a_bad_weight_on_a_new_quota_creates_nothing(api) -> None:
    body = {"name": "team-a-zero", "parent": "team-a-q", "fair_weight": 0}
    assert_error(
        api.call("tenant_admin", "post", "/api/v1/quotas/", body), 400, "invalid", "fair_weight"
    )
    assert not Quota.objects.filter(name="team-a-zero").exists()
    assert not Queue.objects.filter(name="team-a-zero").exists()


@pytest.mark.parametrize(
    ("persona", "status"), [("member", 403), ("viewer", 403), ("outsider", 404)]
)
def test_only_its_admins_set_a_fair_weight(api, persona, status) -> None:
    got = api.call(persona, "patch", QUOTA, {"fair_weight": 3})
    assert got.status_code == status, got.json()
    assert Quota.objects.get(name="team-a-dev").fair_weight == 1.0


def test_the_preview_of_a_weight_change_saves_nothing(api) -> None:
    got = api.call(
        "tenant_admin", "post", "/api/v1/preview/", {"quota": "team-a-dev", "fair_weight": 3}
    )
    assert got.status_code == 200, got.json()
    bad = api.call(
        "tenant_admin", "post", "/api/v1/preview/", {"quota": "team-a-dev", "fair_weight": -3}
    )
    assert bad.status_code == 400, bad.json()
    assert Quota.objects.get(name="team-a-dev").fair_weight == 1.0
