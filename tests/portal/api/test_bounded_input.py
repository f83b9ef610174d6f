"""Bounded input on every list: pagination, ids and numeric filters out of range get a 400
that names the parameter (never a 500); and what a quota's ``children`` may name."""

from __future__ import annotations

from typing import Any

import pytest

from tests.portal.api.conftest import ApiWorld

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(shared_api: ApiWorld) -> ApiWorld:
    return shared_api  # one world for the module (tests/portal/api/conftest.py)


LISTS = [
    "/api/v1/tenants/",
    "/api/v1/memberships/",
    "/api/v1/quotas/",
    "/api/v1/queues/",
    "/api/v1/workloads/",
    "/api/v1/cycles/",
    "/api/v1/audit/",
    "/api/v1/tokens/",
    "/api/v1/sim/nodes/",
]

HUGE = ["1000000000000000000000000000000", "9223372036854775808", "2147483648"]
NOT_NUMBERS = ["-1", "abc", "1.5", "1e3", "\u0661", " 1", "0x10", "+5"]


@pytest.mark.parametrize("url", LISTS)
@pytest.mark.parametrize("value", HUGE + NOT_NUMBERS)
def test_an_offset_out_of_range_is_a_400_naming_offset(api: ApiWorld, url: str, value: str) -> None:
    response = api.call("cluster_admin", "get", url, {"offset": value})
    assert response.status_code == 400, response.content
    body = response.json()
    assert list(body["fields"]) == ["offset"]
    assert body["detail"].startswith("offset: Must be a whole number from 0 to 2147483647")


@pytest.mark.parametrize("url", LISTS)
@pytest.mark.parametrize("value", ["0", "1001", *HUGE, *NOT_NUMBERS])
def test_a_limit_out_of_range_is_a_400_naming_limit(api: ApiWorld, url: str, value: str) -> None:
    response = api.call("cluster_admin", "get", url, {"limit": value})
    assert response.status_code == 400, response.content
    assert list(response.json()["fields"]) == ["limit"]


@pytest.mark.parametrize("url", LISTS)
def test_offsets_and_limits_in_range_still_page(api: ApiWorld, url: str) -> None:
    first = api.call("cluster_admin", "get", url, {"limit": "1", "offset": "0"})
    assert first.status_code == 200
    body = first.json()
    assert len(body["results"]) == min(1, body["count"])
    last = api.call("cluster_admin", "get", url, {"offset": "2147483647", "limit": "1000"})
    assert last.status_code == 200
    assert last.json()["results"] == []
    assert last.json()["count"] == body["count"]


@pytest.mark.parametrize("name", ["tenant_id", "queue_id", "quota_id"])
@pytest.mark.parametrize("value", [*HUGE[:2], "0", "-3", "abc", "1.5"])
def test_an_id_filter_out_of_range_is_a_400_naming_it(api: ApiWorld, name: str, value: str) -> None:
    response = api.call("member", "get", "/api/v1/workloads/", {name: value})
    assert response.status_code == 400, response.content
    assert list(response.json()["fields"]) == [name]


@pytest.mark.parametrize("name", ["priority_min", "priority_max"])
def test_a_priority_filter_beyond_32_bits_is_a_400(api: ApiWorld, name: str) -> None:
    response = api.call("member", "get", "/api/v1/workloads/", {name: "2147483648"})
    assert response.status_code == 400
    assert list(response.json()["fields"]) == [name]
    fine = api.call("member", "get", "/api/v1/workloads/", {name: "2147483647"})
    assert fine.status_code == 200


def test_id_filters_in_range_still_filter(api: ApiWorld) -> None:
    mine = api.call("member", "get", "/api/v1/workloads/", {"quota_id": api.train.pk})
    assert [row["id"] for row in mine.json()["results"]] == [api.workload.pk]
    none = api.call("member", "get", "/api/v1/workloads/", {"quota_id": "9223372036854775807"})
    assert none.status_code == 200
    assert none.json()["count"] == 0


def test_a_huge_page_number_on_a_page_is_not_a_server_error(api: ApiWorld, client: Any) -> None:
    client.force_login(api.users["tenant_admin"])
    response = client.get(f"/tenants/{api.tenant.name}/audit/", {"page": "1" + "0" * 30})
    assert response.status_code == 200


def test_the_cluster_quota_names_only_the_children_the_caller_may_see(api: ApiWorld) -> None:
    seen_by_b = api.call("outsider", "get", "/api/v1/quotas/cluster/").json()["children"]
    seen_by_a = api.call("member", "get", "/api/v1/quotas/cluster/").json()["children"]
    seen_by_admin = api.call("cluster_admin", "get", "/api/v1/quotas/cluster/").json()["children"]
    assert seen_by_b == ["team-b-q"]
    assert seen_by_a == ["team-a-q"]
    assert seen_by_admin == ["team-a-q", "team-b-q"]
    # And in the list, the same.
    listed = api.call("outsider", "get", "/api/v1/quotas/", {"name": "cluster"}).json()
    assert listed["results"][0]["children"] == ["team-b-q"]
    assert api.call("outsider", "get", "/api/v1/quotas/team-a-q/").status_code == 404
