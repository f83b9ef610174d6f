"""Validation: quantities, tree rules, unknown fields, versions; one error shape naming the
field; nothing saved when a request is refused."""

from __future__ import annotations

from typing import Any

import pytest

from queueing.models import AuditEvent, Quota, Workload
from tests.portal.api.conftest import ApiWorld

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(shared_api: ApiWorld) -> ApiWorld:
    return shared_api  # one world for the module (tests/portal/api/conftest.py)


QUOTA = "/api/v1/quotas/team-a-dev/"


def assert_error(response: Any, status: int, code: str, field: str | None = None) -> dict:
    body = response.json()
    assert response.status_code == status, body
    assert set(body) == {"status", "code", "detail", "fields"}
    assert (body["status"], body["code"]) == (status, code)
    assert isinstance(body["detail"], str)
    assert body["detail"]
    if field is not None:
        assert field in body["fields"], body
        assert all(isinstance(m, str) for m in body["fields"][field])
    return body


def unchanged(api: ApiWorld) -> None:
    quota = Quota.objects.get(name="team-a-dev")
    assert (quota.version, quota.max) == (1, {"cpu": 4000 * 2})


@pytest.mark.parametrize(
    ("data", "field", "needle"),
    [
        ({"max": {"cpu": "lots"}}, "max", "not a Kubernetes quantity"),
        ({"max": {"cpu": "-1"}}, "max", "negative"),
        ({"max": {"cpu": "0.5m"}}, "max", "finer than the smallest unit"),
        ({"max": {"Not A Resource!": "1"}}, "max", "not a Kubernetes resource name"),
        ({"max": ["cpu"]}, "max", "map"),
        ({"min": {"cpu": "9"}}, "min", "more than max"),
        ({"max": {"cpu": "64"}}, "max", "more than the parent"),
        ({"min": {"cpu": "9"}, "max": {"cpu": "9"}}, "min", "siblings"),
        ({"parent": "team-a-dev"}, "parent", "cycle"),
        ({"parent": "team-b-q"}, "parent", "No quota named"),
        ({"namespaces": ["team-a-train"]}, "namespaces", "already belongs"),
        ({"namespaces": ["Bad_NS"]}, "namespaces", "not a Kubernetes namespace"),
        ({"allow_lent": "perhaps"}, "allow_lent", "valid boolean"),
        ({"version": "one"}, "version", "valid integer"),
        ({"name": "renamed"}, "name", "cannot be changed"),
        ({"default_queue_policy": "Block"}, "default_queue_policy", "when creating"),
        ({"default_queue": "team-b-train"}, "default_queue", "No queue named"),
        ({"shared_weight": {"cpu": "x"}}, "shared_weight", "not a Kubernetes quantity"),
    ],
)
def test_quota_edits_are_checked_and_nothing_changes(api, data, field, needle) -> None:
    audits = AuditEvent.objects.count()
    body = assert_error(api.call("tenant_admin", "patch", QUOTA, data), 400, "invalid", field)
    assert needle in " ".join(body["fields"][field]), body
    assert body["detail"].startswith(f"{field}: ")
    unchanged(api)
    assert AuditEvent.objects.count() == audits


def test_several_errors_are_reported_at_once(api) -> None:
    data = {"max": {"cpu": "x"}, "allow_lent": "maybe", "colour": "blue"}
    body = assert_error(api.call("tenant_admin", "patch", QUOTA, data), 400, "invalid")
    assert set(body["fields"]) == {"max", "allow_lent", "colour"}


def test_a_stale_version_in_the_body_is_409_and_changes_nothing(api) -> None:
    first = api.call("tenant_admin", "patch", QUOTA, {"max": {"cpu": "6"}, "version": 1})
    assert first.status_code == 200
    assert first.json()["version"] == 2
    stale = api.call("cluster_admin", "patch", QUOTA, {"max": {"cpu": "7"}, "version": 1})
    assert_error(stale, 409, "conflict")
    assert Quota.objects.get(name="team-a-dev").max == {"cpu": 6000}


def test_if_match_carries_the_etag_and_a_stale_one_is_412(api) -> None:
    got = api.call("tenant_admin", "get", QUOTA)
    assert got["ETag"] == '"1"'
    ok = api.call("tenant_admin", "patch", QUOTA, {"max": {"cpu": "6"}}, HTTP_IF_MATCH='"1"')
    assert ok.status_code == 200
    assert ok["ETag"] == '"2"'
    stale = api.call("tenant_admin", "patch", QUOTA, {"max": {"cpu": "7"}}, HTTP_IF_MATCH='"1"')
    assert_error(stale, 412, "precondition_failed")
    assert Quota.objects.get(name="team-a-dev").max == {"cpu": 6000}
    nonsense = api.call("tenant_admin", "patch", QUOTA, {"max": {"cpu": "7"}}, HTTP_IF_MATCH="x")
    assert_error(nonsense, 412, "precondition_failed")
    anything = api.call("tenant_admin", "patch", QUOTA, {"max": {"cpu": "7"}}, HTTP_IF_MATCH="*")
    assert anything.status_code == 200


def test_if_match_and_a_body_version_must_agree(api) -> None:
    response = api.call(
        "tenant_admin", "patch", QUOTA, {"max": {"cpu": "6"}, "version": 2}, HTTP_IF_MATCH='"1"'
    )
    assert_error(response, 400, "invalid", "version")
    unchanged(api)


def test_a_stale_delete_is_412_and_keeps_the_quota(api) -> None:
    api.call("tenant_admin", "patch", QUOTA, {"max": {"cpu": "6"}})
    assert_error(api.call("tenant_admin", "delete", QUOTA, HTTP_IF_MATCH='"1"'), 412, "precondition_failed")  # fmt: skip
    assert Quota.objects.filter(name="team-a-dev").exists()
    assert api.call("tenant_admin", "delete", QUOTA, HTTP_IF_MATCH='"2"').status_code == 204


def test_queue_versions_work_the_same_way(api) -> None:
    url = f"/api/v1/queues/{api.queue.pk}/"
    assert api.call("tenant_admin", "patch", url, {"priority": 1, "version": 1}).status_code == 200
    assert_error(api.call("tenant_admin", "patch", url, {"priority": 2, "version": 1}), 409, "conflict")  # fmt: skip
    assert_error(api.call("tenant_admin", "patch", url, {"priority": 2}, HTTP_IF_MATCH='"1"'), 412, "precondition_failed")  # fmt: skip


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"backoff_base_s": 60, "backoff_max_s": 10}, "backoff_max_s"),
        ({"backoff_jitter": 2}, "backoff_jitter"),
        ({"backoff_base_s": "nan"}, "backoff_base_s"),
        ({"policy": "Lottery"}, "policy"),
        ({"priority": 2**40}, "priority"),
        ({"reclaim": "Sometimes"}, "reclaim"),
    ],
)
def test_queue_settings_are_checked(api, data, field) -> None:
    url = f"/api/v1/queues/{api.queue.pk}/"
    assert_error(api.call("tenant_admin", "patch", url, data), 400, "invalid", field)
    assert api.call("tenant_admin", "get", url).json()["version"] == 1


def test_a_refused_action_is_409_refused(api) -> None:
    # A quota with children cannot be deleted: the action refuses, nothing is removed.
    body = assert_error(api.call("cluster_admin", "delete", "/api/v1/quotas/team-a-q/"), 409, "refused")  # fmt: skip
    assert "children" in body["detail"]
    assert Quota.objects.filter(name="team-a-q").exists()


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"pod_sets": [{"count": 0, "requests": {"cpu": "1"}}]}, "pod_sets.0.count"),
        ({"pod_sets": [{"count": 1, "requests": {"cpu": "1x"}}]}, "pod_sets.0.requests"),
        ({"pod_sets": [{"count": 1, "requests": {}}]}, "pod_sets"),
        ({"pod_sets": [{"count": 1}]}, "pod_sets.0.requests"),
        ({"pod_sets": [{"requests": {"cpu": "1"}, "gpu": 1}]}, "pod_sets.0.gpu"),
        ({"pod_sets": []}, "pod_sets"),
        ({"name": "Not_A_Name"}, "name"),
        ({"queue": "team-b-train"}, "queue"),
        ({"queue": None, "namespace": "team-b-train"}, "namespace"),
        ({"priority": "high"}, "priority"),
        ({"expected_runtime_s": -5}, "expected_runtime_s"),
        ({"labels": {"a": 1}}, "labels"),
        ({"labels": {"a": "nul\x00"}}, "labels"),
        ({"manifest": {"spec": {}}}, "manifest"),
        ({"template": {"spec": {}}, "manifest": {}}, "template"),
    ],
)
def test_submissions_are_checked_and_nothing_is_created(api, data, field) -> None:
    base = {"name": "job-x", "queue": "team-a-train", "pod_sets": [{"requests": {"cpu": "1"}}]}
    payload = {k: v for k, v in {**base, **data}.items() if v is not None}
    before = Workload.objects.count()
    assert_error(api.call("member", "post", "/api/v1/workloads/", payload), 400, "invalid", field)
    assert Workload.objects.count() == before


def test_a_duplicate_live_name_is_refused(api) -> None:
    data = {"name": "a-job-1", "queue": "team-a-train", "pod_sets": [{"requests": {"cpu": "1"}}]}
    assert_error(api.call("member", "post", "/api/v1/workloads/", data), 400, "invalid", "name")


def test_malformed_json_and_wrong_types_answer_in_the_same_shape(api) -> None:
    client = api.client("member")
    broken = client.post("/api/v1/workloads/", "{not json", content_type="application/json")
    assert_error(broken, 400, "parse_error")
    listing = client.post("/api/v1/workloads/", [1, 2], format="json")
    assert_error(listing, 400, "invalid", "non_field_errors")
    form = client.post(
        "/api/v1/workloads/", "a=b", content_type="application/x-www-form-urlencoded"
    )
    assert_error(form, 415, "unsupported_media_type")


def test_invalid_filters_are_400(api) -> None:
    response = api.call("member", "get", "/api/v1/workloads/", {"phase": "Sleeping"})
    assert_error(response, 400, "invalid", "phase")
    response = api.call("member", "get", "/api/v1/workloads/", {"ordering": "explanation"})
    assert response.status_code == 200  # unknown orderings are ignored, as DRF does


def test_unknown_paths_and_methods_answer_in_the_same_shape(api) -> None:
    assert_error(api.call("member", "get", "/api/v1/nothing-here/"), 404, "not_found")
    assert_error(api.call("member", "get", "/api/v1/workloads/abc/"), 404, "not_found")
    assert_error(api.call("member", "delete", "/api/v1/workloads/"), 405, "method_not_allowed")
