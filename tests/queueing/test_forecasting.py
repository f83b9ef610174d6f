"""The live cycle feeds the engine's forecast what it learns from history
(queueing.forecasting): runtime ratios, residuals of stored first forecasts, arrival
load, the previous ETAs (hysteresis) and the queues' aging bound."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

import pytest

from queueing import actions, forecasting, nodeview, state
from queueing.admission import tick
from queueing.choices import WAITING_PHASES, Phase
from queueing.cluster.simulated import SIM_RUNTIME_ANNOTATION
from queueing.engine import run_cycle
from queueing.engine.calibration import SQUARES
from queueing.engine.types import Eta
from queueing.models import Queue, Workload
from queueing.state.annotate import write_annotations
from tests import builders
from tests.builders import SYSTEM

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    # The tests move a hand clock many minutes within a real second: learn afresh.
    monkeypatch.setattr(forecasting, "TTL_S", 0.0)


def _submit(w: builders.World, name: str, *, declared: float, actual: float, cpu: str = "4"):
    return actions.submit_workload(
        SYSTEM,
        tenant=None,
        quota=w.quota,
        queue=None,
        name=name,
        pod_sets=[{"count": 1, "requests": {"cpu": cpu}}],
        priority=0,
        expected_runtime_s=declared,
        annotations={SIM_RUNTIME_ANNOTATION: f"{actual:.1f}"},
    )


def _finished_with_ratios(w: builders.World, ratios: list[float], declared: float = 100.0) -> None:
    """Run workloads to completion whose actual runtime is ``ratio x declared``."""
    for i, ratio in enumerate(ratios):
        _submit(w, f"done-{i}", declared=declared, actual=declared * ratio)
    for _ in range(40):
        tick(cluster=w.cluster, now=w.clock.advance(10))
        if not Workload.objects.exclude(phase=Phase.SUCCEEDED).exists():
            return
    raise AssertionError(dict(Workload.objects.values_list("name", "phase")))


def test_runtime_ratio_is_measured_from_finished_workloads(world):
    ratios = [0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    _finished_with_ratios(world, ratios)
    got = forecasting.runtime_ratio({world.queue.id: world.queue.name})
    p50, p90 = got[world.queue.name]
    # The simulated cluster finishes a job at the first tick after its runtime: the
    # measured ratio is the true one, rounded up by at most one 10 s tick of 100 s.
    assert 0.7 <= p50 <= 0.8
    assert 1.0 <= p90 <= 1.1
    assert p50 < p90


def test_waiting_workloads_get_a_p90_above_their_p50_and_the_first_forecast_is_kept(world):
    # Runtimes vary from 40 % to 100 % of what is declared: history to learn from.
    _finished_with_ratios(world, [0.4, 0.55, 0.7, 0.85, 1.0, 0.5, 0.9, 0.6])
    # Four 4-cpu jobs fill the 16-cpu quota; six more wait behind them.
    for i in range(10):
        _submit(world, f"w{i}", declared=120, actual=120 * (0.4 + 0.06 * i))
    tick(cluster=world.cluster, now=world.clock.advance(1))
    waiting = list(Workload.objects.filter(phase__in=WAITING_PHASES).order_by("position"))
    assert len(waiting) == 6
    for w in waiting:
        assert w.eta_p50 is not None, w.reason
        assert w.eta_p90 is not None, w.reason
        assert w.eta_p50 < w.eta_p90, (w.name, w.eta)
        # The first forecast is stored with it, as the engine made it.
        assert w.first_seen_at == world.clock()
        assert w.eta_first_p50 == w.eta_p50
        assert w.eta_first_p90 == w.eta_p90
        assert w.eta_first_forecast is not None
        assert w.eta == {
            "p50": pytest.approx(w.eta_p50.timestamp(), abs=1e-3),
            "p90": pytest.approx(w.eta_p90.timestamp(), abs=1e-3),
            "reason": "",
            "moved": "first",
            "last_move": {"moved": "first", "delta_s": 0.0, "at": world.clock().timestamp()},
            "by_age": False,
        }
    first = {w.id: (w.first_seen_at, w.eta_first_p50, w.eta_first_p90) for w in waiting}
    # Higher-priority work arrives; the next cycles forecast again and rewrite the rows...
    for i in range(3):
        builders.submit(world, f"urgent-{i}", cpu="4", runtime=300, priority=1000)
    tick(cluster=world.cluster, now=world.clock.advance(5))
    tick(cluster=world.cluster, now=world.clock.advance(5))
    later = list(Workload.objects.filter(id__in=list(first), phase__in=WAITING_PHASES))
    assert later
    for w in later:
        assert w.eta["moved"] != "first", w.eta  # the row was written again
        # ...and the first forecast stays what it was.
        assert (w.first_seen_at, w.eta_first_p50, w.eta_first_p90) == first[w.id]


def test_the_first_forecast_is_written_once(world):
    builders.submit(world, "w", cpu="1")
    row = Workload.objects.get(name="w")
    at = world.clock()
    new = {
        "position": 1,
        "global_position": 1,
        "eta_p50": at + timedelta(seconds=60),
        "eta_p90": at + timedelta(seconds=90),
        "reason": "r",
        "explanation": None,
        "eta": {"p50": 0.0, "p90": 0.0, "reason": "", "moved": "first", "last_move": None},
        "first": (at, at.timestamp() + 60, at.timestamp() + 90, at.timestamp() + 50),
    }
    assert write_annotations([(row.id, new)], at) == 1
    again = new | {"first": (at + timedelta(seconds=30), 1.0, 2.0, 3.0), "reason": "later"}
    write_annotations([(row.id, again)], at)
    row.refresh_from_db()
    assert row.reason == "later"  # the second write happened...
    # ...but the first forecast is the first one.
    assert (row.first_seen_at, row.eta_first_p50, row.eta_first_p90, row.eta_first_forecast) == (
        at,
        at + timedelta(seconds=60),
        at + timedelta(seconds=90),
        at + timedelta(seconds=50),
    )


def test_hysteresis_holds_across_two_rounds_with_nothing_changed(world):
    for i in range(8):
        _submit(world, f"w{i}", declared=600, actual=600)
    tick(cluster=world.cluster, now=world.clock())
    nodes = nodeview.read()

    def round_() -> tuple[Mapping[int, Eta], Mapping[int, Eta]]:
        snapshot, index = state.build_snapshot(
            world.root.name, nodes=nodes, now=world.clock.advance(2)
        )
        result = run_cycle(snapshot, forecast=True)
        state.apply(result, snapshot, index, None, world.cluster, annotate=True)
        return snapshot.previous_etas, result.etas

    _, etas1 = round_()
    assert len(etas1) == 4
    assert all(e.p50 is not None for e in etas1.values())
    previous2, etas2 = round_()
    # What the first round published came back as the second's previous ETAs...
    assert {w: (e.p50, e.p90) for w, e in previous2.items()} == {
        w: (e.p50, e.p90) for w, e in etas1.items()
    }
    # ...and, nothing having changed but two seconds, the ETAs stay where they were.
    assert set(etas2) == set(etas1)
    for wid, eta in etas2.items():
        assert eta.moved == "kept", eta
        assert (eta.p50, eta.p90) == (etas1[wid].p50, etas1[wid].p90)
    stored = Workload.objects.get(id=next(iter(etas1)))
    assert stored.eta["moved"] == "kept"
    assert stored.eta["last_move"]["moved"] == "first"


def test_residuals_come_from_stored_first_forecasts(world):
    now = world.clock()
    for i in range(41):
        w = builders.submit(world, f"r{i}", cpu="1")
        # predicted a 100 s wait; it waited 100 + 10 i s (errors 0.0 .. 4.0)
        Workload.objects.filter(id=w.id).update(
            phase=Phase.SUCCEEDED,
            attempts=1,
            first_seen_at=now - timedelta(seconds=2000),
            eta_first_forecast=now - timedelta(seconds=1900),
            admitted_at=now - timedelta(seconds=1900 - 10 * i),
        )
    got = forecasting.eta_residuals([world.quota.id], {world.queue.id: world.queue.name}, now)
    key = f"q/{world.queue.name}/0"
    # One forecast of 41 covered its wait: the class is moved by its 45 % quantile
    # (calibration.P50_BAND), the 19th error, 1.8, shrunk by n / (n + 20) (SHRINK_N).
    assert got[key][0] == pytest.approx(1.8 * 41 / 61)
    assert got[key][1] == pytest.approx(4.0)  # QBETS: with 41 points, the largest
    # An evicted workload admitted again says nothing of its first wait: left out.
    Workload.objects.filter(name="r40").update(attempts=2)
    got = forecasting.eta_residuals([world.quota.id], {world.queue.id: world.queue.name}, now)
    assert got[key][1] == pytest.approx(3.9)
    # One fewer and the class has too few errors for the p50's shift
    # (calibration.P50_MINIMUM); its p90 bound stays.
    Workload.objects.filter(name="r39").update(attempts=2)
    got = forecasting.eta_residuals([world.quota.id], {world.queue.id: world.queue.name}, now)
    assert got[key] == (None, pytest.approx(3.8))


def test_arrival_load_counts_recent_arrivals_by_priority(world, settings):
    # A 4-cpu, 100 s job of a 16-cpu tree: a share of 0.25 x 100 s of work (cycles woken
    # by events: a job's quota is free at its end, see the next test).
    settings.KQ_WAKE = True
    builders.submit(world, "hi", cpu="4", runtime=100, priority=1000)
    builders.submit(world, "lo", cpu="2", runtime=100, priority=0)
    # Arrivals are dated by the database (created_at), not by the test's clock.
    created = Workload.objects.order_by("created_at").first().created_at  # type: ignore[union-attr]
    snapshot, index = state.build_snapshot(
        world.root.name, nodes=nodeview.read(), now=created + timedelta(seconds=50)
    )
    load = snapshot.arrival_load[world.queue.name]
    # The tree's work is younger than the window: the span is its age.
    span = (index.now - created).total_seconds()
    assert span == pytest.approx(50.0)
    assert load[1000]["cpu"] == pytest.approx(25.0 / span)
    assert load[0]["cpu"] == pytest.approx(12.5 / span)
    # And the squares of each arrival's share (one each): the load's sampling error.
    assert load[1000][SQUARES + "cpu"] == pytest.approx((25.0 / span) ** 2)
    # Out of the window, an arrival no longer counts.
    snapshot, _ = state.build_snapshot(
        world.root.name,
        nodes=nodeview.read(),
        now=created + timedelta(seconds=forecasting.ARRIVAL_WINDOW_S + 60),
    )
    assert snapshot.arrival_load == {}


def test_recent_arrivals_reach_the_forecast_as_specs(world, monkeypatch):
    builders.submit(world, "hi", cpu="4", runtime=100, priority=1000)
    builders.submit(world, "lo", cpu="2", runtime=60, priority=0)
    created = Workload.objects.earliest("created_at").created_at
    snapshot, index = state.build_snapshot(
        world.root.name, nodes=nodeview.read(), now=created + timedelta(seconds=50)
    )
    got = {w.name: w for w in snapshot.recent_arrivals}
    assert set(got) == {"hi", "lo"}
    hi = got["hi"]
    assert (hi.queue, hi.quota, hi.priority, hi.expected_runtime_s) == (
        world.queue.name,
        world.quota.name,
        1000,
        100.0,
    )
    assert hi.request.get("cpu") == 4000
    assert hi.queue_order_at == Workload.objects.get(name="hi").created_at.timestamp()
    # Oldest first, over the tree's age (younger than the window).
    assert [w.name for w in snapshot.recent_arrivals] == ["hi", "lo"]
    assert snapshot.arrival_span_s == pytest.approx((index.now - created).total_seconds())
    # The inflow has been seen for as long as the tree has had workloads.
    assert snapshot.arrival_age_s == pytest.approx((index.now - created).total_seconds())
    # Capped: the latest only, over their own span (the rate stays theirs).
    monkeypatch.setattr(forecasting, "RECENT_ARRIVALS_MAX", 1)
    snapshot, index = state.build_snapshot(
        world.root.name, nodes=nodeview.read(), now=created + timedelta(seconds=50)
    )
    lo = Workload.objects.get(name="lo").created_at
    assert [w.name for w in snapshot.recent_arrivals] == ["lo"]
    assert snapshot.arrival_span_s == pytest.approx(max((index.now - lo).total_seconds(), 1.0))
    # The inflow is not younger for it.
    assert snapshot.arrival_age_s == pytest.approx((index.now - created).total_seconds())
    # Past the load's window the forecast still replays them (its history is longer)...
    monkeypatch.setattr(forecasting, "RECENT_ARRIVALS_MAX", 2_000)
    snapshot, _ = state.build_snapshot(
        world.root.name,
        nodes=nodeview.read(),
        now=created + timedelta(seconds=forecasting.ARRIVAL_WINDOW_S + 60),
    )
    assert forecasting.ARRIVAL_HISTORY_S > forecasting.ARRIVAL_WINDOW_S + 60
    assert snapshot.arrival_load == {}
    assert [w.name for w in snapshot.recent_arrivals] == ["hi", "lo"]
    # ...and out of its own window: none.
    snapshot, _ = state.build_snapshot(
        world.root.name,
        nodes=nodeview.read(),
        now=created + timedelta(seconds=forecasting.ARRIVAL_HISTORY_S + 60),
    )
    assert snapshot.recent_arrivals == ()


def test_where_cycles_run_on_a_beat_a_job_holds_its_quota_until_the_next_one(world, settings):
    # A 4-cpu job of 10 s in a 16-cpu tree, with cycles every 30 s: its quota is free
    # again only at the first cycle after its end -- 30 s of a 0.25 share, not 10 s.
    builders.submit(world, "hi", cpu="4", runtime=10, priority=1000)
    created = Workload.objects.get(name="hi").created_at
    now = created + timedelta(seconds=50)
    settings.KQ_WAKE = False
    settings.KQ_CYCLE_INTERVAL_S = 30.0
    snapshot, _ = state.build_snapshot(world.root.name, nodes=nodeview.read(), now=now)
    assert snapshot.arrival_load[world.queue.name][1000]["cpu"] == pytest.approx(0.25 * 30 / 50)
    # Woken by events, a cycle sees the end when it happens: its runtime.
    forecasting.clear_cache()
    settings.KQ_WAKE = True
    snapshot, _ = state.build_snapshot(world.root.name, nodes=nodeview.read(), now=now)
    assert snapshot.arrival_load[world.queue.name][1000]["cpu"] == pytest.approx(0.25 * 10 / 50)


def test_the_queues_aging_bound_reaches_the_engine(world):
    builders.submit(world, "w", cpu="1")
    Queue.objects.filter(id=world.queue.id).update(aging_bound_s=None)
    snapshot, _ = state.build_snapshot(world.root.name, nodes=nodeview.read(), now=world.clock())
    assert [q.aging_bound_s for q in snapshot.queues] == [None]
    Queue.objects.filter(id=world.queue.id).update(aging_bound_s=45.0)
    snapshot, _ = state.build_snapshot(world.root.name, nodes=nodeview.read(), now=world.clock())
    assert [q.aging_bound_s for q in snapshot.queues] == [45.0]
    assert Queue._meta.get_field("aging_bound_s").default == 300.0


def test_cycle_interval_follows_how_cycles_are_woken(world, settings):
    builders.submit(world, "w", cpu="1")
    settings.KQ_WAKE = True
    snapshot, _ = state.build_snapshot(world.root.name, nodes=nodeview.read(), now=world.clock())
    assert snapshot.config.cycle_interval_s == 0.0
    settings.KQ_WAKE = False
    settings.KQ_CYCLE_INTERVAL_S = 3.0
    snapshot, _ = state.build_snapshot(world.root.name, nodes=nodeview.read(), now=world.clock())
    assert snapshot.config.cycle_interval_s == 3.0
