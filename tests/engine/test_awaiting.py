"""A head that only finishing-soon work stands in front of waits for it, holding the room."""

from __future__ import annotations

import dataclasses

from queueing.engine import run_cycle
from queueing.engine.types import EngineConfig, QueueSpec, Snapshot, Taint, WorkloadSpec

from .builders import node, quota, running, snapshot, workload

GRACE = EngineConfig(fair_share_mode="instant", preempt_grace_s=60.0)
TAINT = Taint("dedicated", "gpu", "NoSchedule")


def one(cpu: int) -> dict[str, int]:
    return {"cpu": cpu * 1000}


def world(
    pending: list[WorkloadSpec], *, runtime_s: float = 10.0, started_at: float = 995.0
) -> Snapshot:
    # Quota of 4 cpu; a low-priority job holds 3 and is expected to end within the grace.
    return snapshot(
        quotas=[quota("root"), quota("q0", "root", min=one(4), max=one(4))],
        nodes=[node("n", one(4))],
        queues=[QueueSpec("q0", preempt_within_quota="LowerPriority")],
        workloads=[
            running(
                1,
                "q0",
                "n",
                req=one(3),
                priority=1,
                started_at=started_at,
                expected_runtime_s=runtime_s,
            ),
            *pending,
        ],
        config=GRACE,
    )


def test_head_waits_for_finishing_work_and_lower_priority_cannot_take_the_room() -> None:
    big = workload(2, "q0", req=one(4), priority=9, ts=1.0)
    small = workload(3, "q0", req=one(1), priority=1, ts=2.0)
    result = run_cycle(world([big, small]), forecast=False)
    assert result.preemptions == ()  # ends within the grace: not evicted
    assert result.admissions == ()  # the free cpu is held for the head
    assert result.nominations == (2,)
    assert result.explanations[3].kind != "preempting"
    # The free cpu is kept for the head: the result says so, by node.
    assert [(h.node, h.workload_id, h.kind, h.resources.to_dict()) for h in result.holds] == [
        ("n", 2, "reservation", {"cpu": 1000})
    ]
    # Positive control: without the head, the small one takes the free cpu.
    alone = run_cycle(world([small]), forecast=False)
    assert [a.workload_id for a in alone.admissions] == [3]


def test_work_that_runs_long_is_evicted_instead() -> None:
    big = workload(2, "q0", req=one(4), priority=9, ts=1.0)
    result = run_cycle(world([big], runtime_s=3600.0), forecast=False)
    assert [(p.victim_id, p.preemptor_id) for p in result.preemptions] == [(1, 2)]


def test_work_overrunning_its_expected_end_is_awaited_only_for_a_bounded_margin() -> None:
    # w1 declared 10 s and started 10 + x s ago (now 1000): it overran by x s. Within
    # the grace period (60 s) of its end it is still about to end; past that it is not:
    # before, it counted as "finishing soon" for as long as it overran, and the head
    # waited for it for ever.
    big = workload(2, "q0", req=one(4), priority=9, ts=1.0)
    for overrun, awaited in ((1.0, True), (59.0, True), (61.0, False), (3600.0, False)):
        started = 1000.0 - 10.0 - overrun
        result = run_cycle(world([big], started_at=started), forecast=False)
        evicted = [(p.victim_id, p.preemptor_id) for p in result.preemptions]
        assert evicted == ([] if awaited else [(1, 2)]), overrun
        e = result.explanations[2]
        assert e.limit == ("finishing" if awaited else "evicting"), overrun
        if awaited:
            # Awaited until its expected end (started + 10) plus the grace period.
            assert e.awaited_until == 1000.0 - overrun + 60.0


def test_the_head_says_what_it_awaits_and_until_when() -> None:
    big = workload(2, "q0", req=one(4), priority=9, ts=1.0)
    result = run_cycle(world([big], runtime_s=30.0), forecast=False)
    e = result.explanations[2]
    # Expected to end at 995 + 30 = 1025; awaited until 1025 + 60.
    assert (e.limit, e.victim_names, e.awaited_until) == ("finishing", ("w1",), 1085.0)
    assert e.sentence() == (
        "Waiting for w1 to finish (expected within the preemption grace period: awaited "
        "until 1970-01-01 00:18:05 UTC, then evicted if still running); the capacity "
        "released is reserved for this workload."
    )
    assert e.to_dict()["awaited_until"] == 1085.0


def test_once_the_work_finished_the_waiting_head_is_admitted_first() -> None:
    big = workload(2, "q0", req=one(4), priority=9, ts=1.0, nominated=True)
    small = workload(3, "q0", req=one(1), priority=1, ts=2.0)
    snap = snapshot(
        quotas=[quota("root"), quota("q0", "root", min=one(4), max=one(4))],
        nodes=[node("n", one(4))],
        queues=[QueueSpec("q0", preempt_within_quota="LowerPriority")],
        workloads=[big, small],
        config=GRACE,
    )
    result = run_cycle(snap, forecast=False)
    assert [a.workload_id for a in result.admissions] == [2]


# -- what the waiting head reads (issue 11: "Waiting for 0 workloads (preempted)") ---------


def test_the_head_names_the_work_it_waits_to_finish_in_every_cycle() -> None:
    # The cycle that chose to wait, and the next one (the head nominated, the work
    # still running): it waits for w1 to finish, which no one evicts.
    for nominated in (False, True):
        big = workload(2, "q0", req=one(4), priority=9, ts=1.0, nominated=nominated)
        result = run_cycle(world([big]))
        assert result.preemptions == ()
        e = result.explanations[2]
        assert (e.kind, e.limit, e.victims, e.victim_names) == (
            "preempting",
            "finishing",
            (1,),
            ("w1",),
        )
        assert e.sentence().startswith("Waiting for w1 to finish"), e.sentence()
        assert "0 workloads" not in e.sentence()
        assert "preempted" not in e.sentence()


def test_the_head_names_the_victims_still_being_evicted_in_later_cycles() -> None:
    big = workload(2, "q0", req=one(4), priority=9, ts=1.0)
    first = run_cycle(world([big], runtime_s=3600.0))
    assert first.explanations[2].victim_names == ("w1",)
    assert first.explanations[2].limit == "evicting"
    # The next cycle: the victim is Preempted for it (releasing), the head nominated.
    later = snapshot(
        quotas=[quota("root"), quota("q0", "root", min=one(4), max=one(4))],
        nodes=[node("n", one(4))],
        queues=[QueueSpec("q0", preempt_within_quota="LowerPriority")],
        workloads=[
            running(
                1,
                "q0",
                "n",
                req=one(3),
                priority=1,
                started_at=995.0,
                expected_runtime_s=3600.0,
                phase="Preempted",
                preempted_by=2,
            ),
            workload(2, "q0", req=one(4), priority=9, ts=1.0, nominated=True),
        ],
        config=GRACE,
    )
    result = run_cycle(later)
    assert result.admissions == ()
    assert result.preemptions == ()
    e = result.explanations[2]
    assert (e.kind, e.limit, e.victims, e.victim_names) == ("preempting", "evicting", (1,), ("w1",))
    assert e.sentence() == (
        "Waiting for w1 (preempted for it) to release its capacity; "
        "it is reserved for this workload."
    )


# -- the ETA beside aging's bound ----------------------------------------------------------


def test_an_eta_is_never_later_than_the_aging_bound_its_explanation_states() -> None:
    from queueing.engine.eta_bounds import bound_etas
    from queueing.engine.types import Eta, Explanation

    bounded = Explanation(1, "quota", starts_by=100.0)
    explanations = {
        1: bounded,
        2: bounded._replace(workload_id=2),
        3: bounded._replace(workload_id=3),
        4: Explanation(4, "quota"),
        5: bounded._replace(workload_id=5),
    }
    etas = {
        1: Eta(80.0, 130.0, moved="later", delta_s=7.0),  # p90 past the bound
        2: Eta(120.0, 150.0),  # both past it, the simulation's own start too
        5: Eta(120.0, 150.0, forecast=95.0),  # the simulation's start is within it
        3: Eta(60.0, 90.0),  # within it
        4: Eta(200.0, 300.0),  # no bound stated
    }
    assert bound_etas(explanations, etas) == 3
    assert (etas[1].p50, etas[1].p90, etas[1].moved, etas[1].delta_s) == (80.0, 100.0, "later", 7.0)
    assert (etas[2].p50, etas[2].p90) == (100.0, 100.0)
    assert (etas[3].p50, etas[3].p90) == (60.0, 90.0)
    assert (etas[5].p50, etas[5].p90) == (95.0, 100.0)
    assert (etas[4].p50, etas[4].p90) == (200.0, 300.0)


def test_work_blocked_behind_an_awaiting_head_reads_until_when() -> None:
    snap = snapshot(
        quotas=[quota("root"), quota("q0", "root", min=one(4), max=one(4))],
        nodes=[node("n", one(4))],
        queues=[QueueSpec("q0", policy="Block", preempt_within_quota="LowerPriority")],
        workloads=[
            running(
                1, "q0", "n", req=one(3), priority=1, started_at=995.0, expected_runtime_s=30.0
            ),
            workload(2, "q0", req=one(4), priority=9, ts=1.0),
            workload(3, "q0", req=one(1), priority=1, ts=2.0),
        ],
        config=GRACE,
    )
    result = run_cycle(snap, forecast=False)
    assert result.explanations[2].limit == "finishing"
    behind = result.explanations[3]
    assert behind.kind == "policy-blocked"
    assert (
        "it waits for the workloads it would preempt to finish (evicted if still running at "
        "1970-01-01 00:18:05 UTC)"
    ) in behind.sentence()


def test_a_head_awaiting_finishing_work_freezes_no_aged_claim_elsewhere() -> None:
    # q0's head awaits q0's own job, which ends within the grace period: nothing is
    # evicted for it, and its search is made again every cycle. q1's head has waited
    # past its aging bound and claims 6 cpu, which water-filling alone (4 each to q1
    # and q2 of the 8 idle above q0's min) does not give it. A preemptor whose victims
    # were evicted and are gone freezes every claim of its tree until it is admitted
    # (else a victim back in its queue, aged, would claim its room back: ping-pong);
    # one that awaits froze them too, for as long as it waited (in a replayed live run
    # for up to a minute at a time; the demo's aged 128-cpu gangs waited up to 1,077 s).
    def q1_runtime(**head: bool) -> int:
        snap = snapshot(
            quotas=[
                quota("root", max=one(12)),
                quota("q0", "root", min=one(4), max=one(4)),
                quota("q1", "root", max=one(8)),
                quota("q2", "root", max=one(8)),
            ],
            nodes=[node("n", one(12))],
            queues=[
                QueueSpec("q0", preempt_within_quota="LowerPriority"),
                QueueSpec("q1", aging_bound_s=300.0),
                QueueSpec("q2"),
            ],
            workloads=[
                running(
                    1, "q0", "n", req=one(3), priority=1, started_at=995.0, expected_runtime_s=10.0
                ),
                workload(2, "q0", req=one(4), priority=9, ts=990.0, **head),
                workload(3, "q1", req=one(6), ts=100.0),  # waited 900 s: aged
                # (4 cpu: q2 uses its share, so nothing of it is lent: lending.py)
                workload(4, "q2", req=one(4), ts=999.0),
            ],
            config=GRACE,
        )
        result = run_cycle(snap, forecast=False)
        assert result.preemptions == ()
        assert result.explanations[2].limit == "finishing"
        assert result.nominations == (2,)
        assert result.awaiting == (2,)  # fed back as WorkloadSpec.awaiting
        return result.runtime_quota["q1"].get("cpu")

    assert q1_runtime() == 6000  # its claim served
    assert q1_runtime(nominated=True, awaiting=True) == 6000
    # Positive control: a preemptor whose victims are gone freezes the claim.
    assert q1_runtime(nominated=True) == 4000


def test_work_behind_a_preemptor_awaiting_its_victims_is_forecast_after_it_not_now() -> None:
    # The cycle holds the free cpu for the head while w1 finishes (first test above);
    # the forecast holds it too. It gave the room back to the small job at once: "in
    # 0 s" beside "short by 1 cpu" for as long as the head waited (the demo: a 1-GPU
    # job read "now" for a minute), and then the head, in the forecast, waited for it.
    big = workload(2, "q0", req=one(4), priority=9, ts=1.0, expected_runtime_s=50.0)
    small = workload(3, "q0", req=one(1), priority=1, ts=2.0, expected_runtime_s=30.0)
    result = run_cycle(world([big, small]))
    assert result.admissions == ()
    assert result.explanations[3].kind == "quota"
    big_at, small_at = result.etas[2].p50, result.etas[3].p50
    assert big_at is not None
    assert small_at is not None
    # The head starts when w1 ends (started 995, 10 s), the small job when the head's
    # 50 s are over: the whole of q0's 4 cpu is the head's until then.
    assert big_at == 1005.0
    assert small_at >= big_at + 50.0


def test_room_an_awaited_victim_frees_stays_its_preemptors_until_the_last_one_ends() -> None:
    # The head awaits two victims (1 cpu until 1005, 2 cpu until 1025). When the first
    # ends, the cycle keeps its cpu for the head (it reserves all it needs beyond the
    # victims still running), so the small job waits for the head's run. The forecast
    # gave that cpu to the small job at 1005, and then started the head only when the
    # small job's 30 s were over.
    def at(now: float, first_gone: bool, pending: list[WorkloadSpec]) -> Snapshot:
        v1 = running(
            1, "q0", "n", req=one(1), priority=1, started_at=995.0, expected_runtime_s=10.0
        )
        v2 = running(
            4, "q0", "n", req=one(2), priority=1, started_at=995.0, expected_runtime_s=30.0
        )
        keep = running(
            5, "q0", "n", req=one(1), priority=9, started_at=995.0, expected_runtime_s=500.0
        )
        return snapshot(
            quotas=[quota("root"), quota("q0", "root", min=one(4), max=one(4))],
            nodes=[node("n", one(4))],
            queues=[QueueSpec("q0", preempt_within_quota="LowerPriority")],
            workloads=[*([] if first_gone else [v1]), v2, keep, *pending],
            config=GRACE,
            now=now,
        )

    big = workload(2, "q0", req=one(3), priority=9, ts=1.0, expected_runtime_s=50.0)
    small = workload(3, "q0", req=one(1), priority=1, ts=2.0, expected_runtime_s=30.0)
    first = run_cycle(at(1000.0, False, [big, small]))
    assert first.preemptions == ()
    assert first.nominations == (2,)
    # What the cycle does when the first victim is gone: the small job still waits.
    nominated = dataclasses.replace(big, nominated=True, awaiting=True)
    then = run_cycle(at(1005.0, True, [nominated, small]), forecast=False)
    assert then.admissions == ()
    assert then.nominations == (2,)
    # The forecast made at 1000 says so.
    big_at, small_at = first.etas[2].p50, first.etas[3].p50
    assert big_at == 1025.0
    assert small_at is not None
    assert small_at >= big_at + 50.0


def test_a_workload_whose_victim_search_went_to_another_does_not_await_in_the_forecast() -> None:
    # Node n (4 cpu): k (priority 9) and v (priority 1, ends at 1010) hold 2 cpu each;
    # a tainted node nobody tolerates makes the quotas roomy. Queue q's a needs 4 cpu
    # and cannot preempt k: it uses the queue's one victim search of this cycle, and b,
    # which could await v, gets none. Queue r goes first (priority 10): when v ends, its
    # room is c's. The forecast let b search at the same instant, await v and hold its
    # room as v ended: c was forecast 900 s late.
    snap = snapshot(
        quotas=[
            quota("root"),
            quota("q", "root", max=one(4)),
            quota("r", "root", max=one(4)),
        ],
        nodes=[node("n", one(4)), node("t", one(8), taints=[TAINT])],
        queues=[
            QueueSpec("q", preempt_within_quota="LowerPriority"),
            QueueSpec("r", priority=10, preempt_within_quota="Never", reclaim="Never"),
        ],
        workloads=[
            running(
                1, "q", "n", req=one(2), priority=9, started_at=990.0, expected_runtime_s=900.0
            ),
            running(2, "q", "n", req=one(2), priority=1, started_at=990.0, expected_runtime_s=20.0),
            workload(3, "q", req=one(4), priority=9, ts=997.0, expected_runtime_s=100.0),
            workload(4, "q", req=one(2), priority=5, ts=998.0, expected_runtime_s=100.0),
            workload(5, "r", req=one(2), priority=0, ts=999.0, expected_runtime_s=100.0),
        ],
        config=GRACE,
    )
    result = run_cycle(snap)
    assert result.nominations == ()  # nobody awaits v in the cycle
    assert "went to another workload" in result.explanations[4].sentence()
    # What the cycle does when v is gone: r's c takes its room.
    then = dataclasses.replace(
        snap, now=1010.0, workloads=tuple(w for w in snap.workloads if w.id != 2)
    )
    assert [a.workload_id for a in run_cycle(then, forecast=False).admissions] == [5]
    # The forecast says so.
    assert result.etas[5].p50 == 1010.0
    assert result.etas[4].p50 is not None
    assert result.etas[4].p50 > 1010.0
