"""What moving workloads costs the process: `make bench BENCH=transitions_500`.

500 admissions of one kind (the cycle's apply: per-row assignment, wait and message, the
shared admission time, ``attempts + 1``) and 500 sync finishes (Running -> Succeeded, each
with its own finish time), on PostgreSQL (a scratch database on ``DATABASE_URL``'s server
or 127.0.0.1:5432), through:

- ``before``: what the cycle and the sync did until the one transition function
  (``queueing.actions.transitions``): apply's ``move`` (a locked read, then Django's
  ``bulk_update``, which builds a CASE WHEN per row and per field) and the sync's
  ``transition_many`` (a locked read, then one conditional UPDATE per workload), both kept
  here verbatim as the reference;
- ``after``: ``transitions.transition_many`` (one UPDATE ... FROM (VALUES ...) per kind).

Each is the median of ``ROUNDS`` runs; the rows go back to where they started between
runs (not measured). Figures: process CPU ms (what py-spy's profile of the worker
counts), wall ms, statements sent. Wall depends on the machine's load (reported).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

N = 500
ROUNDS = 7


def _before_move(moves: list[Any], now: Any) -> int:
    """apply.move() before the one transition function (verbatim, minus the dataclass)."""
    from queueing.models import Workload, WorkloadEvent

    current = dict(
        Workload.objects.select_for_update()
        .filter(id__in=[c.workload_id for c in moves])
        .values_list("id", "phase")
    )
    groups: dict[tuple[str, tuple[str, ...]], list[Workload]] = {}
    events_ = []
    for change in moves:
        from_phase = current.get(change.workload_id)
        if from_phase is None or from_phase not in change.expect:
            continue
        current[change.workload_id] = change.to_phase
        row = Workload(id=change.workload_id, phase=change.to_phase, updated_at=now)
        for name, value in change.fields.items():
            setattr(row, name, value)
        names = ("phase", "updated_at", *sorted(change.fields))
        groups.setdefault((change.to_phase, names), []).append(row)
        events_.append(
            WorkloadEvent(
                workload_id=change.workload_id,
                at=now,
                from_phase=from_phase,
                to_phase=change.to_phase,
                reason=change.reason,
                message=change.message,
            )
        )
    for (_, names), rows in groups.items():
        Workload.objects.bulk_update(rows, list(names))
    WorkloadEvent.objects.bulk_create(events_)
    return len(events_)


def _before_transition_many(moves: list[Any], workloads: dict[int, Any], now: Any) -> int:
    """actions.transition_many() before the one transition function (verbatim)."""
    from django.db import transaction

    from queueing import events
    from queueing.actions.transitions import clear_for
    from queueing.models import Workload, WorkloadEvent

    made = []
    with transaction.atomic():
        current = dict(
            Workload.objects.select_for_update()
            .filter(pk__in=[m.workload_id for m in moves])
            .values_list("id", "phase")
        )
        for move in moves:
            from_phase = current.get(move.workload_id, "")
            if from_phase not in move.expect:
                continue
            fields = dict(move.fields)
            clear_for(move.to_phase, fields, move.message or move.reason)
            updated = Workload.objects.filter(pk=move.workload_id, phase=from_phase).update(
                phase=move.to_phase, updated_at=now, **fields
            )
            if updated == 1:
                current[move.workload_id] = move.to_phase
                made.append((move, from_phase))
        WorkloadEvent.objects.bulk_create(
            WorkloadEvent(
                workload_id=move.workload_id,
                at=now,
                from_phase=from_phase,
                to_phase=move.to_phase,
                reason=move.reason,
                message=move.message,
            )
            for move, from_phase in made
        )
        events.notify_changes(
            (workloads[m.workload_id].tenant_id, workloads[m.workload_id].queue_id, m.workload_id)
            for m, _ in made
        )
    return len(made)


def child() -> dict[str, Any]:
    """Runs with DJANGO_SETTINGS_MODULE and DATABASE_URL set (a scratch database)."""
    import django

    django.setup()
    from datetime import timedelta

    from django.core.management import call_command
    from django.db import connection, transaction
    from django.db.models import F
    from django.utils import timezone

    from queueing import actions
    from queueing.actions import Actor
    from queueing.actions.transitions import Move, transition_many
    from queueing.choices import WAITING_PHASES, Phase
    from queueing.models import Workload, WorkloadEvent

    call_command("migrate", verbosity=0)
    system = Actor.system()
    root = actions.create_quota(
        system, name="root", tenant=None, parent=None, min={"cpu": "1000"}, max={"cpu": "1000"}
    )
    tenant = actions.create_tenant(system, name="bench")
    quota = actions.create_quota(
        system,
        name="bench-q",
        tenant=tenant,
        parent=root,
        min={"cpu": "1000"},
        max={"cpu": "1000"},
        namespaces=["bench"],
    )
    now = timezone.now()
    rows = Workload.objects.bulk_create(
        Workload(
            tenant=tenant,
            quota=quota,
            queue=quota.default_queue,
            name=f"w{i}",
            namespace="bench",
            pod_sets=[{"name": "main", "count": 1, "requests": {"cpu": 1000}}],
            total_request={"cpu": 1000},
            queue_order_at=now - timedelta(seconds=i),
            position=i + 1,
        )
        for i in range(N)
    )
    ids = [w.pk for w in rows]
    workloads = {w.pk: w for w in rows}

    def admissions() -> list[Move]:
        return [
            Move(
                wid,
                Phase.ADMITTED,
                tuple(WAITING_PHASES),
                "Admitted",
                f"Placed on node-{wid % 40}.",
                {
                    "admitted_at": now,
                    "wait_s": float(i),
                    "assignment": {f"node-{wid % 40}": {"cpu": 1000}},
                    "pool": "",
                    "attempts": F("attempts") + 1,
                    "requeue_at": None,
                    "nominated": False,
                    "position": None,
                    "global_position": None,
                    "eta_p50": None,
                    "eta_p90": None,
                    "eta": None,
                    "explanation": None,
                    "reason": "Admitted: within quota and placed on nodes.",
                },
                kind="admitted",
            )
            for i, wid in enumerate(ids)
        ]

    def finishes() -> list[Move]:
        return [
            Move(
                wid,
                Phase.SUCCEEDED,
                (Phase.RUNNING,),
                "Finished",
                "",
                {"finished_at": now + timedelta(milliseconds=i), "started_at": now},
            )
            for i, wid in enumerate(ids)
        ]

    def reset(phase: str) -> None:
        Workload.objects.filter(id__in=ids).update(phase=phase, attempts=0)
        WorkloadEvent.objects.all().delete()

    def measure(prepare: Callable[[], None], run: Callable[[], int]) -> dict[str, Any]:
        cpu, wall, statements = [], [], 0
        count = [0]

        def counter(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            count[0] += 1
            return execute(sql, params, many, context)

        for _ in range(ROUNDS):
            prepare()
            count[0] = 0
            with connection.execute_wrapper(counter):
                c0, w0 = time.process_time(), time.perf_counter()
                with transaction.atomic():
                    moved = run()
                c1, w1 = time.process_time(), time.perf_counter()
            assert moved == N, moved
            cpu.append((c1 - c0) * 1000)
            wall.append((w1 - w0) * 1000)
            statements = count[0]
        return {
            "cpu_ms": round(statistics.median(cpu), 1),
            "wall_ms": round(statistics.median(wall), 1),
            "statements": statements,
        }

    def after(moves: Callable[[], list[Move]], publish: bool) -> Callable[[], int]:
        return lambda: len(transition_many(moves(), at=now, publish_changes=publish).made)

    out: dict[str, Any] = {"workloads": N, "rounds": ROUNDS, "vendor": connection.vendor}
    out["admissions_before"] = measure(
        lambda: reset(Phase.PENDING), lambda: _before_move(admissions(), now)
    )
    out["admissions_after"] = measure(lambda: reset(Phase.PENDING), after(admissions, False))
    out["finishes_before"] = measure(
        lambda: reset(Phase.RUNNING), lambda: _before_transition_many(finishes(), workloads, now)
    )
    out["finishes_after"] = measure(lambda: reset(Phase.RUNNING), after(finishes, True))
    return out


def transitions_500() -> dict[str, Any]:
    from tests.bench.bench_api import drop_database, scratch_database
    from tests.services import PYTHON, ROOT

    base = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres"
    url = scratch_database(base, f"kq_bench_transitions_{os.getpid()}")
    try:
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "KQ_WAKE": "0",
        }
        env.pop("REDIS_URL", None)  # the in-process channel layer: no Redis needed
        done = subprocess.run(
            [PYTHON, "-m", "tests.bench.bench_transitions"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        drop_database(url)
    result["load_avg_1m"] = round(os.getloadavg()[0], 2)
    return result


BENCHMARKS = {"transitions_500": transitions_500}


if __name__ == "__main__":
    sys.stdout.write(json.dumps(child()) + "\n")
