"""Fairness over time: the history each chart draws and the comparison of tenants, from
stored samples, audited edits and preemptions."""

from __future__ import annotations

import json
import math
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from portal import fairness
from queueing import actions
from queueing.choices import Phase
from queueing.models import AuditEvent, Quota, UsageSample, Workload, WorkloadEvent
from tests.builders import SYSTEM, submit

HALF_LIFE = 3600.0


@pytest.fixture
def history(site, settings):
    """Two hours of samples, a minute apart: team-a uses 8 cpu (its min), team-b 2 of its 4;
    team-a's min went 8 -> 4 half an hour ago; one team-a workload was preempted by team-b."""
    settings.KQ_USAGE_HALF_LIFE_S = HALF_LIFE
    now = timezone.now().replace(microsecond=0)
    other = Quota.objects.get(name="team-b-q")
    samples = []
    for minute in range(120, -1, -1):
        at = now - timedelta(minutes=minute)
        samples.append(UsageSample(quota=site.quota, at=at, used={"cpu": 8000},
                                   runtime={"cpu": 9000}, decayed={"cpu": 8000 * HALF_LIFE / math.log(2)}))  # fmt: skip
        samples.append(UsageSample(quota=other, at=at, used={"cpu": 2000},
                                   runtime={"cpu": 2000}, decayed={"cpu": 0.0}))  # fmt: skip
    UsageSample.objects.bulk_create(samples)
    actions.update_quota(SYSTEM, site.quota, min={"cpu": "4"})
    edit_at = now - timedelta(minutes=30)
    AuditEvent.objects.filter(action="quota.update").update(at=edit_at)
    victim = submit(site.world, "victim")
    preemptor = submit(site.world, "preemptor", queue=site.other_queue, quota=other)
    Workload.objects.filter(pk=victim.pk).update(preempted_by=preemptor)
    WorkloadEvent.objects.create(workload=victim, at=now - timedelta(minutes=10),
                                 from_phase=Phase.RUNNING, to_phase=Phase.PREEMPTED,
                                 reason="Priority", message="for team-b/preemptor")  # fmt: skip
    return {"now": now, "edit_at": edit_at, "other": other}


def test_a_quota_history_rebuilds_its_entitlement_and_marks_what_happened(site, history):
    since = history["now"] - timedelta(hours=2)
    quota = Quota.objects.get(pk=site.quota.pk)
    series = fairness.history([quota], "cpu", since)
    assert len(series.times) == 121
    before = [
        e for t, e in zip(series.times, series.entitlement, strict=True) if t < history["edit_at"]
    ]
    after = [
        e for t, e in zip(series.times, series.entitlement, strict=True) if t >= history["edit_at"]
    ]
    assert set(before) == {8000}
    assert set(after) == {4000}
    assert set(series.used) == {8000}
    assert set(series.runtime) == {9000}
    # decayed resource-seconds as the amount whose steady use leaves them: u·H/ln2·ln2/H = u
    assert series.decayed[0] == pytest.approx(8000)
    kinds = [(m["kind"], m["text"]) for m in series.marks]
    assert ("taken", "team-a/victim preempted: for team-b/preemptor") in kinds
    assert ("edit", f"cpu min 8 → 4 on quota {site.quota.name} by system") in kinds
    assert not [k for k, _ in kinds if k == "given"]

    theirs = fairness.history([history["other"]], "cpu", since)
    assert [m["kind"] for m in theirs.marks] == ["given"]


def test_a_long_window_is_thinned_to_a_bounded_number_of_points(site, history):
    series = fairness.history([site.quota], "cpu", history["now"] - timedelta(days=14))
    assert len(series.times) == 121  # all there are
    fairness_points = fairness.POINTS
    try:
        fairness.POINTS = 50
        thinned = fairness.history([site.quota], "cpu", history["now"] - timedelta(days=14))
    finally:
        fairness.POINTS = fairness_points
    assert len(thinned.times) == 50
    assert thinned.times[0] == series.times[0]
    assert thinned.times[-1] == series.times[-1]


def test_tenants_compared_by_share_of_entitlement_and_jains_index(site, history):
    result = fairness.compare(
        {"1h": timedelta(hours=1), "1d": timedelta(days=1)}, now=history["now"]
    )
    rows = {r.tenant.name: r for r in result["rows"]}
    # team-a: 8 of min 4 for the last half hour, of min 8 before: hour average (31·2 + 30·1)/61
    assert rows["team-a"].received["1h"] == pytest.approx((31 * 2 + 30 * 1) / 61)
    assert rows["team-b"].received["1h"] == pytest.approx(0.5)
    a, b = rows["team-a"].received["1h"], 0.5
    assert result["jain"]["1h"] == pytest.approx((a + b) ** 2 / (2 * (a * a + b * b)))
    assert (rows["team-a"].taken["1h"], rows["team-a"].given["1h"]) == (1, 0)
    assert (rows["team-b"].taken["1h"], rows["team-b"].given["1h"]) == (0, 1)


def test_jains_index():
    assert fairness.jain([0.5, 0.5, 0.5]) == pytest.approx(1.0)
    assert fairness.jain([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert fairness.jain([]) is None
    assert fairness.jain([0.0, 0.0]) is None


def test_the_pages(site, history):
    page = site.client("vic").get(f"/tenants/{site.tenant.name}/fairness/?window=6h&resource=cpu")
    assert page.status_code == 200
    html = page.content.decode()
    data = json.loads(
        re.search(
            r'<script id="fair-tenant-data" type="application/json">(.*?)</script>', html, re.S
        ).group(1)
    )
    assert data["resource"] == "cpu"
    assert len(data["t"]) == 121
    assert "cpu min 8 → 4" in html  # the marks, listed for people as well
    assert 'src="/static/vendor/chartjs/chart.umd.min.js"' in html
    assert "<script>" not in html  # no inline script: data travels as JSON
    assert site.client("bob").get(f"/tenants/{site.tenant.name}/fairness/").status_code == 404

    assert site.client("ada").get("/fairness/").status_code == 403
    compare = site.client("root").get("/fairness/")
    assert compare.status_code == 200
    text = compare.content.decode()
    assert "Jain&#x27;s fairness index, last 1h" in text or "Jain's fairness index, last 1h" in text
    assert "50%" in text  # team-b received half its entitlement


def test_backfilled_history_is_marked_on_the_page_and_in_the_chart_data(site):
    from queueing import history as backfill

    assert backfill.backfill(hours=1) == 60 * Quota.objects.count()
    page = site.client("vic").get(f"/tenants/{site.tenant.name}/fairness/?window=6h")
    html = page.content.decode()
    assert "is <strong>backfilled</strong>: estimated for the demo seed, not measured" in html
    data = json.loads(
        re.search(
            r'<script id="fair-tenant-data" type="application/json">(.*?)</script>', html, re.S
        ).group(1)
    )
    last = UsageSample.objects.filter(backfilled=True).order_by("-at").first()
    assert data["backfilled_until"] == int(last.at.timestamp() * 1000)
    assert len(data["t"]) == 60
    assert set(data["decayed"]) == {0}  # no memory the ledger does not have
