"""What every action shares: who acts, the errors, the audit record, the version check.

An action is check -> one atomic write -> audit -> event on commit (Zulip's
``zerver/actions``). ``publish`` is the only way an action announces a change; it sends
after the transaction commits, so a rolled-back write is never announced.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Model
from django.utils import timezone

from queueing import events
from queueing.choices import QUEUE_SETTINGS, Source
from queueing.models import AuditEvent, Tenant
from queueing.quantities import QuantityError
from queueing.validation import Errors, as_amounts


class ConflictError(Exception):
    """A write based on a stale version; nothing was changed."""


class ActionError(Exception):
    """A request that cannot be carried out as asked; the message is for people."""


@dataclass(frozen=True)
class Actor:
    """Who acts, and through which door."""

    user: Any = None
    source: str = Source.SYSTEM
    name: str = "system"

    @classmethod
    def of(cls, user: AbstractBaseUser | AnonymousUser | None, source: str) -> Actor:
        if user is None or not getattr(user, "is_authenticated", False):
            return cls(None, source, "anonymous")
        return cls(user, source, user.get_username())

    @classmethod
    def system(cls) -> Actor:
        return cls(None, Source.SYSTEM, "system")

    @classmethod
    def cluster(cls) -> Actor:
        return cls(None, Source.CLUSTER, "cluster-sync")


# --- audit ---------------------------------------------------------------------------

AUDITED_FIELDS: dict[str, tuple[str, ...]] = {
    "tenant": ("name", "display_name", "description"),
    "membership": ("user_id", "tenant_id", "role"),
    "quota": (
        "name",
        "tenant_id",
        "parent_id",
        "min",
        "max",
        "shared_weight",
        "fair_weight",
        "allow_lent",
        "namespaces",
        "default_queue_id",
        "version",
    ),
    "queue": ("name", "tenant_id", *QUEUE_SETTINGS, "version"),
    "workload": (
        "name",
        "namespace",
        "tenant_id",
        "quota_id",
        "queue_id",
        "priority",
        "pod_sets",
        "expected_runtime_s",
        "phase",
    ),
    "simnode": ("name", "allocatable", "reserved", "labels", "taints", "unschedulable"),
}


def snapshot_of(obj: Model) -> dict[str, Any]:
    kind = obj._meta.model_name or ""
    return {name: _jsonable(getattr(obj, name)) for name in AUDITED_FIELDS.get(kind, ())}


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return events.iso(value)
    return value


def audit(
    actor: Actor,
    action: str,
    obj: Model,
    *,
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
    tenant_id: int | None = None,
) -> AuditEvent:
    if tenant_id is None:
        tenant_id = getattr(obj, "tenant_id", None)
        if tenant_id is None and isinstance(obj, Tenant):
            tenant_id = obj.pk
    return AuditEvent.objects.create(
        at=timezone.now(),
        actor=actor.user,
        actor_name=actor.name,
        source=actor.source,
        action=action,
        object_type=obj._meta.model_name or "",
        object_id=str(obj.pk),
        object_repr=str(obj)[:300],
        tenant_id=tenant_id,
        before=dict(before) if before is not None else None,
        after=dict(after) if after is not None else None,
    )


def full_clean(obj: Model, exclude: Sequence[str] = ()) -> None:
    obj.full_clean(exclude=list(exclude), validate_constraints=False)


# --- the checks every write shares ---------------------------------------------------


def stale_message(kind: str, name: str, current_version: int, expected_version: int) -> str:
    """The one message of a stale write, whether it came from a form, the API or a command."""
    return (
        f"{kind} {name!r} was changed by someone else (now version {current_version}, "
        f"your change started from version {expected_version}). Nothing was saved; "
        "reload to see their values and make your change again."
    )


def check_version(kind: str, current: Any, expected_version: int | None) -> None:
    """Optimistic concurrency: refuse a write based on a version that is no longer current.

    ``current`` is the row as read (and locked) inside the action's transaction."""
    if expected_version is not None and current.version != expected_version:
        raise ConflictError(stale_message(kind, current.name, current.version, expected_version))


def resources_or_error(errors: Errors, name: str, values: Any) -> dict[str, int]:
    """A resource map as canonical integers. Forms and serializers hand over ``Amounts``
    (their quantity field parsed the text once); commands and tests may give text."""
    try:
        return dict(as_amounts(values))
    except QuantityError as exc:
        errors.add(name, str(exc))
        return {}


def publish(tenant_id: int | None, payload: dict[str, Any]) -> None:
    """Announce a change once the transaction commits (docs/events.md, portal/event_schema)."""
    events.publish_on_commit(tenant_id, payload)
