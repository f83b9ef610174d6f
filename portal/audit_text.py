"""The audit log as sentences with names: "cpu max 500 → 400 on quota vision-dev by ada".

An AuditEvent stores what changed as before/after snapshots of ids and canonical
amounts (queueing.actions.AUDITED_FIELDS). This turns a page of them into sentences a
person reads: ids become names (one query per kind for the whole page; a deleted
object keeps its id), resource maps become one change per resource in the units the
pages use (portal.units), and the verb comes from the action.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model

from portal import units
from queueing.models import AuditEvent, Queue, Quota, Tenant

RESOURCE_MAPS = {
    "min": "min",
    "max": "max",
    "shared_weight": "shared weight",
    "allocatable": "allocatable",
    "reserved": "reserved",
    "total_request": "request",
}
# Fields holding an id, and the kind of object the id names.
REFERENCES = {
    "user_id": "user",
    "tenant_id": "tenant",
    "parent_id": "quota",
    "quota_id": "quota",
    "default_queue_id": "queue",
    "queue_id": "queue",
}
LABELS = {
    "parent_id": "parent",
    "default_queue_id": "default queue",
    "allow_lent": "lending",
    "admission_timeout_s": "admission timeout",
    "backoff_base_s": "backoff base",
    "backoff_max_s": "backoff max",
    "aging_bound_s": "aging bound",
    "max_execution_s": "maximum execution time",
    "fair_weight": "fair-share weight",
    "expected_runtime_s": "expected runtime",
}
SECONDS = frozenset(
    {
        "admission_timeout_s",
        "backoff_base_s",
        "backoff_max_s",
        "expected_runtime_s",
        "aging_bound_s",
        "max_execution_s",
    }
)
QUIET = frozenset({"version"})  # bookkeeping, not something a person changed
VERBS = {"create": "created", "update": "changed", "delete": "deleted", "cancel": "cancelled",
         "revoke": "revoked"}  # fmt: skip
KINDS = {"simnode": "node", "token": "API token", "apitoken": "API token"}


@dataclass
class Names:
    """id -> name per kind, read once for a page of events."""

    by_kind: dict[str, dict[int, str]] = field(default_factory=dict)

    @classmethod
    def for_events(cls, events: Iterable[AuditEvent]) -> Names:
        wanted: dict[str, set[int]] = {kind: set() for kind in ("user", "tenant", "quota", "queue")}
        for event in events:
            for snapshot in (event.before or {}, event.after or {}):
                for key, kind in REFERENCES.items():
                    value = snapshot.get(key)
                    if isinstance(value, int):
                        wanted[kind].add(value)
        models: dict[str, tuple[Any, str]] = {
            "user": (get_user_model(), "username"),
            "tenant": (Tenant, "name"),
            "quota": (Quota, "name"),
            "queue": (Queue, "name"),
        }
        names = cls()
        for kind, ids in wanted.items():
            model, attr = models[kind]
            names.by_kind[kind] = (
                dict(model.objects.filter(pk__in=ids).values_list("pk", attr)) if ids else {}
            )
        return names

    def name(self, kind: str, value: Any) -> str:
        if value is None:
            return "none"
        return self.by_kind.get(kind, {}).get(value) or f"{kind} #{value}"


def _plain(key: str, value: Any, names: Names) -> str:
    if value is None or value == "":
        return "none"
    if key in REFERENCES:
        return names.name(REFERENCES[key], value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key in SECONDS and isinstance(value, int | float):
        return f"{value:g} s"
    if isinstance(value, list):
        return ", ".join(str(v) if not isinstance(v, dict) else _pairs(v) for v in value) or "none"
    if isinstance(value, dict):
        return _pairs(value) or "none"
    return str(value)


def _pairs(value: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(value.items()))


def _resource_changes(key: str, before: Any, after: Any) -> list[str]:
    """ "cpu max 500 → 400", one per resource whose amount changed."""
    old = before if isinstance(before, dict) else {}
    new = after if isinstance(after, dict) else {}
    label = RESOURCE_MAPS[key]
    changes = []
    for resource in sorted(set(old) | set(new)):
        a, b = old.get(resource), new.get(resource)
        if a == b:
            continue
        shown_a = "none" if a is None else units.human_or_text(resource, a)
        shown_b = "none" if b is None else units.human_or_text(resource, b)
        changes.append(f"{resource} {label} {shown_a} → {shown_b}")
    return changes


def changes(event: AuditEvent, names: Names) -> list[str]:
    """What an update changed, field by field, for people."""
    before, after = event.before or {}, event.after or {}
    found: list[str] = []
    for key in sorted(set(before) | set(after), key=_field_order):
        a, b = before.get(key), after.get(key)
        if a == b or key in QUIET:
            continue
        if key in RESOURCE_MAPS:
            found += _resource_changes(key, a, b)
        else:
            label = LABELS.get(key, key.removesuffix("_id").replace("_", " "))
            found.append(f"{label} {_plain(key, a, names)} → {_plain(key, b, names)}")
    return found


def _field_order(key: str) -> tuple[int, str]:
    order = ("name", "min", "max", "shared_weight")
    return (order.index(key), key) if key in order else (len(order), key)


def summary(snapshot: Mapping[str, Any], names: Names) -> str:
    """A created or deleted object's main settings: "min cpu 4; max cpu 8; parent vision"."""
    parts = []
    for key in ("min", "max", "shared_weight", "allocatable", "reserved"):
        if snapshot.get(key):
            parts.append(f"{RESOURCE_MAPS[key]} {units.describe(snapshot[key])}")
    for key in ("parent_id", "policy", "priority", "namespaces"):
        if snapshot.get(key) not in (None, "", []):
            parts.append(
                f"{LABELS.get(key, key.removesuffix('_id'))} {_plain(key, snapshot[key], names)}"
            )
    return "; ".join(parts)


def sentence(event: AuditEvent, names: Names) -> str:
    kind_key, _, verb_key = event.action.partition(".")
    actor = event.actor_name or "someone"
    kind = KINDS.get(kind_key, kind_key or event.object_type)
    target = f"{kind} {event.object_repr}"
    before, after = event.before or {}, event.after or {}
    if kind_key == "membership":
        snapshot = after or before
        user = names.name("user", snapshot.get("user_id"))
        tenant = names.name("tenant", snapshot.get("tenant_id"))
        if verb_key == "create":
            return f"{actor} added {user} to {tenant} as {after.get('role')}"
        if verb_key == "delete":
            return f"{actor} removed {user} ({before.get('role')}) from {tenant}"
        return f"{actor} made {user} {after.get('role')} of {tenant} (was {before.get('role')})"
    if kind_key == "token":
        snapshot = after or before
        user = names.name("user", snapshot.get("user_id"))
        label = f" “{snapshot['name']}”" if snapshot.get("name") else ""
        scope = ", read-only" if snapshot.get("read_only") else ""
        verb = VERBS.get(verb_key, verb_key)
        return f"{actor} {verb} API token {snapshot.get('prefix', '')}…{label} of {user}{scope}"
    if kind_key == "workload" and verb_key == "cancel":
        return f"{actor} cancelled workload {event.object_repr} (it was {before.get('phase', '?')})"
    if verb_key == "update":
        found = changes(event, names)
        if not found:
            return f"{actor} saved {target} without changes"
        return f"{'; '.join(found)} on {target} by {actor}"
    verb = VERBS.get(verb_key, verb_key or "changed")
    details = summary(after if verb_key == "create" else before, names)
    return f"{actor} {verb} {target}" + (f" ({details})" if details else "")


@dataclass(frozen=True)
class Line:
    event: AuditEvent
    sentence: str


def lines(events: Sequence[AuditEvent]) -> list[Line]:
    names = Names.for_events(events)
    return [Line(event, sentence(event, names)) for event in events]
