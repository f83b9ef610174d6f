"""The dashboard in a real browser (issue 5, item 9)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from queueing.cluster import set_cluster
from queueing.models import AuditEvent, Quota, Workload
from tests import live
from tests.browser.conftest import off_loop
from tests.builders import submit
from tests.sites import Site, make_site

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def bsite(transactional_db: None) -> Iterator[Site]:
    s = make_site()
    set_cluster(s.world.cluster)
    yield s
    set_cluster(None)


def log_in(page: Any, base: str, username: str, next_path: str = "/") -> None:
    page.goto(f"{base}/login/?next={next_path}")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(f"pw-{username}")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_load_state()


def pending_names(page: Any) -> list[str]:
    return page.locator("#pending-rows tr td[data-field=name]").all_inner_texts()


def test_log_in_open_a_queue_and_watch_a_cycle_move_it(bsite, server_url, browser_factory):
    names = [f"job-{i}" for i in range(5)]
    ids = [submit(bsite.world, name).pk for name in names]
    live.rank(ids)  # the first cycle ranked them in submission order

    page = browser_factory()
    log_in(page, server_url, "mem")
    expect(page.get_by_role("heading", level=1)).to_contain_text(bsite.tenant.name)
    page.get_by_role("link", name=bsite.queue.name).first.click()
    expect(page.get_by_role("heading", name=f"Queue {bsite.queue.name}")).to_be_visible()
    assert pending_names(page) == [f"team-a/{n}" for n in names]
    expect(page.locator("html")).to_have_attribute("data-live", "on")
    page.evaluate("window.__sameDocument = true")

    # A cycle puts the last one first: the page follows without a reload. (How fast is
    # a benchmark's to say, tests/bench; a test only waits for it, with a deadline.)
    off_loop(live.rank, list(reversed(ids)))
    expected = [f"team-a/{n}" for n in reversed(names)]
    expect(page.locator("#pending-rows tr td[data-field=name]")).to_have_text(
        expected, timeout=10_000
    )
    assert page.evaluate("window.__sameDocument") is True
    first = page.locator("#pending-rows tr").first
    expect(first.locator("td[data-field=position]")).to_have_text("1")

    # The head is admitted: it leaves the waiting list and appears among the admitted.
    off_loop(live.admit, [ids[-1]])
    expect(page.locator(f'#holding-rows tr[data-id="{ids[-1]}"]')).to_be_visible()
    expect(page.locator(f'#pending-rows tr[data-id="{ids[-1]}"]')).to_have_count(0)
    expect(page.locator('[data-count="pending"]').first).to_have_text("4")

    # A new submission appears at the end, unranked until the next cycle.
    new = off_loop(submit, bsite.world, "late-1")
    expect(page.locator(f'#pending-rows tr[data-id="{new.pk}"]')).to_be_visible()
    expect(page.locator('[data-count="pending"]').first).to_have_text("5")
    assert page.evaluate("window.__sameDocument") is True


def test_an_admin_edits_a_quota_through_the_preview_and_saves_it(
    bsite, server_url, browser_factory
):
    page = browser_factory()
    log_in(
        page, server_url, "root", f"/tenants/{bsite.tenant.name}/quotas/{bsite.quota.name}/edit/"
    )
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"Edit quota {bsite.quota.name}")
    page.get_by_label("cpu max").fill("12")
    page.get_by_role("button", name="Preview the change").click()
    expect(page.locator("#whatif, .notice").first).to_be_visible()
    assert off_loop(lambda: Quota.objects.get(pk=bsite.quota.pk).max) == {"cpu": 16000}
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".messages")).to_contain_text(f"Quota {bsite.quota.name} saved")

    quota = off_loop(Quota.objects.get, pk=bsite.quota.pk)
    assert quota.max == {"cpu": 12000}
    assert quota.version == 2
    audit = off_loop(lambda: AuditEvent.objects.filter(action="quota.update").get())
    assert audit.actor_name == "root"
    assert audit.source == "ui"
    assert (audit.before["max"], audit.after["max"]) == ({"cpu": 16000}, {"cpu": 12000})


def test_an_invalid_quota_shows_its_errors_and_saves_nothing(bsite, server_url, browser_factory):
    page = browser_factory()
    log_in(
        page, server_url, "root", f"/tenants/{bsite.tenant.name}/quotas/{bsite.quota.name}/edit/"
    )
    page.get_by_label("cpu min").fill("12")
    page.get_by_label("cpu max").fill("10")
    page.get_by_role("button", name="Preview the change").click()
    summary = page.locator("#error-summary")
    expect(summary).to_be_visible()
    expect(summary).to_contain_text("min cpu (12) is more than max cpu (10)")
    expect(page.get_by_role("button", name="Save")).to_have_count(0)

    page.get_by_label("cpu min").fill("8")
    page.get_by_label("memory max").fill("lots")
    page.get_by_role("button", name="Preview the change").click()
    expect(page.locator("#err-res-1-max")).to_contain_text("'lots' is not a Kubernetes quantity")
    quota = off_loop(Quota.objects.get, pk=bsite.quota.pk)
    assert (quota.min, quota.max, quota.version) == ({"cpu": 8000}, {"cpu": 16000}, 1)
    assert not off_loop(lambda: AuditEvent.objects.filter(action="quota.update").exists())


def test_a_tenant_cannot_open_another_tenants_pages(bsite, server_url, browser_factory):
    theirs = submit(bsite.world, "private-1")
    page = browser_factory()
    log_in(page, server_url, "bob")
    expect(page.get_by_role("heading", level=1)).to_contain_text("Team B")
    t = bsite.tenant.name
    for path in (
        f"/tenants/{t}/",
        f"/tenants/{t}/queues/{bsite.queue.name}/",
        f"/tenants/{t}/workloads/{theirs.pk}/",
        f"/tenants/{t}/quotas/{bsite.quota.name}/edit/",
        f"/tenants/{t}/audit/",
    ):
        response = page.goto(server_url + path)
        assert response is not None
        assert response.status == 404, path
        expect(page.get_by_role("heading", level=1)).to_have_text("Not found")
    assert off_loop(lambda: Workload.objects.get(pk=theirs.pk).phase) == "Pending"


UNLABELLED = """() => [...document.querySelectorAll(
    'input:not([type=hidden]), select, textarea, button, svg[role=img]')]
  .filter(el => {
    if (el.tagName === 'svg') return !el.getAttribute('aria-labelledby');
    if (el.tagName === 'BUTTON') return !el.textContent.trim() && !el.getAttribute('aria-label');
    return !(el.labels && el.labels.length) && !el.getAttribute('aria-label');
  })
  .map(el => el.outerHTML.slice(0, 80))"""


def test_pages_are_labelled_and_fit_a_phone(bsite, server_url, browser_factory):
    w = submit(bsite.world, "phone-1")
    live.rank([w.pk])
    t = bsite.tenant.name
    paths = [
        f"/tenants/{t}/",
        f"/tenants/{t}/queues/{bsite.queue.name}/",
        f"/tenants/{t}/workloads/{w.pk}/",
        f"/tenants/{t}/quotas/{bsite.quota.name}/edit/",
        f"/tenants/{t}/queues/{bsite.queue.name}/edit/",
        f"/tenants/{t}/members/",
        f"/tenants/{t}/audit/",
        "/cluster/",
    ]
    page = browser_factory()
    log_in(page, server_url, "root")
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 800})
        for path in paths:
            assert page.goto(server_url + path).status == 200, path
            assert page.evaluate(UNLABELLED) == [], path
            overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 1, f"{path} is {overflow}px wider than a {width}px screen"
    # keyboard: the skip link is the first stop and leads to the content
    page.goto(server_url + f"/tenants/{t}/")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"


def test_after_a_lost_connection_the_page_reconnects_and_resynchronises(
    bsite, server_url, browser_factory
):
    ids = [submit(bsite.world, f"r{i}").pk for i in range(3)]
    live.rank(ids)
    page = browser_factory()
    log_in(page, server_url, "vic", f"/tenants/{bsite.tenant.name}/queues/{bsite.queue.name}/")
    expect(page.locator("html")).to_have_attribute("data-live", "on")
    page.evaluate("window.__sameDocument = true")

    def silently_reorder() -> None:
        # Written without publishing: only a resynchronisation can show it.
        for position, workload_id in enumerate(reversed(ids), start=1):
            Workload.objects.filter(pk=workload_id).update(position=position)

    page.evaluate("KQ.sockets[0].drop()")
    off_loop(silently_reorder)
    first = page.locator("#pending-rows tr").first
    expect(first).to_have_attribute("data-id", str(ids[-1]))
    expect(page.locator("html")).to_have_attribute("data-live", "on")
    assert page.evaluate("window.__sameDocument") is True


def test_a_later_page_of_a_long_queue_follows_rows_in_and_out_of_its_window(
    bsite, server_url, browser_factory
):
    from django.utils import timezone

    now = timezone.now()
    Workload.objects.bulk_create(
        Workload(
            tenant=bsite.tenant,
            quota=bsite.quota,
            queue=bsite.queue,
            name=f"bulk-{i:03d}",
            namespace="team-a",
            pod_sets=[{"name": "main", "count": 1, "requests": {"cpu": 1000}}],
            total_request={"cpu": 1000},
            queue_order_at=now,
        )
        for i in range(104)
    )
    ids = list(
        Workload.objects.filter(queue=bsite.queue).order_by("name").values_list("id", flat=True)
    )
    live.rank(ids)
    page = browser_factory()
    log_in(
        page, server_url, "vic", f"/tenants/{bsite.tenant.name}/queues/{bsite.queue.name}/?page=2"
    )
    rows = page.locator("#pending-rows tr")
    expect(rows).to_have_count(4)
    expect(rows.first.locator("td[data-field=position]")).to_have_text("101")
    expect(page.locator("html")).to_have_attribute("data-live", "on")

    # The head goes to the back: it enters page 2 (as a whole row, it is in the window),
    # and workload 101 moves up to 100, out of the window (it arrives as a stub).
    off_loop(live.rank, ids[1:] + ids[:1])
    expect(page.locator(f'#pending-rows tr[data-id="{ids[0]}"]')).to_have_count(1)
    expect(page.locator(f'#pending-rows tr[data-id="{ids[100]}"]')).to_have_count(0)
    expect(rows).to_have_count(4)
    expect(rows.first.locator("td[data-field=position]")).to_have_text("101")
    expect(rows.last.locator("td[data-field=position]")).to_have_text("104")
    expect(page.locator('[data-count="pending"]').first).to_have_text("104")
    # The server read the window itself, so its diffs sufficed: the page never refetched.
    refetches = "performance.getEntriesByType('resource').filter(e => e.initiatorType === 'fetch')"
    assert page.evaluate(refetches + ".length") == 0
