"""The queue form's maximum execution time and the quota form's fair-share weight
(issue 12 item 7): saved, shown on the pages, refused with a field error when bad."""

from __future__ import annotations

from typing import Any

from queueing.models import AuditEvent, Queue, Quota
from tests.portal.test_forms import digest_of, edit_url, grid

QUEUE_BASE = {
    "policy": "Priority", "priority": "0", "priority_threshold": "0", "max_depth": "0",
    "preempt_within_quota": "LowerPriority", "reclaim": "Any", "admission_timeout_s": "",
    "backoff_base_s": "10", "backoff_max_s": "600", "backoff_jitter": "0.1",
    "aging_bound_s": "300",
}  # fmt: skip


def queue_edit(site: Any, data: dict[str, str], who: str = "ada") -> Any:
    url = f"/tenants/{site.tenant.name}/queues/{site.queue.name}/edit/"
    return site.client(who).post(url, QUEUE_BASE | {"version": "1"} | data)


def test_a_queue_limit_is_saved_and_shown_on_the_queue_page(site) -> None:
    assert queue_edit(site, {"max_execution_s": "7200"}).status_code == 302
    queue = Queue.objects.get(pk=site.queue.pk)
    assert (queue.max_execution_s, queue.version) == (7200, 2)
    page = site.client("vic").get(f"/tenants/{site.tenant.name}/queues/{queue.name}/")
    assert 'data-setting="max_execution_s">7200</span> s admitted' in page.content.decode()
    edit = site.client("ada").get(f"/tenants/{site.tenant.name}/queues/{queue.name}/edit/")
    assert 'name="max_execution_s" value="7200"' in edit.content.decode()


def test_a_bad_queue_limit_is_a_field_error_and_saves_nothing(site) -> None:
    for bad in ("0", "-3", "soon", str(10**9)):
        response = queue_edit(site, {"max_execution_s": bad})
        assert response.status_code == 400, bad
        assert 'id="id_max_execution_s_error"' in response.content.decode(), bad
    queue = Queue.objects.get(pk=site.queue.pk)
    assert (queue.max_execution_s, queue.version) == (None, 1)


def test_a_member_cannot_set_a_queue_limit(site) -> None:
    assert queue_edit(site, {"max_execution_s": "60"}, who="mem").status_code == 403
    assert Queue.objects.get(pk=site.queue.pk).max_execution_s is None


def test_a_fair_weight_is_previewed_saved_audited_and_shown(site) -> None:
    root = site.client("root")
    data = grid(site.quota, fair_weight="2.5")
    preview = root.post(edit_url(site), data | {"action": "preview"})
    assert preview.status_code == 200
    assert Quota.objects.get(pk=site.quota.pk).fair_weight == 1.0  # a preview saves nothing
    saved = root.post(
        edit_url(site), data | {"action": "save", "preview_digest": digest_of(preview)}
    )
    assert saved.status_code == 302
    quota = Quota.objects.get(pk=site.quota.pk)
    assert (quota.fair_weight, quota.version) == (2.5, 2)
    event = AuditEvent.objects.get(action="quota.update")
    assert (event.before["fair_weight"], event.after["fair_weight"]) == (1.0, 2.5)
    page = site.client("vic").get(f"/tenants/{site.tenant.name}/").content.decode()
    assert 'data-fair-weight="2.5">fair-share weight 2.5</span>' in page
    edit = root.get(edit_url(site)).content.decode()
    assert 'name="fair_weight" value="2.5"' in edit


def test_a_blank_weight_keeps_the_weight(site) -> None:
    Quota.objects.filter(pk=site.quota.pk).update(fair_weight=3.0)
    root = site.client("root")
    data = grid(site.quota, **{"res-0-max": "12"})  # no fair_weight posted at all
    preview = root.post(edit_url(site), data | {"action": "preview"})
    root.post(edit_url(site), data | {"action": "save", "preview_digest": digest_of(preview)})
    quota = Quota.objects.get(pk=site.quota.pk)
    assert (quota.fair_weight, quota.max, quota.version) == (3.0, {"cpu": 12000}, 2)


def test_a_bad_fair_weight_is_a_field_error_and_saves_nothing(site) -> None:
    root = site.client("root")
    for bad in ("0", "-1", "1001", "heavy", "nan"):
        response = root.post(
            edit_url(site), grid(site.quota, fair_weight=bad) | {"action": "preview"}
        )
        assert response.status_code == 400, bad
        assert 'id="id_fair_weight_error"' in response.content.decode(), bad
    assert Quota.objects.get(pk=site.quota.pk).fair_weight == 1.0
    assert not AuditEvent.objects.filter(action="quota.update").exists()


def test_a_new_quota_takes_its_weight_from_the_form(site) -> None:
    ada = site.client("ada")
    data = {
        "name": "team-a-heavy", "parent": str(site.quota.pk), "allow_lent": "on",
        "fair_weight": "4", "namespaces": "",
        "res-TOTAL_FORMS": "1", "res-INITIAL_FORMS": "0", "res-MIN_NUM_FORMS": "0",
        "res-MAX_NUM_FORMS": "64", "res-0-resource": "cpu", "res-0-min": "",
        "res-0-max": "2", "res-0-weight": "",
    }  # fmt: skip
    response = ada.post(f"/tenants/{site.tenant.name}/quotas/new/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Quota.objects.get(name="team-a-heavy").fair_weight == 4.0
