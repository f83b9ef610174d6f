"""Every waiting row shows an ETA or why there is none -- on the queue page as served and
as the live stream sends it, on the workload page and in the API, in the same words
(issue 11, item 4)."""

from __future__ import annotations

import dataclasses
import html
import json
import re
import time

from portal import queries
from queueing.choices import Phase
from queueing.engine import run_cycle
from queueing.engine.resources import Resources
from queueing.engine.types import QueueSpec
from queueing.models import Workload
from tests.builders import submit
from tests.engine.builders import node, quota, snapshot, workload

HORIZON = "not admitted within the forecast horizon (24 h)"


def _held_elsewhere_explanation() -> dict:
    """What the engine says of a 6-cpu job when other trees hold 12 of the nodes' 16 cpu."""
    held = {"cpu": 6000}
    snap = snapshot(
        quotas=[quota("root"), quota("team", "root")],
        nodes=[
            dataclasses.replace(
                node(n, {"cpu": 8000}, reserved=held), held_elsewhere=Resources(held)
            )
            for n in ("a", "b")
        ],
        workloads=[workload(1, "team", "q", req={"cpu": 6000})],
        queues=[QueueSpec("q")],
    )
    return run_cycle(snap).explanations[1].to_dict()


def _held_by_guarantees_explanation() -> dict:
    """What the engine says of a 2-GPU job whose quota can get 1 GPU while a sibling keeps
    its min of 1 for its own demand (``tests/engine/test_unusable_demand.py``)."""
    from tests.engine.test_unusable_demand import world

    return run_cycle(world()).explanations[2].to_dict()


def _store(w: Workload, **fields) -> None:
    explanation = fields.get("explanation")
    if explanation is not None:
        fields.setdefault("reason", explanation["sentence"])
    Workload.objects.filter(pk=w.pk).update(**fields)


def _eta_cells(page: str) -> dict[str, tuple[str, str]]:
    """Per workload name, the ETA p50 and p90 cells of its pending row (inner HTML)."""
    body = page.split('id="pending-rows"', 1)[1].split("</tbody>", 1)[0]
    out = {}
    for row in re.findall(r"<tr .*?</tr>", body, re.S):
        name = re.search(r"team-a/([\w-]+)</a>", row).group(1)
        p50 = re.search(r'data-field="eta_p50"[^>]*>(.*?)</td>', row, re.S).group(1)
        p90 = re.search(r'data-field="eta_p90"[^>]*>(.*?)</td>', row, re.S).group(1)
        out[name] = (p50, p90)
    return out


def _shown(cell: str) -> tuple[str, str]:
    """(text, hover title) of a cell."""
    title = re.search(r'title="([^"]*)"', cell)
    text = re.sub(r"<[^>]+>", "", cell).strip()
    return html.unescape(text), html.unescape(title.group(1)) if title else ""


def test_every_waiting_row_shows_its_eta_or_why_not_everywhere_alike(site):
    w = {name: submit(site.world, name) for name in ("horizon", "never", "elsewhere", "backoff", "new", "bounded", "held")}  # fmt: skip
    _store(w["horizon"], position=1, reason="Waiting for quota: team-a runtime quota is short by 1 cpu.",
           eta={"p50": None, "p90": None, "reason": HORIZON, "moved": "", "last_move": None},
           explanation={"kind": "quota", "limit": "runtime", "sentence": "x"})  # fmt: skip
    _store(w["never"], explanation={
        "kind": "never-fits", "limit": "max", "to_free": {},
        "sentence": "Can never be admitted as specified: it requests 64 cpu but quota team-a has a max of 16 cpu.",
    })  # fmt: skip
    _store(w["elsewhere"], explanation=_held_elsewhere_explanation())
    _store(w["backoff"], phase=Phase.BACKOFF, reason="Backing off after a failed start or eviction until 2026-12-03 14:00:00 UTC.",
           explanation={"kind": "backoff", "sentence": "x"})  # fmt: skip
    _store(w["new"], reason="Waiting for the next admission cycle.")
    bound = time.time() + 600
    _store(w["bounded"], position=2, reason="Waiting for quota.",
           eta={"p50": None, "p90": None, "reason": HORIZON, "moved": "", "last_move": None},
           explanation={"kind": "quota", "limit": "runtime", "starts_by": bound, "sentence": "x"})  # fmt: skip

    _store(w["held"], position=3,
           eta={"p50": None, "p90": None, "reason": HORIZON, "moved": "", "last_move": None},
           explanation=_held_by_guarantees_explanation())  # fmt: skip

    vic = site.client("vic")
    response = vic.get(f"/tenants/{site.tenant.name}/queues/{site.queue.name}/")
    page = response.content.decode()
    cells = _eta_cells(page)
    assert set(cells) == set(w)
    expected = {
        "horizon": "beyond the horizon",
        "never": "never fits",
        "elsewhere": "room held by other trees",
        "backoff": "backing off",
        "new": "next cycle",
        "bounded": "beyond the horizon",
        "held": "held by others' minimums",
    }
    state = json.loads(
        re.search(r'<script id="queue-state" type="application/json">(.*?)</script>', page, re.S).group(1)
    )  # fmt: skip
    wire = {r["name"]: r for r in state["pending_rows"]}
    for name, (p50, p90) in cells.items():
        text, title = _shown(p50)
        assert text == expected[name], (name, p50)  # never a bare "—"
        row = wire[name]
        assert (row["eta_note"], row["eta_why"]) == (text, title)
        api = vic.get(f"/api/v1/workloads/{w[name].pk}/").json()
        assert api["eta_note"] == title  # the API says what the hover says
        if name == "bounded":
            assert _shown(p90)[0].startswith("at the latest in 9 min") or _shown(p90)[0].startswith(
                "at the latest in 10 min"
            )
            assert api["starts_by"] == row["starts_by"] is not None
        else:
            assert _shown(p90) == (text, title)
            assert api["starts_by"] is None
    # The full texts say precisely why.
    assert (
        wire["horizon"]["eta_why"]
        == f"No ETA: {HORIZON}. Waiting for quota: team-a runtime quota is short by 1 cpu."
    )
    assert wire["elsewhere"]["eta_why"].startswith(
        "Waiting for room held by other quota trees: it requests 6 cpu;"
    )
    assert wire["never"]["eta_why"].startswith("Can never be admitted as specified")
    assert wire["new"]["eta_why"].startswith("Not ranked yet: the next admission cycle")
    assert wire["held"]["eta_why"] == (
        f"No ETA: {HORIZON}. Waiting for quota: b is short by 1 nvidia.com/gpu and cannot "
        "borrow it: it requests 2 nvidia.com/gpu but b can get at most 1 nvidia.com/gpu "
        "while, within root, a (1 nvidia.com/gpu) keep their guaranteed minimum for their "
        "own demand; it can start when that demand falls, and meanwhile b's share goes to "
        "work that can use it."
    )
    # The live stream's reads go through the same wire form (portal.stream_queries).
    streamed = {
        r["name"]: r
        for r in queries.wire_rows(Workload.objects.filter(pk__in=[x.pk for x in w.values()]))
    }
    assert {n: (r["eta_note"], r["eta_why"], r["starts_by"]) for n, r in streamed.items()} == {
        n: (r["eta_note"], r["eta_why"], r["starts_by"]) for n, r in wire.items()
    }
    # The workload page: the short reason, the bound, and the full text.
    detail = vic.get(f"/tenants/{site.tenant.name}/workloads/{w['bounded'].pk}/").content.decode()
    assert '<span class="eta-none">beyond the horizon</span>' in detail
    assert "(aging&#x27;s bound)" in detail or "(aging's bound)" in detail
    detail = vic.get(f"/tenants/{site.tenant.name}/workloads/{w['elsewhere'].pk}/").content.decode()
    assert '<span class="eta-none">room held by other trees</span>' in detail


def test_a_row_with_an_eta_shows_times_and_no_note(site):
    from tests import live

    job = submit(site.world, "ranked")
    live.rank([job.pk])
    page = site.client("vic").get(f"/tenants/{site.tenant.name}/queues/{site.queue.name}/")
    p50, p90 = _eta_cells(page.content.decode())["ranked"]
    assert "<time" in p50
    assert "<time" in p90
    row = queries.wire_rows(Workload.objects.filter(pk=job.pk))[0]
    assert (row["eta_note"], row["eta_why"], row["starts_by"]) == ("", "", None)


def test_a_job_waiting_for_room_another_tree_holds_reads_so_through_the_whole_stack(site):
    from queueing import actions
    from queueing.admission import cycle_root
    from tests.builders import SYSTEM

    # A second quota tree takes both 8-cpu nodes; team-a's 12-cpu job (within its max of
    # 16) waits for that room -- it is not beyond the cluster.
    root = actions.create_quota(
        SYSTEM, name="other", tenant=None, parent=None, min={"cpu": "16"}, max={"cpu": "16"}
    )
    tenant = actions.create_tenant(SYSTEM, name="other-t")
    leaf = actions.create_quota(
        SYSTEM, name="other-q", tenant=tenant, parent=root, min={"cpu": "16"},
        max={"cpu": "16"}, namespaces=["other-t"],
    )  # fmt: skip
    for i in range(2):
        submit(site.world, f"theirs-{i}", cpu="8", runtime=600, quota=leaf)
    cycle_root("other", cluster=site.world.cluster, now=site.world.clock())
    assert Workload.objects.filter(quota=leaf, phase=Phase.ADMITTED).count() == 2
    job = submit(site.world, "mine", cpu="4", count=3, runtime=600)
    cycle_root("cluster", cluster=site.world.cluster, now=site.world.clock.advance(2))
    job.refresh_from_db()
    assert job.phase == Phase.PENDING
    assert job.explanation["kind"] == "never-fits"
    assert job.reason == (
        "Waiting for room held by other quota trees: it requests 12 cpu; other quota trees "
        "hold 16 cpu of the schedulable nodes' 16 cpu, leaving 0 cpu: it fits once they "
        "release 12 cpu; set aside until then, it blocks nobody."
    )
    page = site.client("vic").get(f"/tenants/{site.tenant.name}/queues/{site.queue.name}/")
    p50, _p90 = _eta_cells(page.content.decode())["mine"]
    assert _shown(p50) == ("room held by other trees", job.reason)


def test_an_eta_earlier_than_rows_ahead_says_it_goes_first_by_age(site):
    # Live, vision-dev's page showed "in 4 min" at position 11 below "in 5 min" at
    # position 6, and nothing said why: the later row had queued earlier and goes first
    # once aged. The engine marks such an ETA (``Eta.by_age``, stored as eta["by_age"]);
    # the page, the live stream, the workload page and the API say so.
    now = time.time()
    ahead, aged = submit(site.world, "ahead"), submit(site.world, "aged")
    last = {"moved": "first", "delta_s": 0.0, "at": now}
    _store(ahead, position=1, eta_p50=_dt(now + 300), eta_p90=_dt(now + 600),
           eta={"p50": now + 300, "p90": now + 600, "reason": "", "moved": "first",
                "last_move": last, "by_age": False})  # fmt: skip
    _store(aged, position=2, eta_p50=_dt(now + 240), eta_p90=_dt(now + 600),
           eta={"p50": now + 240, "p90": now + 600, "reason": "", "moved": "first",
                "last_move": last, "by_age": True})  # fmt: skip
    vic = site.client("vic")
    page = vic.get(f"/tenants/{site.tenant.name}/queues/{site.queue.name}/").content.decode()
    cells = _eta_cells(page)
    assert "eta-by-age" not in cells["ahead"][0]
    assert "eta-by-age" not in cells["aged"][1]  # the p50's cell only
    marker = re.search(
        r'<small class="eta-by-age" title="([^"]*)">by age</small>', cells["aged"][0]
    )
    assert marker is not None
    assert html.unescape(marker.group(1)) == Workload.BY_AGE_NOTE
    assert "<time" in cells["aged"][0]
    # The page hands the same words to queue.js for rows the stream re-renders.
    assert f'data-by-age-note="{html.escape(Workload.BY_AGE_NOTE)}"' in page
    wire = {
        r["name"]: r for r in queries.wire_rows(Workload.objects.filter(pk__in=[ahead.pk, aged.pk]))
    }
    assert (wire["ahead"]["eta_by_age"], wire["aged"]["eta_by_age"]) == (False, True)
    api = vic.get(f"/api/v1/workloads/{aged.pk}/").json()
    assert api["eta"]["by_age"] is True
    assert api["eta_note"] == "First forecast. " + Workload.BY_AGE_NOTE
    assert vic.get(f"/api/v1/workloads/{ahead.pk}/").json()["eta_note"] == "First forecast."
    detail = vic.get(f"/tenants/{site.tenant.name}/workloads/{aged.pk}/").content.decode()
    assert html.escape(Workload.BY_AGE_NOTE) in detail
    # Without an ETA a stale flag shows nothing.
    _store(aged, eta_p50=None, eta_p90=None,
           eta={"p50": None, "p90": None, "reason": HORIZON, "moved": "", "last_move": None,
                "by_age": True})  # fmt: skip
    row = queries.wire_rows(Workload.objects.filter(pk=aged.pk))[0]
    assert row["eta_by_age"] is False


def _dt(epoch: float):
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch, tz=UTC)
