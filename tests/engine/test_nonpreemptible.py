"""koord-queue's non-preemptible jobs (``quota.scheduling.koordinator.sh/preemptible:
"false"``): admitted only within their quota's min, counting the quota's other
non-preemptible holdings; never chosen as victims. The default is unchanged."""

from __future__ import annotations

import dataclasses

from queueing.engine import run_cycle
from queueing.engine.holds import nonpreemptible_short
from queueing.engine.types import EngineConfig, Snapshot, WorkloadSpec

from .builders import node, quota, running, snapshot, workload

NOW = 1000.0


def one(cpu: int) -> dict[str, int]:
    return {"cpu": cpu * 1000}


def np(w: WorkloadSpec) -> WorkloadSpec:
    return dataclasses.replace(w, preemptible=False)


def borrow_world(*ws: WorkloadSpec) -> Snapshot:
    # A: min 2, max 8; B: min 6, idle -- A may borrow up to 8 on the node of 8.
    return snapshot(
        quotas=[
            quota("root"),
            quota("A", "root", min=one(2), max=one(8)),
            quota("B", "root", min=one(6)),
        ],
        nodes=[node("n", one(8))],
        workloads=list(ws),
        now=NOW,
    )


def test_the_shared_rule() -> None:
    assert nonpreemptible_short({"cpu": 4}, {"cpu": 2}, {"cpu": 2}) == ""
    assert nonpreemptible_short({"cpu": 4}, {"cpu": 3}, {"cpu": 2}) == "cpu"
    # Only what the min names is bounded (Koordinator's quotav1.LessThanOrEqual).
    assert nonpreemptible_short({"cpu": 4}, {}, {"cpu": 1, "memory": 1}) == ""
    assert nonpreemptible_short({"cpu": 4, "memory": 0}, {}, {"cpu": 1, "memory": 1}) == "memory"


def test_a_non_preemptible_job_that_fits_max_but_not_min_waits_with_the_reason() -> None:
    result = run_cycle(borrow_world(np(workload(1, "A", req=one(4)))), forecast=False)
    assert result.admissions == ()
    assert result.preemptions == ()
    e = result.explanations[1]
    assert (e.kind, e.quota, e.limit) == ("quota", "A", "min")
    assert e.shortfall.raw == one(2)
    assert e.detail == (
        "non-preemptible: needs 4 cpu within min 2 cpu of quota A, "
        "A's non-preemptible work holds nothing"
    )
    assert "non-preemptible: needs 4 cpu within min 2 cpu" in e.sentence()
    # Positive control: the same job, preemptible (the default), borrows and runs.
    result = run_cycle(borrow_world(workload(1, "A", req=one(4))), forecast=False)
    assert [a.workload_id for a in result.admissions] == [1]


def test_within_min_it_is_admitted() -> None:
    result = run_cycle(borrow_world(np(workload(1, "A", req=one(2)))), forecast=False)
    assert [a.workload_id for a in result.admissions] == [1]


def test_the_quota_s_other_non_preemptible_holdings_count_preemptible_ones_do_not() -> None:
    held_np = np(running(1, "A", "n", req=one(1)))
    held_p = running(1, "A", "n", req=one(1))
    pending = np(workload(2, "A", req=one(2)))
    result = run_cycle(borrow_world(held_np, pending), forecast=False)
    assert result.admissions == ()
    assert result.explanations[2].detail.endswith("A's non-preemptible work holds 1 cpu")
    result = run_cycle(borrow_world(held_p, pending), forecast=False)
    assert [a.workload_id for a in result.admissions] == [2]


def test_admissions_in_one_cycle_count_against_the_min() -> None:
    ws = [workload(1, "A", req=one(2)), workload(2, "A", req=one(2))]
    result = run_cycle(borrow_world(*map(np, ws)), forecast=False)
    assert [a.workload_id for a in result.admissions] == [1]
    assert result.explanations[2].limit == "min"
    result = run_cycle(borrow_world(*ws), forecast=False)
    assert sorted(a.workload_id for a in result.admissions) == [1, 2]


def inqueue_world(*, np_ids: tuple[int, ...] = (), pending_np: bool = False) -> Snapshot:
    # q0: min = max = 4, full with two priority-1 jobs; a priority-5 job arrives.
    held = [
        running(1, "q0", "n", req=one(2), priority=1, admitted_at=10.0),
        running(2, "q0", "n", req=one(2), priority=1, admitted_at=20.0),
    ]
    held = [np(w) if w.id in np_ids else w for w in held]
    pending = workload(3, "q0", req=one(2), priority=5)
    return snapshot(
        quotas=[quota("root"), quota("q0", "root", min=one(4), max=one(4))],
        nodes=[node("n", one(4))],
        workloads=[*held, np(pending) if pending_np else pending],
        now=NOW,
    )


def victims(snap: Snapshot) -> list[int]:
    return [p.victim_id for p in run_cycle(snap, forecast=False).preemptions]


def test_a_non_preemptible_job_is_never_a_victim() -> None:
    assert victims(inqueue_world()) == [2]  # control: the newest of equal priority
    assert victims(inqueue_world(np_ids=(2,))) == [1]
    assert victims(inqueue_world(np_ids=(1, 2))) == []
    # Nor does the explanation's hint name them (control: with preemption off, the
    # hint names the preemptible ones).
    off = EngineConfig(fair_share_mode="instant", preemption=False)
    hint = run_cycle(dataclasses.replace(inqueue_world(), config=off), forecast=False)
    assert hint.explanations[3].kind == "quota"
    assert hint.explanations[3].victims != ()
    result = run_cycle(inqueue_world(np_ids=(1, 2)), forecast=False)
    assert result.explanations[3].kind == "quota"
    assert result.explanations[3].victims == ()


def test_a_non_preemptible_job_may_preempt_within_its_min() -> None:
    # Its min is 4 and no non-preemptible work holds any: it preempts like any other.
    assert victims(inqueue_world(pending_np=True)) == [2]


def test_beyond_its_min_a_non_preemptible_job_does_not_preempt() -> None:
    # 1 is non-preemptible (2 of the min of 4): the pending non-preemptible 3 asks 2
    # more -- within min, it preempts 2. With a min of 3 it may not, and waits.
    snap = inqueue_world(np_ids=(1,), pending_np=True)
    assert victims(snap) == [2]
    tight = dataclasses.replace(
        snap, quotas=(quota("root"), quota("q0", "root", min=one(3), max=one(4)))
    )
    result = run_cycle(tight, forecast=False)
    assert result.preemptions == ()
    assert result.explanations[3].limit == "min"
    assert result.explanations[3].detail == (
        "non-preemptible: needs 2 cpu within min 3 cpu of quota q0, "
        "q0's non-preemptible work holds 2 cpu"
    )


def test_the_eta_forecast_follows_the_same_rule() -> None:
    # q: min 4, no max, node of 16. Two non-preemptible 2-cpu jobs run, ending at t+10
    # and t+20. Non-preemptible 5, 6, 7 (2 cpu, 100 s) start as min allows: t+10,
    # t+20, then t+110 when 5 ends. Preemptible, all three start now.
    def world(pending_np: bool) -> Snapshot:
        held = [
            running(1, "q", "n", req=one(2), started_at=NOW, expected_runtime_s=10.0),
            running(2, "q", "n", req=one(2), started_at=NOW, expected_runtime_s=20.0),
        ]
        pend = [workload(i, "q", req=one(2), expected_runtime_s=100.0) for i in (5, 6, 7)]
        return snapshot(
            quotas=[quota("root"), quota("q", "root", min=one(4))],
            nodes=[node("n", one(16))],
            workloads=[*map(np, held), *(map(np, pend) if pending_np else pend)],
            now=NOW,
            config=EngineConfig(fair_share_mode="instant"),
        )

    result = run_cycle(world(True))
    assert result.admissions == ()
    etas = result.etas
    assert (etas[5].p50, etas[6].p50, etas[7].p50) == (NOW + 10, NOW + 20, NOW + 110)
    result = run_cycle(world(False))
    assert sorted(a.workload_id for a in result.admissions) == [5, 6, 7]
