"""Finding a workload by name, and saying where it stands."""

from __future__ import annotations

from typing import Any

from kq.client import Client
from kq.errors import Exit, KqError
from kq.output import clock, relative

FINISHED = frozenset({"Succeeded", "Failed", "Cancelled"})
WAITING = frozenset({"Pending", "Backoff", "Preempted"})


def find(client: Client, ref: str, namespace: str | None = None) -> dict[str, Any]:
    """The workload ``ref`` names: an id (all digits) or a name (in ``namespace``).

    Names are unique among live workloads of a namespace; a finished one may share its
    name with a newer one. So: the live match if there is one, else the newest finished
    one; more than one live match (several namespaces) is ambiguous.
    """
    if ref.isdigit():
        return dict(client.get("workloads", int(ref)))
    params: dict[str, Any] = {"name": ref, "ordering": "-id"}
    if namespace:
        params["namespace"] = namespace
    found = list(client.pages("workloads", params=params, limit=100))
    if not found:
        where = f" in namespace {namespace}" if namespace else ""
        raise KqError(f"No workload named {ref!r}{where} that you can see.", Exit.NOT_FOUND)
    live = [w for w in found if w["phase"] not in FINISHED]
    candidates = live or found[:1]
    if len(candidates) > 1:
        listed = ", ".join(f"{w['id']} ({w['namespace']})" for w in candidates)
        raise KqError(
            f"{len(candidates)} live workloads are named {ref!r}: {listed}. "
            "Give --namespace or the id.",
            Exit.AMBIGUOUS,
        )
    # The list row lacks the explanation; the detail has it.
    return dict(client.get("workloads", candidates[0]["id"]))


def where(workload: dict[str, Any]) -> str:
    """One line: where the workload stands and when it should start."""
    phase = workload["phase"]
    name = f"{workload['name']} ({workload['namespace']}, #{workload['id']})"
    if phase in WAITING:
        position = workload.get("position")
        place = (
            f"position {position} in queue {workload['queue']}"
            if position
            else (f"not ranked yet in queue {workload['queue']}")
        )
        if workload.get("eta_p50"):
            start = (
                f"expected to start {relative(workload['eta_p50'])} ({clock(workload['eta_p50'])}), "
                f"90% likely by {clock(workload.get('eta_p90'))}"
            )
        else:
            start = "no start time forecast yet"
        return f"{name}: {phase}, {place}; {start}."
    if phase in ("Admitted", "Running"):
        since = workload.get("started_at") or workload.get("admitted_at")
        return f"{name}: {phase} since {clock(since)} ({relative(since)})."
    return f"{name}: {phase} at {clock(workload.get('finished_at'))}."
