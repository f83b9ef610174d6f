"""POST /api/v1/preview/: the predicted effect of a quota change, nothing saved."""

from __future__ import annotations

import pytest

from queueing.models import AuditEvent, Quota, Workload
from tests import builders
from tests.portal.api.base import ADMINS, matrix, outcomes
from tests.portal.api.conftest import ApiWorld

pytestmark = pytest.mark.django_db
URL = "/api/v1/preview/"


def state() -> tuple:
    return (
        list(Quota.objects.order_by("id").values_list("version", "min", "max", "shared_weight")),
        list(Workload.objects.order_by("id").values_list("phase", "position", "eta_p50")),
        AuditEvent.objects.count(),
    )


def test_permissions(api: ApiWorld) -> None:
    data = {"quota": "team-a-train", "max": {"cpu": "12"}}
    # Preview needs the right to make the edit; it saves nothing, so read-only tokens may.
    expected = matrix(200, (*ADMINS, "read_only"), outsider=400)
    assert outcomes(api, "post", URL, data) == expected
    assert outcomes(api, "post", URL, {"quota": "team-a-q", "max": {"cpu": "30"}}) == matrix(
        200, ("cluster_admin", "read_only"), outsider=400
    )


def test_a_tighter_max_predicts_who_stops_fitting_and_saves_nothing(api: ApiWorld) -> None:
    builders.submit(api.w, "a-job-2", quota=api.train, cpu="4")
    before = state()
    response = api.call(
        "tenant_admin",
        "post",
        URL,
        {"quota": "team-a-train", "min": {"cpu": "2"}, "max": {"cpu": "2"}},
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert state() == before

    by_name = {q["name"]: q for q in body["quotas"]}
    train = by_name["team-a-train"]
    assert train["changed"]
    assert (train["before"]["max"], train["after"]["max"]) == ({"cpu": "16"}, {"cpu": "2"})
    moved = {w["name"]: w for w in body["workloads"]}
    assert moved["a-job-2"]["before"]["admitted"] is True
    assert moved["a-job-2"]["after"]["admitted"] is False
    assert body["summary"]["admitted_after"] < body["summary"]["admitted_before"]


def test_other_tenants_quotas_and_workloads_are_left_out(api: ApiWorld) -> None:
    body = api.call(
        "tenant_admin",
        "post",
        URL,
        {"quota": "team-a-train", "min": {"cpu": "2"}, "max": {"cpu": "2"}},
    )
    names = {q["name"] for q in body.json()["quotas"]}
    assert names == {"cluster", "team-a-q", "team-a-train", "team-a-dev"}
    assert all(w["name"] != "b-job-1" for w in body.json()["workloads"])
    everything = api.call("cluster_admin", "post", URL, {"quota": "team-a-train", "min": {"cpu": "2"}, "max": {"cpu": "2"}})  # fmt: skip
    assert {"team-b-q", "team-b-train"} <= {q["name"] for q in everything.json()["quotas"]}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"quota": "team-a-train", "min": {"cpu": "20"}}, "min"),
        ({"quota": "team-a-train", "max": {"cpu": "x"}}, "max"),
        ({"quota": "team-a-train", "namespaces": []}, "namespaces"),
        ({"quota": "team-b-train", "max": {"cpu": "1"}}, "quota"),
        ({"max": {"cpu": "1"}}, "quota"),
    ],
)
def test_a_proposal_is_checked_like_the_edit(api: ApiWorld, data: dict, field: str) -> None:
    before = state()
    response = api.call("tenant_admin", "post", URL, data)
    assert response.status_code == 400
    assert field in response.json()["fields"]
    assert state() == before


NEW = {"name": "team-a-new", "parent": "team-a-q", "min": {"cpu": "1"}, "max": {"cpu": "4"}}


def test_previewing_a_new_quota_needs_the_right_to_create_it(api: ApiWorld) -> None:
    expected = matrix(200, (*ADMINS, "read_only"), outsider=400)
    assert outcomes(api, "post", URL, {"new": NEW}) == expected
    # A new top-level quota of a tenant is the cluster admins' to create.
    top = {"name": "team-a-more", "parent": "cluster", "max": {"cpu": "1"}}
    # (The outsider sees the cluster-owned parent, so it learns only that it may not.)
    assert outcomes(api, "post", URL, {"new": top}) == matrix(200, ("cluster_admin", "read_only"))


def test_a_new_quota_is_previewed_and_nothing_is_saved(api: ApiWorld) -> None:
    before = state()
    response = api.call("tenant_admin", "post", URL, {"new": NEW})
    assert response.status_code == 200, response.json()
    assert state() == before
    assert not Quota.objects.filter(name="team-a-new").exists()
    names = {q["name"] for q in response.json()["quotas"]}
    assert "team-a-new" in names
    assert "team-b-q" not in names


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"new": {**NEW, "max": {"cpu": "x"}}}, "max"),
        ({"new": {**NEW, "max": {"cpu": "1000"}}}, "max"),
        ({"new": {**NEW, "parent": "team-b-q"}}, "parent"),
        ({"new": {**NEW, "colour": "red"}}, "colour"),
        ({"quota": "team-a-train", "new": NEW}, "quota"),
    ],
)
def test_a_new_quota_is_checked_like_its_creation(api: ApiWorld, data: dict, field: str) -> None:
    before = state()
    response = api.call("tenant_admin", "post", URL, data)
    assert response.status_code == 400, response.json()
    assert any(field in name for name in response.json()["fields"]), response.json()
    assert state() == before


def test_what_it_would_change_under_full_demand_only_for_visible_quotas(api: ApiWorld) -> None:
    data = {"quota": "team-a-train", "min": {"cpu": "2"}, "max": {"cpu": "2"}}
    everything = api.call("cluster_admin", "post", URL, data).json()["full_demand"]
    moved = {q["name"]: q for q in everything}
    assert "team-a-train" in moved  # wanting all it may hold, it would get less under max 2
    train = moved["team-a-train"]
    assert train["after"]["cpu"] == "2"
    assert train["before"]["cpu"] != "2"
    assert any(name.startswith("team-b") for name in moved)  # the others gain: hidden below
    mine = api.call("tenant_admin", "post", URL, data).json()["full_demand"]
    assert {q["name"] for q in mine} == {q["name"] for q in everything} & {
        "cluster", "team-a-q", "team-a-train", "team-a-dev",
    }  # fmt: skip
