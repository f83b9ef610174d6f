"""The audit log: every request, and every state transition tests reason about.

Entries are plain dicts with a global `seq` (total order, the same order as the store's
changes) and `t` (the server clock). Entry types:

- `request`: id, verb, method, path, query, status, resource, namespace, name, subresource,
  user_agent, fault, ms.
- `suspend`: a suspendable object (batch Job, JobSet, RayJob, PyTorchJob, TFJob) created
  (`previous` is None) or its suspend flag changed; resource, object ("ns/name"), uid,
  suspend, previous, request (id of the request that did it, None for the job runner),
  actor, user_agent, job_labels, and for batch Jobs parallelism, pod_requests (one pod's
  requests in base units: cores, bytes, counts) and node_selector.
- `pod_start` / `pod_stop`: a pod began or ceased to occupy a node (bound and not finished);
  pod, uid, node, job ("ns/name" of the owning Job or None), job_uid, job_labels, requests,
  reason (pod_stop: Succeeded, Failed or Deleted), request, actor.
- `job_finished`: object, uid, condition (Complete or Failed), reason.
- `deleted`: a suspendable object was deleted; resource, object, uid, request, actor.

The functions at the bottom rebuild usage over time from a list of entries, so a test can
check them whether it holds the server in-process or fetched `/_fake/log`.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from .objects import Obj, dig, pod_requests

if TYPE_CHECKING:
    from .store import Change

Entry = dict[str, Any]
GroupKey = Callable[[Entry], Any]


class AuditLog:
    """Thread-safe, append-only list of entries."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: list[Entry] = []
        self._seq = 0

    def append(self, type_: str, **fields: Any) -> Entry:
        with self._lock:
            self._seq += 1
            entry = {"seq": self._seq, "t": self._clock(), "type": type_, **fields}
            self._entries.append(entry)
            return entry

    def entries(self, since: int = 0, types: Iterable[str] | None = None) -> list[Entry]:
        """Entries with seq > since, optionally of the given types only."""
        wanted = set(types) if types else None
        with self._lock:
            start = _first_after(self._entries, since)
            found = self._entries[start:]
        return [e for e in found if wanted is None or e["type"] in wanted]

    @property
    def last_seq(self) -> int:
        return self._seq

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def _first_after(entries: list[Entry], seq: int) -> int:
    lo, hi = 0, len(entries)
    while lo < hi:
        mid = (lo + hi) // 2
        if entries[mid]["seq"] <= seq:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _occupies(pod: Obj | None) -> bool:
    return bool(
        pod
        and dig(pod, "spec", "nodeName")
        and dig(pod, "status", "phase") not in ("Succeeded", "Failed")
    )


def _key(obj: Obj) -> str:
    m = obj.get("metadata") or {}
    return f"{m.get('namespace')}/{m.get('name')}" if m.get("namespace") else str(m.get("name"))


class TransitionRecorder:
    """A store listener that turns changes into `suspend`, `pod_*`, `job_finished` entries.

    Runs under the store lock, so entries are in the same order as the changes."""

    def __init__(self, log: AuditLog) -> None:
        self.log = log
        self._job_labels: dict[str, dict[str, str]] = {}

    def __call__(self, change: Change) -> None:
        if change.rtype.suspend_path:
            self._suspendable(change)
        elif change.rtype.key == ("", "v1", "pods"):
            self._pod(change)

    def _origin(self, change: Change) -> dict[str, Any]:
        return {"request": change.request_id, "actor": change.actor}

    def _suspendable(self, change: Change) -> None:
        rtype, obj, old = change.rtype, change.obj, change.old
        uid = dig(obj, "metadata", "uid")
        base = {"resource": rtype.qualified, "object": _key(obj), "uid": uid}
        if change.type == "DELETED":
            self.log.append("deleted", **base, **self._origin(change))
            return
        found = dig(obj, "metadata", "labels")
        labels = self._job_labels.get(uid)
        if labels is None or old is None or found is not dig(old, "metadata", "labels"):
            # (a status write keeps the labels' dict: nothing to copy again)
            labels = self._job_labels[uid] = dict(found or {})
        suspend = bool(dig(obj, *rtype.suspend_path))
        previous = None if old is None else bool(dig(old, *rtype.suspend_path))
        if previous is None or previous != suspend:
            extra: dict[str, Any] = {}
            if rtype.key == ("batch", "v1", "jobs"):
                pod_spec = dig(obj, "spec", "template", "spec") or {}
                extra = {
                    "parallelism": dig(obj, "spec", "parallelism"),
                    "pod_requests": pod_requests(pod_spec),
                    "node_selector": pod_spec.get("nodeSelector") or {},
                }
            self.log.append(
                "suspend",
                **base,
                suspend=suspend,
                previous=previous,
                user_agent=change.user_agent,
                job_labels=labels,
                **extra,
                **self._origin(change),
            )
        if old is not None and obj.get("status") is old.get("status"):
            return  # the status is the same object: no condition turned true
        for cond in ("Complete", "Failed"):
            if _condition_true(obj, cond) and not _condition_true(old, cond):
                reason = next(
                    c.get("reason")
                    for c in dig(obj, "status", "conditions")
                    if c.get("type") == cond
                )
                self.log.append("job_finished", **base, condition=cond, reason=reason)

    def _pod(self, change: Change) -> None:
        deleted = change.type == "DELETED"
        was, now = _occupies(change.old), not deleted and _occupies(change.obj)
        if was == now:
            return
        pod = change.obj
        owner = next(
            (
                ref
                for ref in dig(pod, "metadata", "ownerReferences") or []
                if ref.get("kind") == "Job" and ref.get("controller")
            ),
            None,
        )
        namespace = dig(pod, "metadata", "namespace")
        fields: dict[str, Any] = {
            "pod": _key(pod),
            "uid": dig(pod, "metadata", "uid"),
            "node": dig(pod, "spec", "nodeName") or dig(change.old, "spec", "nodeName"),
            "job": f"{namespace}/{owner['name']}" if owner else None,
            "job_uid": owner.get("uid") if owner else None,
            "job_labels": self._job_labels.get(owner.get("uid", "")) if owner else None,
            "requests": pod_requests(dig(pod, "spec")),
        }
        if now:
            self.log.append("pod_start", **fields, **self._origin(change))
        else:
            phase = dig(pod, "status", "phase")
            reason = phase if not deleted and phase in ("Succeeded", "Failed") else "Deleted"
            self.log.append("pod_stop", **fields, reason=reason, **self._origin(change))


def _condition_true(obj: Obj | None, type_: str) -> bool:
    return any(
        c.get("type") == type_ and c.get("status") == "True"
        for c in dig(obj, "status", "conditions") or []
    )


# --- rebuilding usage from entries ----------------------------------------------------------


def by_job(entry: Entry) -> Any:
    return entry.get("job") or entry.get("object")


def by_namespace(entry: Entry) -> Any:
    key = by_job(entry)
    return key.split("/", 1)[0] if key and "/" in key else None


def by_label(name: str) -> GroupKey:
    """Group by a label of the Job (e.g. the quota or queue label)."""
    return lambda entry: (entry.get("job_labels") or {}).get(name)


def usage_timeline(
    entries: Iterable[Entry], key: GroupKey = by_job
) -> Iterator[tuple[Entry, Any, dict[str, float]]]:
    """Pod-based usage: after each pod_start/pod_stop, yield (entry, group, group's usage)."""
    usage: dict[Any, defaultdict[str, float]] = {}
    for entry in entries:
        if entry["type"] not in ("pod_start", "pod_stop"):
            continue
        group = key(entry)
        sign = 1.0 if entry["type"] == "pod_start" else -1.0
        total = usage.setdefault(group, defaultdict(float))
        for name, q in entry["requests"].items():
            total[name] += sign * q
        yield entry, group, dict(total)


def admitted_timeline(
    entries: Iterable[Entry], key: GroupKey = by_job
) -> Iterator[tuple[Entry, Any, dict[str, float]]]:
    """Admission-based usage: a batch Job counts parallelism x pod requests from the moment
    it is unsuspended until it is suspended again, finishes or is deleted."""
    usage: dict[Any, defaultdict[str, float]] = {}
    held: dict[str, tuple[Any, dict[str, float]]] = {}  # uid -> (group, its total)
    for entry in entries:
        uid, kind = str(entry.get("uid")), entry["type"]
        sign = 1.0
        if kind == "suspend" and not entry["suspend"]:
            if uid in held or entry.get("pod_requests") is None:
                continue
            n = entry.get("parallelism") or 1
            held[uid] = (key(entry), {name: n * q for name, q in entry["pod_requests"].items()})
            group, amount = held[uid]
        elif kind in ("suspend", "job_finished", "deleted") and uid in held:
            group, amount = held.pop(uid)
            sign = -1.0
        else:
            continue
        total = usage.setdefault(group, defaultdict(float))
        for name, q in amount.items():
            total[name] += sign * q
        yield entry, group, dict(total)


def peak_usage(
    timeline: Iterable[tuple[Entry, Any, dict[str, float]]],
) -> dict[Any, dict[str, float]]:
    """Per group and resource, the highest usage seen (per resource, independently)."""
    peak: dict[Any, dict[str, float]] = {}
    for _, group, total in timeline:
        slot = peak.setdefault(group, {})
        for name, q in total.items():
            slot[name] = max(slot.get(name, 0.0), q)
    return peak


def overruns(
    timeline: Iterable[tuple[Entry, Any, dict[str, float]]],
    limits: Mapping[Any, Mapping[str, float]],
    epsilon: float = 1e-9,
) -> list[dict[str, Any]]:
    """Every instant at which a group's usage exceeded its limit."""
    found = []
    for entry, group, total in timeline:
        for name, limit in (limits.get(group) or {}).items():
            if total.get(name, 0.0) > limit + epsilon:
                found.append(
                    {
                        "seq": entry["seq"],
                        "group": group,
                        "resource": name,
                        "usage": total[name],
                        "limit": limit,
                    }
                )
    return found


def unsuspend_counts(entries: Iterable[Entry]) -> Counter[str]:
    """uid -> how many times the object went from suspended to running (creation unsuspended
    counts once)."""
    counts: Counter[str] = Counter()
    for entry in entries:
        if entry["type"] == "suspend" and not entry["suspend"]:
            counts[entry["uid"]] += 1
    return counts


def running_at(entries: Iterable[Entry], seq: int, key: GroupKey = by_job) -> dict[Any, dict]:
    """Pod-based usage per group just after entry `seq` (groups with nothing running omitted)."""
    state: dict[Any, dict[str, float]] = {}
    for _, group, total in usage_timeline((e for e in entries if e["seq"] <= seq), key):
        state[group] = total
    return {g: t for g, t in state.items() if any(abs(q) > 1e-9 for q in t.values())}
