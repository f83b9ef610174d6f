"""The quota trees that workloads belong to, named in SQL: the root of each workload's
quota, found by a recursive walk up the tree in the database.

What a commit journals and wakes (``world.record``, ``wake``) is per tree: the
statements that move or insert workloads name their trees in the same statement
(``roots_cte``), and ``roots_and_deciding`` reads them for ids written elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connection

from queueing.choices import Phase

# Quota trees are shallow; a deeper chain (or a cycle a bad edit left) is cut here.
MAX_TREE_DEPTH = 64


def roots_cte(quota_ids_sql: str, name: str = "kq_roots") -> str:
    """SQL of two common table expressions (inside ``WITH RECURSIVE``) ending in
    ``name(quota_id, root)``: the name of the root of each quota ``quota_ids_sql`` (a
    SELECT of one column) names, walked up the tree at most MAX_TREE_DEPTH steps. The
    statements that move or insert workloads name their trees with it, so what they
    journal and wake needs no read of its own (``events.notify_changes``)."""
    from queueing.models import Quota

    q = connection.ops.quote_name
    quotas = q(Quota._meta.db_table)
    up = f"{name}_up"
    return (
        f"{up}(quota_id, parent, root, depth) AS ("  # noqa: S608 - identifiers from meta
        f"SELECT t.{q('id')}, t.{q('parent_id')}, t.{q('name')}, 0 FROM {quotas} t"
        f" WHERE t.{q('id')} IN ({quota_ids_sql})"
        f" UNION ALL SELECT u.quota_id, t.{q('parent_id')}, t.{q('name')}, u.depth + 1"
        f" FROM {up} u JOIN {quotas} t ON t.{q('id')} = u.parent"
        f" WHERE u.depth < {int(MAX_TREE_DEPTH)}), "
        f"{name}(quota_id, root) AS (SELECT quota_id, root FROM {up} WHERE parent IS NULL)"
    )


def trees_of(rows: Iterable[tuple[int, str | None, str]]) -> tuple[dict[str, list[int]], set[str]]:
    """What ``roots_and_deciding`` answers, from ``(workload id, root, phase)`` rows read
    already (a root None: the quota is gone, left out)."""
    holding = {str(Phase.ADMITTED), str(Phase.RUNNING)}
    out: dict[str, list[int]] = {}
    deciding: set[str] = set()
    for workload_id, root, phase in rows:
        if root is None:
            continue
        out.setdefault(str(root), []).append(int(workload_id))
        if str(phase) not in holding:
            deciding.add(str(root))
    return out, deciding


def roots_of_workloads(workload_ids: Iterable[int]) -> dict[str, list[int]]:
    """The workloads' ids per the root of their quota's tree, in one query: what the
    journal and the wakes of a commit need. Workloads (or quotas) no longer there are
    left out."""
    return roots_and_deciding(workload_ids)[0]


def roots_and_deciding(workload_ids: Iterable[int]) -> tuple[dict[str, list[int]], set[str]]:
    """``roots_of_workloads``, and the roots of those whose phase can change a decision
    (neither admitted nor running: waiting, ended, being evicted), in the same query."""
    from queueing.models import Workload

    ids = sorted({int(i) for i in workload_ids})
    if not ids:
        return {}, set()
    q = connection.ops.quote_name
    workloads = q(Workload._meta.db_table)
    found: list[tuple[int, str | None, str]] = []
    with connection.cursor() as cursor:
        for start in range(0, len(ids), 5_000):  # the ids twice: 10,000 parameters
            chunk = ids[start : start + 5_000]
            marks = ", ".join(["%s"] * len(chunk))
            chosen = f"SELECT {q('quota_id')} FROM {workloads} WHERE {q('id')} IN ({marks})"  # noqa: S608
            cursor.execute(
                # Identifiers from the models' meta, quoted; every value is a parameter.
                f"WITH RECURSIVE {roots_cte(chosen)}"  # noqa: S608
                f" SELECT w.{q('id')}, r.root, w.{q('phase')} FROM {workloads} w"
                f" JOIN kq_roots r ON r.quota_id = w.{q('quota_id')}"
                f" WHERE w.{q('id')} IN ({marks})",
                [*chunk, *chunk],
            )
            found.extend(cursor.fetchall())
    return trees_of(found)
