"""What the pages show: bars, counts, fair share, admission order, explanations."""

from __future__ import annotations

import json
import re
from datetime import timedelta

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal import queries
from queueing.models import CycleRun, Quota, UsageSample, Workload
from tests import live
from tests.builders import submit


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


def queue_state(response) -> dict:
    match = re.search(
        r'<script id="queue-state" type="application/json">(.*?)</script>',
        response.content.decode(),
        re.S,
    )
    assert match
    return json.loads(match.group(1))


def test_the_overview_shows_quota_bars_queue_counts_fair_share_and_usage(site):
    running = submit(site.world, "big", cpu="3")
    live.admit([running.pk])
    submit(site.world, "waiting")
    now = timezone.now()
    for minutes, cpu_seconds in ((10, 3600_000), (5, 7200_000)):
        UsageSample.objects.create(
            quota=site.quota,
            at=now - timedelta(minutes=minutes),
            decayed={"cpu": cpu_seconds},
            used={"cpu": 3000},
            runtime={"cpu": 12000},
        )
    Quota.objects.filter(pk=site.quota.pk).update(runtime={"cpu": 12000}, used={"cpu": 3000})
    page = text(site.client("vic").get(f"/tenants/{site.tenant.name}/"))
    # the quota's bar: used, runtime, min and max as quantities
    assert "used <strong>3</strong> · runtime 12 · min 8 · max 16" in page
    # its queue with waiting / admitted / running counts
    assert re.search(rf">{site.queue.name}</a></td>.*?>1</td>.*?>1</td>.*?>0</td>", page)
    # fair share against entitlement: min 8 of the cluster's 32 cpu, runtime 12, using 3
    assert re.search(r">cpu</th>.*?>8</td>.*?>25%</td>.*?>12</td>.*?>3</td>.*?25%", page)
    # decayed usage chart in core-hours
    assert "core-hours" in page
    assert 'role="img"' in page
    assert "2 samples" in page


def test_the_queue_page_lists_waiting_work_in_admission_order(site):
    ids = [submit(site.world, f"w{i}", priority=i * 10).pk for i in range(4)]
    live.rank([ids[2], ids[0], ids[3]])  # ids[1] is not ranked yet: it goes last
    live.admit([ids[3]])
    response = site.client("vic").get(f"/tenants/{site.tenant.name}/queues/{site.queue.name}/")
    state = queue_state(response)
    assert [r["id"] for r in state["pending_rows"]] == [ids[2], ids[0], ids[1]]
    assert [r["position"] for r in state["pending_rows"]] == [1, 2, None]
    assert [r["id"] for r in state["holding_rows"]] == [ids[3]]
    assert (state["pending_total"], state["holding_total"]) == (3, 1)
    page = text(response)
    assert 'Waiting <span class="count" data-count="pending">3</span>' in page
    assert "in 1 min" in page  # the ETA of position 1
    assert "Waiting for quota" in page
    order = [m for m in re.findall(r"team-a/(w\d)</a>", page)]
    assert order[:3] == ["w2", "w0", "w1"]


def test_a_long_queue_is_paged_and_its_page_cost_does_not_grow(site):
    def measure() -> int:
        client = site.client("vic")
        url = f"/tenants/{site.tenant.name}/queues/{site.queue.name}/"
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(url).status_code == 200
        return len(ctx.captured_queries)

    ids = [submit(site.world, f"a{i}").pk for i in range(5)]
    small = measure()
    Workload.objects.bulk_create(
        Workload(
            tenant=site.tenant,
            quota=site.quota,
            queue=site.queue,
            name=f"bulk-{i}",
            namespace="team-a",
            pod_sets=[{"name": "main", "count": 1, "requests": {"cpu": 1000}}],
            total_request={"cpu": 1000},
            queue_order_at=timezone.now(),
            position=6 + i,
        )
        for i in range(245)
    )
    live.rank(ids)
    assert measure() == small

    window = queries.queue_window(site.queue, page=2)
    assert (window.pending_total, window.pages, window.first_position) == (250, 3, 101)
    assert [r["position"] for r in window.pending][:2] == [101, 102]
    response = site.client("vic").get(
        f"/tenants/{site.tenant.name}/queues/{site.queue.name}/?page=3"
    )
    state = queue_state(response)
    assert (state["first"], len(state["pending_rows"]), state["pending_total"]) == (201, 50, 250)
    assert "Positions 201\u2013250 of 250" in text(response)
    assert (
        site.client("vic")
        .get(f"/tenants/{site.tenant.name}/queues/{site.queue.name}/?page=99")
        .status_code
        == 200
    )


def test_the_workload_page_explains_why_it_waits(site):
    ahead = submit(site.world, "ahead")
    theirs = submit(site.world, "victim")
    waiting = submit(site.world, "waiting", cpu="4")
    Workload.objects.filter(pk=theirs.pk).update(tenant=site.other)  # pretend: another tenant's
    explanation = {
        "workload_id": waiting.pk,
        "kind": "quota",
        "quota": site.quota.name,
        "shortfall": {"cpu": 2500, "memory": 2**33},
        "limit": "runtime",
        "largest_free_slot": None,
        "eligible_nodes": None,
        "ahead": [ahead.pk],
        "blocked_by": None,
        "to_free": {"cpu": 2500},
        "victims": [theirs.pk],
        "borrowable": {"cpu": 1000},
        "requeue_at": None,
        "detail": "",
        "sentence": "Waiting for quota: team-a-q runtime quota is short by 2.5 cpu.",
    }
    Workload.objects.filter(pk=waiting.pk).update(
        explanation=explanation, reason=explanation["sentence"], position=2, global_position=5
    )
    page = text(site.client("vic").get(f"/tenants/{site.tenant.name}/workloads/{waiting.pk}/"))
    assert "Waiting for quota: team-a-q runtime quota is short by 2.5 cpu." in page
    assert "<strong>team-a-q</strong> (its runtime limit)" in page
    assert ">2.5</td>" in page  # shortfall per resource, in cores (m only below one)
    assert ">8Gi</td>" in page
    assert "Freeing cpu 2.5 in team-a-q." in page
    assert "Borrowing idle capacity: up to cpu 1 more" in page
    assert f'href="/tenants/{site.tenant.name}/workloads/{ahead.pk}/">team-a/ahead</a>' in page
    assert "a workload of another tenant" in page
    assert "team-a/victim" not in page  # another tenant's names stay hidden
    assert '2 <span class="muted">in its queue; 5 overall</span>' in page
    # the object it stands for, and its timeline
    assert "kubectl -n team-a get job waiting -o yaml" in page
    assert "koord-queue/queue-name=team-a-q" in page
    assert "Submitted" in page
    assert "kube-queue: Enqueued" in page
    # viewers see no cancel button; members do
    assert "Cancel this workload" not in page
    member_page = text(
        site.client("mem").get(f"/tenants/{site.tenant.name}/workloads/{waiting.pk}/")
    )
    assert "Cancel this workload" in member_page


def test_the_cluster_page_shows_nodes_the_quota_tree_and_cycles(site):
    w = submit(site.world, "placed", cpu="2")
    live.admit([w.pk])
    Workload.objects.filter(pk=w.pk).update(assignment={"node-1": {"cpu": 2000}})
    CycleRun.objects.create(
        root="cluster", started_at=timezone.now(), duration_ms=12.5, engine_ms=4.0, errors=["boom"]
    )
    page = text(site.client("root").get("/cluster/"))
    assert "node-1" in page
    assert "node-2" in page
    assert "2 held + 0 other of 8" in page
    assert "team-a-q" in page
    assert "team-b-q" in page
    assert "12.5 ms" in page
    assert "1 error" in page
    assert "Duration of recent admission cycles" in page
    live_part = site.client("root").get("/cluster/?partial=live")
    assert b"<html" not in live_part.content


def test_the_cluster_page_shows_free_room_kept_for_waiting_work_as_kept_not_idle(site):
    # Live, half the demo's cpu nodes read as idle while drains kept them for two aged
    # gangs: nothing on the page said so. The latest cycle's holds are shown, by node.
    gang = submit(site.world, "wide-gang", cpu="4")
    now = timezone.now()
    hold = {"node": "node-2", "workload_id": gang.pk, "kind": "drain", "resources": {"cpu": 3000}}
    CycleRun.objects.create(
        root="cluster",
        started_at=now - timedelta(seconds=30),
        holds=[hold | {"node": "node-1"}],
    )
    CycleRun.objects.create(
        root="cluster",
        started_at=now,
        holds=[
            hold,
            {
                "node": "node-2",
                "workload_id": 999_999,
                "kind": "reservation",
                "resources": {"cpu": 9000},
            },
        ],
    )
    page = text(site.client("root").get("/cluster/"))
    # node-2 has 8 cpu free: 3 kept for the gang, the 9 of a workload gone since are
    # capped at what is free (a hold outlived by room taken since reads no more).
    assert "0 held + 0 other + 8 kept free for waiting work of 8" in page
    # The pool (both nodes) adds up what each node keeps, each capped: 8 of 16, not 12.
    assert "0 held + 0 other + 8 kept free for waiting work of 16" in page
    assert f'3 cpu kept for <a href="/tenants/{site.tenant.name}/workloads/{gang.pk}/">' in page
    assert f"{gang.namespace}/wide-gang</a>" in page
    assert "it waited past its aging bound" in page
    assert "9 cpu kept for workload 999999" in page
    assert "the room it needs beyond what its victims release" in page
    # Only the latest cycle counts: node-1's hold of the earlier one is gone.
    assert page.count("kept free for waiting work of") == 1 + 1  # node-2, and its pool
    live_part = text(site.client("root").get("/cluster/?partial=live"))
    assert "wide-gang" in live_part


def test_the_latest_holds_of_every_tree_are_read_in_one_query(site):
    now = timezone.now()
    hold = {"node": "node-1", "workload_id": 1, "kind": "drain", "resources": {"cpu": 1000}}
    for i in range(3):
        root = f"tree-{i}"
        Quota.objects.create(name=root)
        CycleRun.objects.create(root=root, started_at=now - timedelta(seconds=9), holds=[hold])
        CycleRun.objects.create(root=root, started_at=now, holds=[hold | {"node": root}])
    CycleRun.objects.create(root="tree-2", started_at=now + timedelta(seconds=1), holds=[])
    with CaptureQueriesContext(connection) as ctx:
        latest = queries.latest_holds()
    assert len(ctx.captured_queries) == 1
    # Each tree's latest cycle only; tree-2's latest kept nothing.
    assert sorted(h["node"] for run in latest for h in run["holds"]) == ["tree-0", "tree-1"]


def test_the_overview_and_workload_pages_cost_the_same_for_any_number_of_workloads(site):
    def count(url: str) -> int:
        client = site.client("vic")
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(url).status_code == 200
        return len(ctx.captured_queries)

    first = submit(site.world, "first")
    other = submit(site.world, "other")
    Workload.objects.filter(pk=first.pk).update(
        explanation={"kind": "behind", "ahead": [other.pk], "victims": [], "blocked_by": None}
    )
    overview = f"/tenants/{site.tenant.name}/"
    workload = f"/tenants/{site.tenant.name}/workloads/{first.pk}/"
    before = (count(overview), count(workload))
    ids = [submit(site.world, f"more-{i}").pk for i in range(30)]
    live.admit(ids[:10])
    Workload.objects.filter(pk=first.pk).update(
        explanation={
            "kind": "behind",
            "ahead": ids[10:20],
            "victims": ids[:5],
            "blocked_by": ids[11],
        }
    )
    assert (count(overview), count(workload)) == (before[0], before[1])


def test_the_usage_chart_spans_the_whole_history_in_a_bounded_number_of_points(site):
    start = timezone.now() - timedelta(days=2)
    UsageSample.objects.bulk_create(
        UsageSample(quota=site.quota, at=start + timedelta(minutes=m), decayed={"cpu": m * 1000})
        for m in range(0, 2000)
    )
    series = queries.usage_series([site.quota], points=50)
    cpu = series["cpu"]
    assert len(cpu) == 50
    assert (cpu[0][0], cpu[-1][0]) == (start, start + timedelta(minutes=1999))
    assert cpu[-1][1] == 1999 * 1000
