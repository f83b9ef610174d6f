"""Work within its quota's min passes an aged Priority head that holds the quota.

An aged head of a Priority queue short of quota holds its quota's room in its queue
(``Cycle.hold_aged``): the work of its quota behind it waits. Work that fits within the
quota's guaranteed min waited too, leaving the min unused (the live demo saw it for
30 s, nlp-research). It now goes on while the head still fits under its quota's max
with it admitted -- what the head waits for stays there for it -- and waits otherwise.

One cycle, one node of 24 cpu. Quota ``team`` (min 8, max 24 or less) runs 4 cpu;
its sibling ``other`` (min 8) borrows 12. The aged head asks 14 cpu: its claim takes
``team`` to 16 cpu (all the root has beyond ``other``'s min), 4 + 14 > 16, so it is
short of quota and holds. Behind it, fresh work of ``team``.
"""

from __future__ import annotations

from queueing.engine import run_cycle
from queueing.engine.holds import room_under_min, within_room
from queueing.engine.types import CycleResult, QueueSpec
from tests.engine.builders import node, quota, running, snapshot, workload

CPU = 1000
NOW = 10_000.0
HEAD = 10


def cycle(team_max: int, behind_cpu: int) -> CycleResult:
    quotas = [
        quota("org"),
        quota("team", "org", min={"cpu": 8 * CPU}, max={"cpu": team_max * CPU}),
        quota("other", "org", min={"cpu": 8 * CPU}),
    ]
    # No victim search: the head holds (it does not preempt), as when nothing is
    # borrowed on its nodes.
    queues = [
        QueueSpec("team", aging_bound_s=60.0, reclaim="Never", preempt_within_quota="Never"),
        QueueSpec("other"),
    ]
    workloads = [
        # (Started 10 s ago, ending within 10 minutes: the head's bound is known.)
        running(
            1,
            "team",
            "n1",
            req={"cpu": 4 * CPU},
            admitted_at=NOW - 10.0,
            started_at=NOW - 10.0,
            expected_runtime_s=600.0,
        ),
        running(
            2,
            "other",
            "n1",
            req={"cpu": 12 * CPU},
            admitted_at=NOW - 10.0,
            started_at=NOW - 10.0,
            expected_runtime_s=600.0,
        ),
        # Aged: queued 1,000 s ago under a 60 s bound.
        workload(HEAD, "team", req={"cpu": 14 * CPU}, priority=0, ts=NOW - 1000.0),
        # Fresh, behind it in the queue's order.
        workload(11, "team", req={"cpu": behind_cpu * CPU}, priority=5, ts=NOW - 5.0),
    ]
    snap = snapshot(
        quotas=quotas,
        nodes=[node("n1", {"cpu": 24 * CPU})],
        workloads=workloads,
        queues=queues,
        now=NOW,
    )
    return run_cycle(snap, forecast=False)


def admitted(result: CycleResult) -> set[int]:
    return {a.workload_id for a in result.admissions}


def test_the_head_is_short_of_quota_and_holds() -> None:
    result = cycle(team_max=24, behind_cpu=6)
    assert HEAD not in admitted(result)
    assert result.explanations[HEAD].kind == "quota"
    # 4 + 6 > min 8: beyond the min, it waits for the head.
    behind = result.explanations[11]
    assert behind.kind == "policy-blocked"
    assert behind.blocked_by == HEAD
    assert behind.limit == "aged"


def test_work_within_the_min_goes_on_while_the_head_fits_under_its_max() -> None:
    # 4 + 2 <= min 8, and 4 + 2 + 14 <= max 24: the head's room stays.
    result = cycle(team_max=24, behind_cpu=2)
    assert admitted(result) == {11}
    assert result.explanations[HEAD].kind == "quota"
    assert result.explanations[HEAD].starts_by is not None


def test_work_within_the_min_waits_when_the_head_would_not_fit_under_its_max() -> None:
    # 4 + 2 + 14 > max 19: admitting it would take the room the head waits for.
    result = cycle(team_max=19, behind_cpu=2)
    assert admitted(result) == set()
    assert result.explanations[11].kind == "policy-blocked"
    assert result.explanations[11].blocked_by == HEAD


def test_within_room_asks_some_resource_of_the_min_and_none_beyond() -> None:
    room = room_under_min({"cpu": 6 * CPU}, {"cpu": 8 * CPU, "memory": 0})
    assert room == {"cpu": 2 * CPU}  # (a min of 0 names nothing)
    assert within_room({"cpu": 2 * CPU, "memory": 10}, room)
    assert not within_room({"cpu": 2 * CPU + 1}, room)
    assert not within_room({"memory": 10}, room)  # nothing it asks is in the min
    assert not within_room({}, room)
