"""Forms: quantities in, field errors that name the numbers, versions, preview, audit."""

from __future__ import annotations

import re
from typing import Any

from queueing import actions
from queueing.models import AuditEvent, Membership, Queue, Quota, Workload
from tests.builders import SYSTEM, submit


def grid(quota: Quota, **cells: str) -> dict[str, Any]:
    """The POST of the quota form: rows for cpu and memory plus one blank row."""
    rows = [("cpu", quota.min.get("cpu"), quota.max.get("cpu")), ("memory", None, None)]
    data: dict[str, Any] = {
        "res-TOTAL_FORMS": "3",
        "res-INITIAL_FORMS": "2",
        "res-MIN_NUM_FORMS": "0",
        "res-MAX_NUM_FORMS": "64",
        "allow_lent": "on",
        "namespaces": ", ".join(quota.namespaces),
        "version": str(quota.version),
    }
    for i, (name, low, high) in enumerate(rows):
        data[f"res-{i}-resource"] = name
        data[f"res-{i}-min"] = str(low // 1000) if low and name == "cpu" else ""
        data[f"res-{i}-max"] = str(high // 1000) if high and name == "cpu" else ""
        data[f"res-{i}-weight"] = ""
    data.update({"res-2-resource": "", "res-2-min": "", "res-2-max": "", "res-2-weight": ""})
    data.update(cells)
    return data


def edit_url(site) -> str:
    return f"/tenants/{site.tenant.name}/quotas/{site.quota.name}/edit/"


def digest_of(response) -> str:
    match = re.search(r'name="preview_digest" value="([0-9a-f]+)"', response.content.decode())
    assert match, "the preview carries a digest for Save"
    return match.group(1)


def test_a_quota_edit_is_previewed_then_saved_and_audited(site):
    for i in range(3):
        submit(site.world, f"w{i}", cpu="5")
    root = site.client("root")
    data = grid(site.quota, **{"res-0-max": "8"})
    preview = root.post(edit_url(site), data | {"action": "preview"})
    assert preview.status_code == 200
    page = preview.content.decode()
    assert "What this change would do" in page
    assert "<del>16</del> → <ins>8</ins>" in page  # max cpu before -> after
    assert "Admitted next cycle" in page
    assert Quota.objects.get(pk=site.quota.pk).version == 1  # nothing saved yet

    saved = root.post(
        edit_url(site), data | {"action": "save", "preview_digest": digest_of(preview)}
    )
    assert saved.status_code == 302
    quota = Quota.objects.get(pk=site.quota.pk)
    assert (quota.max, quota.version) == ({"cpu": 8000}, 2)
    event = AuditEvent.objects.get(action="quota.update")
    assert (event.actor_name, event.source) == ("root", "ui")
    assert (event.before["max"], event.after["max"]) == ({"cpu": 16000}, {"cpu": 8000})


def test_save_without_a_matching_preview_previews_again(site):
    root = site.client("root")
    data = grid(site.quota, **{"res-0-max": "12"})
    preview = root.post(edit_url(site), data | {"action": "preview"})
    changed = data | {"res-0-max": "10", "action": "save", "preview_digest": digest_of(preview)}
    response = root.post(edit_url(site), changed)
    assert response.status_code == 200
    assert "The values changed since the last preview" in response.content.decode()
    assert Quota.objects.get(pk=site.quota.pk).version == 1


def test_invalid_quantities_are_shown_by_cell_and_nothing_is_saved(site):
    root = site.client("root")
    response = root.post(
        edit_url(site),
        grid(site.quota, **{"res-1-max": "lots", "res-2-min": "3"}) | {"action": "preview"},
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "max memory: &#x27;lots&#x27; is not a Kubernetes quantity." in page
    assert "Name the resource these amounts are for." in page
    assert 'id="error-summary"' in page
    assert not AuditEvent.objects.filter(action="quota.update").exists()


def test_rules_of_the_tree_name_the_numbers(site):
    root = site.client("root")
    response = root.post(
        edit_url(site),
        grid(site.quota, **{"res-0-min": "12", "res-0-max": "10"}) | {"action": "preview"},
    )
    assert response.status_code == 400
    assert "min cpu (12) is more than max cpu (10)." in response.content.decode()
    response = root.post(
        edit_url(site), grid(site.quota, **{"res-0-max": "64"}) | {"action": "preview"}
    )
    assert "max cpu (64) is more than the parent &#x27;cluster&#x27; allows (32)." in (
        response.content.decode()
    )
    assert Quota.objects.get(pk=site.quota.pk).version == 1


def test_a_stale_edit_is_refused_and_overwrites_nothing(site):
    root = site.client("root")
    data = grid(site.quota, **{"res-0-max": "12"})
    preview = root.post(edit_url(site), data | {"action": "preview"})
    actions.update_quota(SYSTEM, site.quota, max={"cpu": "14"})  # someone else, meanwhile
    response = root.post(
        edit_url(site), data | {"action": "save", "preview_digest": digest_of(preview)}
    )
    assert response.status_code == 409
    assert "was changed by someone else" in response.content.decode()
    assert Quota.objects.get(pk=site.quota.pk).max == {"cpu": 14000}


def test_a_tenant_admin_creates_a_quota_under_their_own(site):
    ada = site.client("ada")
    url = f"/tenants/{site.tenant.name}/quotas/new/"
    assert site.quota.name in ada.get(url).content.decode()
    data = {
        "name": "team-a-dev",
        "parent": str(site.quota.pk),
        "allow_lent": "on",
        "namespaces": "team-a-dev",
        "res-TOTAL_FORMS": "1",
        "res-INITIAL_FORMS": "0",
        "res-MIN_NUM_FORMS": "0",
        "res-MAX_NUM_FORMS": "64",
        "res-0-resource": "cpu",
        "res-0-min": "500m",
        "res-0-max": "4",
        "res-0-weight": "",
    }
    bad = ada.post(url, data | {"res-0-min": "12"})
    assert bad.status_code == 400
    assert "is more than max cpu (4)" in bad.content.decode()
    preview = ada.post(url, data | {"action": "preview"})
    assert preview.status_code == 200
    assert "What this change would do" in preview.content.decode()
    assert not Quota.objects.filter(name="team-a-dev").exists()  # a preview saves nothing
    bad_preview = ada.post(url, data | {"action": "preview", "res-0-min": "12"})
    assert bad_preview.status_code == 400
    assert ada.post(url, data | {"action": "create"}).status_code == 302
    created = Quota.objects.get(name="team-a-dev")
    assert (created.tenant, created.parent, created.min) == (site.tenant, site.quota, {"cpu": 500})
    assert AuditEvent.objects.filter(action="quota.create", object_id=str(created.pk)).exists()
    # the other tenant's quota is not a parent a team-a admin may pick
    other = Quota.objects.get(name="team-b-q")
    refused = ada.post(url, data | {"name": "sneaky", "parent": str(other.pk)})
    assert refused.status_code == 400
    assert not Quota.objects.filter(name="sneaky").exists()


def test_queue_policies_are_created_and_edited_with_versions(site):
    ada = site.client("ada")
    base = {
        "policy": "Block", "priority": "3", "priority_threshold": "0", "max_depth": "0",
        "preempt_within_quota": "LowerPriority", "reclaim": "Any", "admission_timeout_s": "",
        "backoff_base_s": "10", "backoff_max_s": "600", "backoff_jitter": "0.1",
    }  # fmt: skip
    created = ada.post(f"/tenants/{site.tenant.name}/queues/new/", base | {"name": "batch"})
    assert created.status_code == 302
    queue = Queue.objects.get(name="batch")
    assert (queue.policy, queue.priority, queue.tenant) == ("Block", 3, site.tenant)

    url = f"/tenants/{site.tenant.name}/queues/batch/edit/"
    bad = ada.post(url, base | {"version": "1", "backoff_max_s": "5"})
    assert bad.status_code == 400
    assert "backoff_max_s (5.0) is less than backoff_base_s (10.0)." in bad.content.decode()
    assert ada.post(url, base | {"version": "1", "policy": "Intelligent"}).status_code == 302
    stale = ada.post(url, base | {"version": "1", "priority": "9"})
    assert stale.status_code == 409
    queue.refresh_from_db()
    assert (queue.policy, queue.priority, queue.version) == ("Intelligent", 3, 2)
    assert AuditEvent.objects.filter(action="queue.update", object_id=str(queue.pk)).count() == 1


def test_memberships_are_added_changed_and_removed(site):
    from tests import builders

    builders.user("newbie")
    ada = site.client("ada")
    url = f"/tenants/{site.tenant.name}/members/"
    missing = ada.post(url, {"op": "add", "username": "ghost", "role": "viewer"})
    assert missing.status_code == 400
    assert "There is no user &#x27;ghost&#x27;" in missing.content.decode()
    assert ada.post(url, {"op": "add", "username": "newbie", "role": "member"}).status_code == 302
    membership = Membership.objects.get(user__username="newbie")
    assert membership.role == "member"
    ada.post(url, {"op": "role", "membership": membership.pk, "role": "admin"})
    assert Membership.objects.get(pk=membership.pk).role == "admin"
    ada.post(url, {"op": "remove", "membership": membership.pk})
    assert not Membership.objects.filter(pk=membership.pk).exists()
    assert [e.action for e in AuditEvent.objects.filter(object_type="membership").order_by("id")][
        -3:
    ] == ["membership.create", "membership.update", "membership.delete"]
    # a membership of another tenant cannot be touched through this page
    bob = Membership.objects.get(user__username="bob")
    assert ada.post(url, {"op": "remove", "membership": bob.pk}).status_code == 404


def test_the_audit_page_filters(site):
    actions.update_queue(SYSTEM, site.queue, priority=4)
    w = submit(site.world, "audited")
    actions.cancel_workload(actions.Actor.of(site.users["mem"], "ui"), w)
    ada = site.client("ada")
    url = f"/tenants/{site.tenant.name}/audit/"
    page = ada.get(url, {"action": "workload.cancel"}).content.decode()
    assert "mem cancelled workload team-a/audited (it was Pending)." in page
    assert "priority 0 → 4" not in page
    assert "1 event." in page
    page = ada.get(url, {"actor": "mem"}).content.decode()
    assert "1 event." in page
    page = ada.get(url, {"object_type": "queue"}).content.decode()
    assert f"priority 0 → 4 on queue {site.queue.name} by system." in page
    assert "team-b" not in ada.get(url).content.decode()  # only this tenant's events
    everything = site.client("root").get("/audit/", {"q": "team-b"}).content.decode()
    assert "team-b-q" in everything
    future = ada.get(url, {"since": "2999-01-01"}).content.decode()
    assert "0 events." in future
    assert Workload.objects.get(pk=w.pk).phase == "Cancelled"


def test_the_preview_already_refuses_a_namespace_of_another_quota(site):
    response = site.client("root").post(
        edit_url(site), grid(site.quota, namespaces="team-a, team-b") | {"action": "preview"}
    )
    assert response.status_code == 400
    assert "Namespace &#x27;team-b&#x27; already belongs to quota &#x27;team-b-q&#x27;." in (
        response.content.decode()
    )


def test_a_saved_edit_parses_each_typed_quantity_once(site, monkeypatch):
    """The grid's cells are parsed by the form; the view, the preview and the action take
    the canonical amounts as they are (and so never read 4 millicores as 4 cores)."""
    from portal import forms as portal_forms

    calls: list[tuple[str, str]] = []
    real = portal_forms.parse_amount

    def counting(resource: str, value: str) -> int:
        calls.append((resource, value))
        return real(resource, value)

    monkeypatch.setattr(portal_forms, "parse_amount", counting)
    monkeypatch.setattr("queueing.quantities.parse_amount", counting)
    root = site.client("root")
    data = grid(site.quota, **{"res-0-max": "12500m"})
    preview = root.post(edit_url(site), data | {"action": "preview"})
    typed = [(r, v) for r, v in calls]
    assert ("cpu", "12500m") in typed
    assert len(typed) == len(set(typed)), "each cell parsed once by the preview request"
    calls.clear()
    response = root.post(
        edit_url(site), data | {"action": "save", "preview_digest": digest_of(preview)}
    )
    assert response.status_code == 302
    assert len(calls) == len(set(calls))
    assert ("cpu", "12500m") in calls
    assert Quota.objects.get(pk=site.quota.pk).max["cpu"] == 12_500


def test_a_new_queue_form_shows_the_defaults_a_queue_gets(site):
    from portal.forms import QUEUE_FIELDS, QueueForm

    queue = actions.create_queue(SYSTEM, tenant=site.tenant, name="plain")
    form = QueueForm()
    shown = {name: form.fields[name].initial for name in QUEUE_FIELDS}
    assert shown == {name: getattr(queue, name) for name in QUEUE_FIELDS}


def test_errors_between_fields_are_marked_on_the_cells_they_concern(site):
    root = site.client("root")
    data = grid(site.quota, **{"res-0-min": "9", "res-0-max": "8", "action": "preview"})
    page = root.post(edit_url(site), data).content.decode()
    message = "min cpu (9) is more than max cpu (8)."
    for cell in ("res-0-min", "res-0-max"):
        assert re.search(
            rf'id="id_{cell}"[^>]*aria-invalid="true" aria-describedby="err-{cell}"', page
        ), cell
        assert f'<ul class="errorlist" id="err-{cell}"><li>{message}</li></ul>' in page
    assert "aria-invalid" not in page.split('id="id_res-1-min"')[1].split(">")[0]  # memory's
    assert f'href="#id_res-0-min">cpu min: {message}' in page  # the summary links to the cell
    # beyond the parent's limit: only the max cell
    over = root.post(edit_url(site), grid(site.quota, **{"res-0-max": "900", "action": "preview"}))
    text = over.content.decode()
    assert 'id="id_res-0-max"' in text
    assert "aria-invalid" in text.split('id="id_res-0-max"')[1].split(">")[0]
    assert "aria-invalid" not in text.split('id="id_res-0-min"')[1].split(">")[0]
    assert Quota.objects.get(pk=site.quota.pk).version == 1  # nothing saved


def test_a_weight_change_that_changes_nothing_now_says_what_it_would_under_full_demand(site):
    sibling = actions.create_quota(
        SYSTEM, name="team-a-other", tenant=site.tenant, parent=site.world.root,
        min={"cpu": "1"}, max={"cpu": "32"},  # the mins leave 3 of the 16 nodes' cpu idle
    )  # fmt: skip
    assert sibling.pk
    root = site.client("root")
    # Nobody waits: doubling team-a-q's weight changes no runtime quota now.
    data = grid(site.quota, **{"res-0-weight": "64", "action": "preview"})
    page = root.post(edit_url(site), data).content.decode()
    assert "No quota's runtime quota or usage would change now." in page
    assert (
        "Nothing changes <em>now</em> because runtime quotas move only when quotas compete" in page
    )
    assert "Under full demand" in page
    section = page.split('id="whatif-full-demand"')[1].split("</div>")[0]
    assert f"<strong>{site.quota.name}</strong> cpu" in section
    assert '<span class="change better">' in section  # more for the quota whose weight grew
    assert '<span class="change worse">' in section  # less for its sibling
    assert "<strong>team-a-other</strong> cpu" in section


def test_what_if_colours_mean_better_and_worse():
    from portal.views.quotas import direction

    assert direction("eta_p50", "2026-01-01T10:13:00Z", "2026-01-01T10:14:00Z") == "worse"
    assert direction("eta_p50", "2026-01-01T10:14:00Z", "2026-01-01T10:13:00Z") == "better"
    assert direction("position", 3, 1) == "better"
    assert direction("position", None, 4) == "better"  # ranked at last
    assert direction("position", 4, None) == "worse"
    assert direction("admitted", False, True) == "better"
    assert direction("runtime", 8000, 6000) == "worse"
    assert direction("max", 8000, 6000) == "changed"  # the edit itself: neither
    assert direction("position", 2, 2) == ""
