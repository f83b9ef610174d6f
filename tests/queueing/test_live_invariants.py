"""Issue 11, item 7: the quota invariants hold in the cluster-facing cycle itself -- full
cycles, heads-only cycles (``state.HEAD_ROWS``, the rest as unlisted demand) and cycles
fed by the in-memory world (incremental reads) -- over a sequence of cycles in which a
borrowing tenant meets a sibling whose demand reaches its guaranteed minimum."""

from __future__ import annotations

import pytest

from queueing import admission, state
from queueing.admission import tick
from queueing.engine.invariants import check_cycle
from queueing.models import CycleRun
from tests import builders
from tests.builders import submit

pytestmark = pytest.mark.django_db


def test_every_kind_of_cluster_facing_cycle_keeps_the_quota_invariants(
    world, monkeypatch, settings
):
    assert settings.KQ_WORLD  # the cycles read the in-memory world (incremental)
    b_quota = builders.tenant_quota(world, "team-b", min={"cpu": "8"}, max={"cpu": "16"})
    # Every other cycle heads-only, listing two rows per queue.
    monkeypatch.setattr(state, "HEAD_ROWS", 2)
    turn = {"n": 0}

    def alternate(root: str) -> bool:
        turn["n"] += 1
        return turn["n"] % 2 == 1

    monkeypatch.setattr(state, "full_cycle_due", alternate)
    seen: list[tuple[bool, dict[str, int], dict[str, int], list[str]]] = []

    def spy(snapshot, result):  # type: ignore[no-untyped-def]
        broken = check_cycle(snapshot, result)
        b_demand = dict(result.demand.get("team-b-q", {}))
        b_runtime = dict(result.runtime_quota.get("team-b-q", {}))
        seen.append((bool(snapshot.unlisted_demand), b_demand, b_runtime, broken))
        return broken

    monkeypatch.setattr(admission, "check_cycle", spy)
    # team-a borrows the whole cluster with long jobs; team-b arrives with more than its
    # min of work, then both keep submitting while work ends.
    for i in range(12):
        submit(world, f"a{i}", cpu="2", runtime=120)
    for step in range(16):
        if step == 2:
            for i in range(8):
                submit(world, f"b{i}", cpu="2", runtime=90, quota=b_quota)
        if step % 4 == 3:
            submit(world, f"a-late{step}", cpu="2", runtime=120)
            submit(world, f"b-late{step}", cpu="2", runtime=90, quota=b_quota)
        tick(cluster=world.cluster, now=world.clock.advance(15))
    assert len(seen) == 16
    assert [broken for *_, broken in seen] == [[]] * 16
    assert not any(
        e.startswith("invariant:")
        for errs in CycleRun.objects.values_list("errors", flat=True)
        for e in errs
    )
    # Positive controls: heads-only cycles with unlisted demand ran, and team-b's demand
    # reached its min in cycles of both kinds -- where it got at least its min.
    heads_only = [s for s in seen if s[0]]
    assert heads_only
    assert len(heads_only) < len(seen)
    at_min = [s for s in seen if s[1].get("cpu", 0) >= 8000]
    assert {s[0] for s in at_min} == {True, False}
    assert all(s[2].get("cpu", 0) >= 8000 for s in at_min)
