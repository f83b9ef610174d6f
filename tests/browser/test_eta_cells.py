"""The queue page in a real browser: no waiting row shows a bare "—" for its ETA, as
loaded and as the live stream updates it (issue 11, item 4)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from playwright.sync_api import expect

from queueing.cluster import set_cluster
from queueing.models import CycleRun, Workload
from tests import live
from tests.browser.conftest import off_loop
from tests.browser.test_dashboard import log_in
from tests.builders import submit
from tests.sites import Site, make_site

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HORIZON = "not admitted within the forecast horizon (24 h)"
ELSEWHERE = (
    "Waiting for room held by other quota trees: it requests 6 cpu; other quota trees hold "
    "12 cpu of the schedulable nodes' 16 cpu, leaving 4 cpu: it fits once they release 2 "
    "cpu; set aside until then, it blocks nobody."
)


@pytest.fixture
def bsite(transactional_db: None) -> Iterator[Site]:
    s = make_site()
    set_cluster(s.world.cluster)
    yield s
    set_cluster(None)


def _as_a_cycle_writes(workload_id: int, **fields: Any) -> None:
    """Store a cycle's annotation of one row and announce it, as queueing.state.apply does."""
    now = timezone.now()
    with transaction.atomic():
        Workload.objects.filter(pk=workload_id).update(updated_at=now, **fields)
        cycle = CycleRun.objects.create(root="cluster", started_at=now, duration_ms=1.0)
        live._publish([workload_id], cycle.pk)


def bare_eta_rows(page: Any) -> list[str]:
    """Names of waiting rows whose ETA p50 or p90 cell shows only "—" (or nothing)."""
    return page.evaluate(
        """() => Array.from(document.querySelectorAll('#pending-rows tr')).filter(tr =>
             ['eta_p50', 'eta_p90'].some(f => {
               const t = tr.querySelector('td[data-field=' + f + ']').innerText.trim();
               return t === '' || t === '—';
             })).map(tr => tr.querySelector('td[data-field=name]').innerText)"""
    )


def test_no_waiting_row_shows_a_bare_dash_loaded_or_live(bsite, server_url, browser_factory):
    ranked = [submit(bsite.world, f"ranked-{i}").pk for i in range(2)]
    live.rank(ranked)
    beyond = submit(bsite.world, "beyond").pk
    Workload.objects.filter(pk=beyond).update(
        position=3,
        reason="Waiting for quota: team-a runtime quota is short by 1 cpu.",
        eta={"p50": None, "p90": None, "reason": HORIZON, "moved": "", "last_move": None},
        explanation={"kind": "quota", "limit": "runtime"},
    )
    fresh = submit(bsite.world, "fresh").pk  # not ranked by any cycle yet

    page = browser_factory()
    log_in(page, server_url, "vic", f"/tenants/{bsite.tenant.name}/queues/{bsite.queue.name}/")
    expect(page.locator("html")).to_have_attribute("data-live", "on")
    assert bare_eta_rows(page) == []
    cell = page.locator(f'#pending-rows tr[data-id="{beyond}"] td[data-field=eta_p50] .eta-none')
    expect(cell).to_have_text("beyond the horizon")
    expect(cell).to_have_attribute(
        "title", f"No ETA: {HORIZON}. Waiting for quota: team-a runtime quota is short by 1 cpu."
    )
    expect(
        page.locator(f'#pending-rows tr[data-id="{fresh}"] td[data-field=eta_p50]')
    ).to_have_text("next cycle")

    # The stream: a ranked row loses its ETA (other trees took the room) -- its cells
    # say so without a reload; another gets aging's bound beside no ETA.
    off_loop(
        _as_a_cycle_writes,
        ranked[0],
        eta_p50=None,
        eta_p90=None,
        reason=ELSEWHERE,
        eta=None,
        explanation={"kind": "never-fits", "limit": "cluster", "to_free": {"cpu": 2000}},
    )
    cell = page.locator(f'#pending-rows tr[data-id="{ranked[0]}"] td[data-field=eta_p50] .eta-none')
    expect(cell).to_have_text("room held by other trees")
    expect(cell).to_have_attribute("title", ELSEWHERE)
    off_loop(
        _as_a_cycle_writes,
        beyond,
        explanation={"kind": "quota", "limit": "runtime", "starts_by": time.time() + 600},
    )
    bound = page.locator(f'#pending-rows tr[data-id="{beyond}"] td[data-field=eta_p90] .eta-bound')
    expect(bound).to_contain_text("at the latest in")
    assert bare_eta_rows(page) == []


def stale_times(page: Any) -> list[str]:
    """Relative times on the page whose text is not what they read now ("in 1 min" for
    a time 56 s away), as "text -> now"."""
    return page.evaluate(
        """() => Array.from(document.querySelectorAll('time[data-rel]'))
             .map(t => [t.textContent, KQ.relative(t.getAttribute('datetime'),
                                                   t.getAttribute('data-rel'))])
             .filter(([shown, now]) => shown !== now)
             .map(([shown, now]) => shown + ' -> ' + now)"""
    )


def test_a_live_update_refreshes_every_relative_time_on_the_page(
    bsite, server_url, browser_factory
):
    # The watch saw "in 59 s" beside "in 1 min" on one queue page: a row re-rendered by
    # a live update counted from then, its neighbours from a render up to 15 s before.
    first, second = (submit(bsite.world, f"row-{i}").pk for i in range(2))
    live.rank([first, second], eta_step_s=40.0)  # in 40 s and 80 s

    page = browser_factory()
    page.clock.install()
    log_in(page, server_url, "vic", f"/tenants/{bsite.tenant.name}/queues/{bsite.queue.name}/")
    expect(page.locator("html")).to_have_attribute("data-live", "on")
    # The page's clock stops (no timer fires unless the test runs it), then 3 s pass:
    # under a minute every second shows, so the first row's "in 3x s" is 3 s old.
    page.clock.pause_at(page.evaluate("Date.now()") / 1000 + 0.1)  # seconds
    page.clock.run_for(3_000)
    # An update of the second row alone arrives.
    off_loop(_as_a_cycle_writes, second, eta_p50=timezone.now() + timedelta(seconds=150))
    cell = page.locator(f'#pending-rows tr[data-id="{second}"] td[data-field=eta_p50]')
    expect(cell).to_have_text("in 2 min")
    assert stale_times(page) == []


def test_a_row_that_goes_first_by_age_says_so_loaded_and_live(bsite, server_url, browser_factory):
    # A row whose p50 is earlier than rows ahead of it (it passes them by age) reads
    # "by age" beside its time, with why on hover -- as served and as queue.js renders
    # a live update -- and loses the mark when the cycle no longer sets it.
    first, second = (submit(bsite.world, f"row-{i}").pk for i in range(2))
    live.rank([first, second], eta_step_s=40.0)
    page = browser_factory()
    log_in(page, server_url, "vic", f"/tenants/{bsite.tenant.name}/queues/{bsite.queue.name}/")
    expect(page.locator("html")).to_have_attribute("data-live", "on")
    marks = page.locator("#pending-rows .eta-by-age")
    expect(marks).to_have_count(0)

    def by_age(wid: int, flag: bool) -> None:
        w = Workload.objects.get(pk=wid)
        _as_a_cycle_writes(wid, eta={**(w.eta or {}), "by_age": flag})

    off_loop(by_age, second, True)
    mark = page.locator(f'#pending-rows tr[data-id="{second}"] td[data-field=eta_p50] .eta-by-age')
    expect(mark).to_have_text("by age")
    expect(mark).to_have_attribute("title", Workload.BY_AGE_NOTE)
    expect(marks).to_have_count(1)
    # The server renders it the same way.
    page.reload()
    expect(mark).to_have_text("by age")
    expect(mark).to_have_attribute("title", Workload.BY_AGE_NOTE)
    off_loop(by_age, second, False)
    expect(marks).to_have_count(0)
    assert bare_eta_rows(page) == []
