"""The forecast of the waiting off the admission path (queueing.forecaster): while a
forecaster is there the cycles only admit and ask it; it annotates and never admits;
without it the cycles forecast themselves; and a world that annotates after another one
did starts again from the database."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.cache import cache

from queueing import actions, forecaster, state, world
from queueing.admission import cycle_root
from queueing.choices import Phase
from queueing.models import CycleRun, Workload
from queueing.tasks import forecast as forecast_task
from tests.builders import SYSTEM, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def requests(settings, monkeypatch) -> Iterator[list[str]]:
    """Wakes on (a broker to send requests on), the forecast requests recorded."""
    settings.KQ_WAKE = True
    cache.clear()
    forecaster.forget()
    sent: list[str] = []
    monkeypatch.setattr(forecaster, "send", sent.append)
    yield sent
    cache.clear()
    forecaster.forget()


def cycle(w, capture) -> None:
    with capture(execute=True):
        assert cycle_root("cluster", cluster=w.cluster, now=w.clock()) is not None


def waiting() -> list[Workload]:
    return list(Workload.objects.filter(phase=Phase.PENDING).order_by("id"))


def fill_then_wait(w, *names: str) -> None:
    """Four 4-cpu jobs fill the two 8-cpu nodes; then ``names`` wait, in that order."""
    for i in range(4):
        submit(w, f"fill{i}", cpu="4", runtime=600)
    for name in names:
        submit(w, name, cpu="4", runtime=60)


def test_a_cycle_asks_a_serving_forecaster_and_only_admits(
    world, requests, django_capture_on_commit_callbacks
):
    forecaster.beat()
    fill_then_wait(world, "a", "b")
    before = [(w.position, w.reason, w.eta_p50) for w in Workload.objects.order_by("id")][4:]
    assert before[0][0] is None
    cycle(world, django_capture_on_commit_callbacks)
    assert Workload.objects.filter(phase=Phase.ADMITTED).count() == 4
    # Nothing annotated: the forecast was asked for, once while the request is on its way.
    assert [(w.position, w.reason, w.eta_p50) for w in waiting()] == before
    assert requests == ["cluster"]
    world.clock.advance(5)
    cycle(world, django_capture_on_commit_callbacks)
    assert requests == ["cluster"]
    # The task drops the request as it starts: the next due cycle asks again.
    forecast_task("cluster")
    world.clock.advance(5)
    cycle(world, django_capture_on_commit_callbacks)
    assert requests == ["cluster", "cluster"]


def test_the_forecaster_annotates_the_waiting_and_changes_nothing_else(
    world, requests, django_capture_on_commit_callbacks
):
    forecaster.beat()
    fill_then_wait(world, "a", "b")
    cycle(world, django_capture_on_commit_callbacks)
    phases = dict(Workload.objects.values_list("name", "phase"))
    runs = CycleRun.objects.count()
    with django_capture_on_commit_callbacks(execute=True):
        summary = forecast_task("cluster")
    assert summary["annotated"] == 2
    a, b = waiting()
    assert (a.position, b.position) == (1, 2)
    assert a.reason
    assert b.reason
    assert None not in (a.eta_p50, a.eta_p90, a.eta_first_p50, b.eta_p50, b.eta_p90)
    # No admission, no cycle record: the forecaster only writes what the waiting show.
    assert dict(Workload.objects.values_list("name", "phase")) == phases
    assert CycleRun.objects.count() == runs


def test_the_forecaster_and_a_cycle_forecast_within_budgets_of_their_own(
    world, requests, settings, monkeypatch, django_capture_on_commit_callbacks
):
    # A cycle that forecasts itself holds its admissions while it does; the forecaster
    # holds nothing, and its draws (the p50 is their median) get a budget of their own.
    from queueing import engine

    settings.KQ_ETA_BUDGET_S = 0.2
    settings.KQ_FORECASTER_ETA_BUDGET_S = 0.9
    budgets: list[tuple[bool, float]] = []
    run = engine.run_cycle

    def spy(snapshot, *args, **kwargs):
        budgets.append((kwargs.get("forecast", True), snapshot.config.eta_budget_s))
        return run(snapshot, *args, **kwargs)

    monkeypatch.setattr(engine, "run_cycle", spy)
    monkeypatch.setattr("queueing.admission.engine_cycle", spy)
    fill_then_wait(world, "a", "b")
    cycle(world, django_capture_on_commit_callbacks)  # no forecaster: it forecasts itself
    assert budgets == [(True, 0.2)]
    forecaster.beat()
    with django_capture_on_commit_callbacks(execute=True):
        assert forecast_task("cluster")["annotated"] == 2
    assert budgets == [(True, 0.2), (True, 0.9)]


def test_without_a_forecaster_the_cycle_forecasts_itself(
    world, requests, django_capture_on_commit_callbacks
):
    fill_then_wait(world, "a", "b")
    cycle(world, django_capture_on_commit_callbacks)
    assert requests == []
    assert [w.position for w in waiting()] == [1, 2]
    # One that was there and is gone (its note expired): missed at the next look.
    forecaster.beat()
    forecaster.forget()
    submit(world, "c", cpu="4")
    world.clock.advance(5)
    cycle(world, django_capture_on_commit_callbacks)
    assert requests == ["cluster"]
    assert Workload.objects.get(name="c").position is None
    cache.delete(forecaster.HEARTBEAT_KEY)
    forecaster.forget()
    world.clock.advance(5)
    cycle(world, django_capture_on_commit_callbacks)
    assert [w.position for w in waiting()] == [1, 2, 3]


def test_a_world_that_annotates_after_another_world_did_reads_the_rows_again(
    world, requests, django_capture_on_commit_callbacks
):
    """The cycler's world shows a and b at 1 and 2; x comes ahead of them and the
    forecaster (its own process and world) writes 2 and 3, unjournaled, then goes: the
    cycler's world still holds 1 and 2 and would compare its next forecast against them.
    A process that never saw a forecaster neither looks nor notes (no round trips)."""
    fill_then_wait(world, "a", "b")
    cycle(world, django_capture_on_commit_callbacks)  # inline: the cycler's world writes
    assert shown() == {"a": 1, "b": 2}
    cyclers_world = world_of("cluster")
    assert cyclers_world.rebuilds == 1
    cycle(world, django_capture_on_commit_callbacks)  # its own writes: no rebuild
    assert cyclers_world.rebuilds == 1
    x = submit(world, "x", cpu="4", priority=10)
    forecaster.beat()  # a forecaster comes: the cycler asks it
    forecaster.look_again()
    cycle(world, django_capture_on_commit_callbacks)
    assert requests == ["cluster"]
    assert shown() == {"x": None, "a": 1, "b": 2}
    cyclers = world_module_swap()  # the forecaster's process
    with django_capture_on_commit_callbacks(execute=True):
        forecaster.forecast_tree("cluster", now=world.clock())
    assert shown() == {"x": 1, "a": 2, "b": 3}
    forecasters_world = world_of("cluster")
    world_module_swap(cyclers)  # back in the cycler's process
    cache.delete(forecaster.HEARTBEAT_KEY)  # and the forecaster is gone
    forecaster.look_again()
    ids = state.tree_quota_ids("cluster")
    cyclers_world.refresh(ids)
    stale = {row["name"]: row["position"] for row in cyclers_world.rows.values()}
    assert (stale["a"], stale["b"]) == (1, 2)  # x's arrival re-read x only
    actions.cancel_workload(SYSTEM, Workload.objects.get(pk=x.pk))
    cycle(world, django_capture_on_commit_callbacks)
    assert cyclers_world.rebuilds == 2  # the forecaster wrote last: read anew
    assert shown() == {"a": 1, "b": 2}
    cyclers_world.refresh(ids)
    assert cyclers_world.rows == {row["id"]: row for row in live_rows(ids)}
    # And the forecaster's world, next time, after the cycler's inline write.
    world_module_swap({"cluster": forecasters_world})
    with django_capture_on_commit_callbacks(execute=True):
        forecaster.forecast_tree("cluster", now=world.clock())
    assert forecasters_world.rebuilds == 2
    world_module_swap(cyclers)


def world_of(root: str) -> world.TreeWorld:
    return world.world_of(root)


def live_rows(quota_ids) -> list[dict]:
    from queueing.state.snapshot import WORLD_FIELDS

    rows = Workload.objects.filter(quota_id__in=quota_ids, phase__in=list(world.LIVE))
    return list(rows.values(*WORLD_FIELDS))


def shown() -> dict[str, int | None]:
    return dict(Workload.objects.filter(phase=Phase.PENDING).values_list("name", "position"))


def world_module_swap(
    worlds: dict[str, world.TreeWorld] | None = None,
) -> dict[str, world.TreeWorld]:
    """This process's worlds replaced with ``worlds`` (none: a new process's); the old."""
    old = dict(world._worlds)
    world._worlds.clear()
    world._worlds.update(worlds or {})
    return old


def test_only_a_worker_of_the_forecast_queue_says_it_is_there(settings):
    cache.clear()
    settings.KQ_WAKE = True
    forecaster.forget()
    try:
        assert not forecaster.start_heartbeat(["celery", "cycle"])
        assert not forecaster.serving()
        assert forecaster.start_heartbeat(["forecast"])  # its first note, at once
        forecaster.forget()
        assert forecaster.serving()
        forecaster.stop_heartbeat()  # a clean stop drops the note at once
        forecaster.forget()
        assert not forecaster.serving()
        settings.KQ_FORECAST_QUEUE = ""  # no forecast queue: the cycles always forecast
        forecaster.beat()
        forecaster.forget()
        assert not forecaster.serving()
    finally:
        forecaster.stop_heartbeat()
        cache.clear()
        forecaster.forget()
