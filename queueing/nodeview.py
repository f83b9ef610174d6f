"""The node view: the cluster's nodes as the cycle last read them, kept in the database.

The cycle reads the nodes anyway; :func:`persist` keeps a copy (allocatable, what pods
the queue does not manage hold, labels, taints, cordoned) so that pages, the API and
what-if previews read :func:`read` and never call the cluster -- one page view in
Kubernetes mode used to list every managed kind through the adapter.

``persist`` compares a digest per node with the stored ones (one narrow query), writes
only what changed, in bulk (one statement per kind of change), and announces the
changed rows to cluster admins after the commit (the ``nodes`` configuration message,
docs/events.md). It runs with every cycle: a reading equal to the one this process
last found stored (or stored itself), within ``RECHECK_S`` of that, is not compared
again -- no query at all. Another process's newer reading differs from ours only if the
cluster changed, which ours then shows too; a view it left behind, ``RECHECK_S`` bounds.
The view is as fresh as the last cycle; a node the cluster no longer lists is removed.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from queueing import events
from queueing.cluster.base import NodeInfo
from queueing.models import ClusterNode

__all__ = ["NodeChanges", "forget", "observed", "persist", "read"]

_FIELDS = ("allocatable", "reserved", "labels", "taints", "unschedulable")

#: At most this long (s) a reading equal to the last one found stored goes unchecked.
RECHECK_S = 10.0
# The documents by node name this process last found stored, and when (monotonic).
_confirmed: tuple[dict[str, dict[str, Any]], float] | None = None
_lock = threading.Lock()


def forget() -> None:
    """Forget the last reading found stored (tests: each starts from its own database)."""
    global _confirmed
    with _lock:
        _confirmed = None


def _confirm(documents: dict[str, dict[str, Any]]) -> None:
    global _confirmed
    with _lock:
        _confirmed = (documents, time.monotonic())


def _unchanged(documents: Mapping[str, Mapping[str, Any]]) -> bool:
    with _lock:
        known = _confirmed
    return known is not None and time.monotonic() - known[1] < RECHECK_S and known[0] == documents


@dataclass
class NodeChanges:
    """What one :func:`persist` wrote, by node name."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.created or self.updated or self.removed)


def _document(node: NodeInfo) -> dict[str, Any]:
    return {
        "allocatable": {k: int(v) for k, v in sorted(node.allocatable.items())},
        "reserved": {k: int(v) for k, v in sorted(node.reserved.items())},
        "labels": dict(sorted(node.labels.items())),
        "taints": [dict(sorted(t.items())) for t in node.taints],
        "unschedulable": bool(node.unschedulable),
    }


def _digest(document: Mapping[str, Any]) -> str:
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def persist(nodes: Iterable[NodeInfo], *, announce: bool = True) -> NodeChanges:
    """Store ``nodes`` as the whole node view: write what changed, announce it on commit.

    ``announce=False`` for a caller that publishes the same change itself (the
    simulated-node actions): a client must not be told of one removal twice."""
    documents = {node.name: _document(node) for node in nodes}
    changes = NodeChanges()
    # The common case, nothing changed since this process last looked, costs nothing.
    if _unchanged(documents):
        return changes
    seen = {name: (doc, _digest(doc)) for name, doc in documents.items()}
    # Else one narrow query, and no transaction while nothing changed.
    stored = dict(ClusterNode.objects.values_list("name", "digest"))
    now = timezone.now()
    fresh = [
        ClusterNode(name=name, digest=digest, changed_at=now, **doc)
        for name, (doc, digest) in seen.items()
        if name not in stored
    ]
    stale = {name for name, (_, digest) in seen.items() if stored.get(name, digest) != digest}
    gone = sorted(set(stored) - set(seen))
    if not (fresh or stale or gone):
        _confirm(documents)
        return changes
    # Two cycles persisting at once both hold a recent reading; whichever writes last
    # wins, and the next reading corrects any difference.
    with transaction.atomic():
        if fresh:
            # A concurrent persist (two cycles) may have created the same node: the
            # unique name keeps one row, and its content is the same reading.
            ClusterNode.objects.bulk_create(fresh, ignore_conflicts=True)
            changes.created = sorted(n.name for n in fresh)
        if stale:
            rows = list(ClusterNode.objects.filter(name__in=stale))
            for row in rows:
                doc, digest = seen[row.name]
                for key in _FIELDS:
                    setattr(row, key, doc[key])
                row.digest, row.changed_at = digest, now
            ClusterNode.objects.bulk_update(rows, [*_FIELDS, "digest", "changed_at"])
            changes.updated = sorted(row.name for row in rows)
        if gone:
            ClusterNode.objects.filter(name__in=gone).delete()
            changes.removed = gone
        if changes and announce:
            announced = [
                {"name": name, **seen[name][0]} for name in (*changes.created, *changes.updated)
            ]
            events.publish_on_commit(
                None, events.config_message("nodes", None, announced, removed=changes.removed)
            )
        transaction.on_commit(lambda: _confirm(documents))
    return changes


def read() -> list[NodeInfo]:
    """The node view, by name, as the cluster adapters describe nodes."""
    return [
        NodeInfo(
            name=row.name,
            allocatable=row.allocatable,
            reserved=row.reserved,
            labels=row.labels,
            taints=tuple(row.taints),
            unschedulable=row.unschedulable,
        )
        for row in ClusterNode.objects.order_by("name")
    ]


def observed() -> bool:
    """Whether a cycle has stored a node view yet."""
    return ClusterNode.objects.exists()
