"""The object store: one resourceVersion counter, write semantics and the watch history.

Committed objects are never mutated: every write builds a new dict. Readers may hold and
serialize them without the lock, and the watch history can keep references to them.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import json
import random
import re
import threading
import uuid
from bisect import bisect_right
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from . import objects as o
from .objects import ApiError, Obj, dig
from .resources import Registry, ResourceType

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # what Kubernetes uses for generateName
NAMESPACES = ("", "v1", "namespaces")
JOBS = ("batch", "v1", "jobs")
PODS = ("", "v1", "pods")
PRIORITY_CLASSES = ("scheduling.k8s.io", "v1", "priorityclasses")


@dataclass(slots=True)
class Change:
    """What listeners see: one committed write, and who made it."""

    rtype: ResourceType
    type: str  # ADDED, MODIFIED, DELETED
    obj: Obj  # the new object (for DELETED, the object as deleted)
    old: Obj | None
    request_id: int | None
    actor: str  # "api", "runner", or what `Store.acting` was given
    user_agent: str | None


@dataclass(slots=True)
class Event:
    rv: int
    rtype: ResourceType
    type: str
    obj: Obj
    old: Obj | None
    _json: bytes | None = None
    _line: bytes | None = None

    def json(self) -> bytes:
        """The object's JSON, encoded once: every watch and every GET of this version share
        it (committed objects are never mutated)."""
        if self._json is None:
            self._json = o.dumps(self.obj)
        return self._json

    def line(self, type_: str | None = None) -> bytes:
        """The watch line; cached, since every unfiltered watcher sends the same bytes."""
        if type_ is not None and type_ != self.type:
            return watch_line(type_, self.json())
        if self._line is None:
            self._line = watch_line(self.type, self.json())
        return self._line


def watch_line(type_: str, obj_json: bytes) -> bytes:
    return b'{"type": "%s", "object": %s}\n' % (type_.encode(), obj_json)


class Feed:
    """The events one watch can match, offered at commit: only the watches of the event's
    kind, and of its namespace or of all namespaces, see an event (`Store.watch`).

    `take` has the history's semantics: it answers 410 Gone once the store compacted past
    the resourceVersion the watch had reached (`cursor`), as a watch reading the history
    would; while it keeps up, it streams in resourceVersion order."""

    __slots__ = ("_store", "cond", "cursor", "events", "key", "namespace", "rtype")

    def __init__(
        self, store: Store, rtype: ResourceType, namespace: str, cursor: int, backlog: list[Event]
    ) -> None:
        self._store = store
        self.rtype = rtype
        self.namespace = namespace  # "" for all namespaces (and cluster-scoped kinds)
        self.key = (rtype.key, namespace)
        self.cursor = cursor
        self.events = backlog
        self.cond = threading.Condition(store.lock)

    def take(self, timeout: float) -> tuple[builtins.list[Event], int]:
        """The events committed since the last take (waiting up to `timeout` for the
        first), and the resourceVersion they bring the watch up to."""
        store = self._store
        with self.cond:
            store.check_cursor(self.cursor)
            if not self.events and timeout > 0:
                self.cond.wait(timeout)
                store.check_cursor(self.cursor)
            events, self.events = self.events, []
            self.cursor = max(self.cursor, store.rv)
            return events, self.cursor


class _Context(threading.local):
    request_id: int | None = None
    actor: str = "api"
    user_agent: str | None = None


def _key(rtype: ResourceType, namespace: str | None, name: str) -> tuple[str, str]:
    return (namespace or "", name) if rtype.namespaced else ("", name)


def not_found(rtype: ResourceType, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{rtype.qualified} "{name}" not found',
        {"name": name, "group": rtype.group, "kind": rtype.plural},
    )


def _conflict(rtype: ResourceType, name: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {rtype.qualified} "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
        {"name": name, "group": rtype.group, "kind": rtype.plural},
    )


def _invalid(rtype: ResourceType, name: str, message: str) -> ApiError:
    return ApiError(
        422,
        "Invalid",
        f'{rtype.kind}.{rtype.group or "core"} "{name}" is invalid: {message}',
        {"name": name, "group": rtype.group, "kind": rtype.kind},
    )


def _without_rv(obj: Obj) -> Obj:
    return {**obj, "metadata": {**obj.get("metadata", {}), "resourceVersion": None}}


def _spec_of(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


class Store:
    """All objects of all kinds, their resourceVersions and the recent change history."""

    def __init__(
        self,
        registry: Registry,
        clock: Callable[[], float],
        history_limit: int = 50_000,
        seed: int | None = None,
    ) -> None:
        self.registry = registry
        self.clock = clock
        self.history_limit = history_limit
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)  # the lock every read and write holds
        self.listeners: list[Callable[[Change], None]] = []
        self.rv = 0
        self.compacted_rv = 0  # watches from a resourceVersion below this get 410 Gone
        self._objects: dict[tuple[str, str, str], dict[tuple[str, str], Obj]] = {}
        self._history: list[Event] = []
        # Open watches by (kind, namespace); namespace "" = all namespaces.
        self._feeds: dict[tuple[tuple[str, str, str], str], set[Feed]] = {}
        # The latest event of each live object, by id(object): its encoding for GETs.
        self._live: dict[int, Event] = {}
        self._rng = random.Random(seed)
        self._ctx = _Context()
        for name in DEFAULT_NAMESPACES:
            self.create("namespaces", None, {"metadata": {"name": name}})

    # --- context ----------------------------------------------------------------------------

    @contextmanager
    def acting(
        self, actor: str, request_id: int | None = None, user_agent: str | None = None
    ) -> Iterator[None]:
        """Attribute the writes made inside to an actor (and request) in the listeners."""
        saved = (self._ctx.actor, self._ctx.request_id, self._ctx.user_agent)
        self._ctx.actor, self._ctx.request_id, self._ctx.user_agent = actor, request_id, user_agent
        try:
            yield
        finally:
            self._ctx.actor, self._ctx.request_id, self._ctx.user_agent = saved

    # --- reads ------------------------------------------------------------------------------

    def _bucket(self, rtype: ResourceType) -> dict[tuple[str, str], Obj]:
        return self._objects.setdefault(rtype.key, {})

    def get(self, rtype: ResourceType | str, namespace: str | None, name: str) -> Obj:
        """The committed object (do not mutate it; `objects.copy` it first)."""
        rtype = self.registry.resolve(rtype)
        with self.cond:
            obj = self._bucket(rtype).get(_key(rtype, namespace, name))
        if obj is None:
            raise not_found(rtype, name)
        return obj

    def find(self, rtype: ResourceType | str, namespace: str | None, name: str) -> Obj | None:
        try:
            return self.get(rtype, namespace, name)
        except ApiError:
            return None

    def list(
        self,
        rtype: ResourceType | str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 0,
        continue_: str | None = None,
    ) -> tuple[list[Obj], int, str | None, int]:
        """(items, resourceVersion, continue token, remaining count), sorted by ns/name."""
        rtype = self.registry.resolve(rtype)
        match = self.matcher(rtype, label_selector, field_selector)
        start: tuple[str, str] | None = None
        with self.cond:
            list_rv = self.rv
            if continue_:
                list_rv, start = self._decode_continue(continue_)
            keys = sorted(
                k
                for k in self._bucket(rtype)
                if (not namespace or k[0] == namespace) and (start is None or k > start)
            )
            items = [obj for k in keys if match(obj := self._bucket(rtype)[k])]
        if limit and len(items) > limit:
            last = items[limit - 1]["metadata"]
            token = _encode_continue(list_rv, last.get("namespace", ""), last["name"])
            return items[:limit], list_rv, token, len(items) - limit
        return items, list_rv, None, 0

    def matcher(
        self, rtype: ResourceType, label_selector: str | None, field_selector: str | None
    ) -> o.Predicate:
        by_label = o.label_selector(label_selector)
        by_field = o.field_selector(field_selector, rtype.selectable_fields)
        return lambda obj: by_label(obj) and by_field(obj)

    def _decode_continue(self, token: str) -> tuple[int, tuple[str, str]]:
        try:
            rv, ns, name = json.loads(base64.urlsafe_b64decode(token.encode()))
        except (ValueError, binascii.Error, TypeError):
            raise ApiError(400, "BadRequest", "invalid continue token") from None
        if rv < self.compacted_rv:
            raise ApiError(
                410,
                "Expired",
                "The provided continue parameter is too old to display a consistent list "
                "result. You can start a new list without the continue parameter.",
            )
        return rv, (ns, name)

    # --- writes -----------------------------------------------------------------------------

    def _commit(self, rtype: ResourceType, type_: str, new: Obj, old: Obj | None) -> Obj:
        self.rv += 1
        new = {**new, "metadata": {**new["metadata"], "resourceVersion": str(self.rv)}}
        bucket = self._bucket(rtype)
        namespace = (new["metadata"].get("namespace") or "") if rtype.namespaced else ""
        key = _key(rtype, namespace, new["metadata"]["name"])
        replaced = bucket.pop(key, None) if type_ == "DELETED" else bucket.get(key)
        if replaced is not None:
            self._live.pop(id(replaced), None)
        event = Event(self.rv, rtype, type_, new, old)
        if type_ != "DELETED":
            bucket[key] = new
            self._live[id(new)] = event
        self._history.append(event)
        limit = self.history_limit
        if len(self._history) > limit + limit // 10 + 1:
            cut = len(self._history) - limit
            self.compacted_rv = self._history[cut - 1].rv
            del self._history[:cut]
        self._offer(event, rtype.key, namespace)
        ctx = self._ctx
        change = Change(rtype, type_, new, old, ctx.request_id, ctx.actor, ctx.user_agent)
        for listener in self.listeners:
            listener(change)
        return new

    def _offer(self, event: Event, kind: tuple[str, str, str], namespace: str) -> None:
        """Hand the event to the watches of its kind that can match it, and wake them."""
        feeds = self._feeds
        if not feeds:
            return
        targets = feeds.get((kind, ""))
        if namespace:
            scoped = feeds.get((kind, namespace))
            if scoped:
                targets = scoped if not targets else targets | scoped
        if not targets:
            return
        compacted = self.compacted_rv
        for feed in targets:
            if feed.cursor >= compacted:  # an expired watch gets 410 at its next take
                feed.events.append(event)
                feed.cond.notify()

    def encoded(self, obj: Obj) -> bytes:
        """The JSON of a committed object, shared with its watch event when it is the live
        version (encoded once however many watches and GETs send it)."""
        event = self._live.get(id(obj))
        if event is not None and event.obj is obj:
            return event.json()
        return o.dumps(obj)

    def create(
        self,
        rtype: ResourceType | str,
        namespace: str | None,
        body: Obj,
        keep_status: bool = False,
    ) -> Obj:
        """POST. `keep_status` is for controllers that create objects with a status (the
        job runner creates pods already bound and running); the API never passes it."""
        rtype = self.registry.resolve(rtype)
        obj = o.copy(body)
        m = o.meta(obj)
        if rtype.namespaced:
            namespace = namespace or m.get("namespace")
            if not namespace:
                raise ApiError(400, "BadRequest", "the namespace of the object is required")
            if m.get("namespace", namespace) != namespace:
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace "
                    "sent on the request",
                )
            m["namespace"] = namespace
        else:
            m.pop("namespace", None)
        with self.cond:
            if rtype.namespaced and ("", namespace) not in self._bucket(
                self.registry.resolve("namespaces")
            ):
                raise not_found(self.registry.resolve("namespaces"), str(namespace))
            if not m.get("name"):
                if not m.get("generateName"):
                    raise _invalid(rtype, "", "metadata.name: Required value: name is required")
                suffix = "".join(self._rng.choices(_GENERATE_ALPHABET, k=5))
                m["name"] = m["generateName"] + suffix
            name = m["name"]
            if not _NAME.match(name) or len(name) > 253:
                raise _invalid(rtype, name, f"metadata.name: Invalid value: {name!r}")
            if _key(rtype, namespace, name) in self._bucket(rtype):
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{rtype.qualified} "{name}" already exists',
                    {"name": name, "group": rtype.group, "kind": rtype.plural},
                )
            obj["apiVersion"], obj["kind"] = rtype.api_version, rtype.kind
            m["uid"] = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
            m["creationTimestamp"] = o.rfc3339(self.clock())
            m["generation"] = 1
            for field in ("resourceVersion", "deletionTimestamp", "selfLink"):
                m.pop(field, None)
            if rtype.has_status and rtype.key != ("", "v1", "nodes") and not keep_status:
                obj.pop("status", None)  # nodes alone may carry status on create
            self._default_and_validate(rtype, obj)
            return self._commit(rtype, "ADDED", obj, None)

    def _default_and_validate(self, rtype: ResourceType, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        if rtype.key == NAMESPACES:
            obj["status"] = {"phase": "Active"}
        elif rtype.key == PODS:
            if not dig(obj, "spec", "containers"):
                raise _invalid(rtype, name, "spec.containers: Required value")
            obj.setdefault("status", {"phase": "Pending"})
        elif rtype.key == JOBS:
            spec = obj.setdefault("spec", {})
            pod_spec = dig(spec, "template", "spec") or {}
            if not pod_spec.get("containers"):
                raise _invalid(rtype, name, "spec.template.spec.containers: Required value")
            if pod_spec.get("restartPolicy") not in ("Never", "OnFailure"):
                raise _invalid(
                    rtype,
                    name,
                    'spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", '
                    '"Never"',
                )
            if spec.get("parallelism") is None and spec.get("completions") is None:
                spec["completions"] = 1
            spec.setdefault("parallelism", 1)
            spec.setdefault("backoffLimit", 6)
            spec.setdefault("suspend", False)
            spec.setdefault("completionMode", "NonIndexed")
            uid = obj["metadata"]["uid"]
            job_labels = {
                "batch.kubernetes.io/controller-uid": uid,
                "controller-uid": uid,
                "batch.kubernetes.io/job-name": name,
                "job-name": name,
            }
            spec.setdefault(
                "selector", {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
            )
            template_meta = spec["template"].setdefault("metadata", {})
            template_meta["labels"] = {**(template_meta.get("labels") or {}), **job_labels}
        elif rtype.key == PRIORITY_CLASSES and not isinstance(obj.get("value"), int):
            raise _invalid(rtype, name, "value: Required value")

    def update(
        self,
        rtype: ResourceType | str,
        namespace: str | None,
        name: str,
        body: Obj,
        subresource: str | None = None,
    ) -> Obj:
        """PUT: replace the object (or only its status, for the status subresource)."""
        rtype = self.registry.resolve(rtype)
        if dig(body, "metadata", "name") not in (None, name):
            raise ApiError(400, "BadRequest", "the name of the object does not match the URL")
        with self.cond:
            return self._write(rtype, self.get(rtype, namespace, name), o.copy(body), subresource)

    def patch(
        self,
        rtype: ResourceType | str,
        namespace: str | None,
        name: str,
        patch: Any,
        content_type: str = "application/merge-patch+json",
        subresource: str | None = None,
    ) -> Obj:
        rtype = self.registry.resolve(rtype)
        kind = content_type.split(";")[0].strip()
        with self.cond:
            old = self.get(rtype, namespace, name)
            if kind == "application/merge-patch+json":
                candidate = o.merge_patch(old, patch)
            elif kind == "application/strategic-merge-patch+json" and rtype.builtin:
                candidate = o.strategic_merge_patch(old, patch)
            elif kind == "application/json-patch+json":
                candidate = o.json_patch(old, patch)
            else:
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    f"the body of the request was in an unknown "
                    f"format - accepted media types include: application/json-patch+json, "
                    f"application/merge-patch+json{', application/strategic-merge-patch+json' if rtype.builtin else ''}",
                )
            if not isinstance(candidate, dict):
                raise ApiError(422, "Invalid", "the patch did not produce an object")
            return self._write(rtype, old, o.copy(candidate), subresource)

    def _write(self, rtype: ResourceType, old: Obj, new: Obj, subresource: str | None) -> Obj:
        name = old["metadata"]["name"]
        sent_rv = dig(new, "metadata", "resourceVersion")
        if sent_rv not in (None, "") and sent_rv != old["metadata"]["resourceVersion"]:
            raise _conflict(rtype, name)
        # A uid in the body is a precondition too: never write into a recreated namesake.
        sent_uid = dig(new, "metadata", "uid")
        if sent_uid not in (None, "") and sent_uid != old["metadata"].get("uid"):
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {rtype.qualified} "{name}": Precondition '
                f"failed: UID in precondition: {sent_uid}, UID in object meta: "
                f"{old['metadata'].get('uid')}",
                {"name": name, "group": rtype.group, "kind": rtype.plural},
            )
        if subresource == "status":
            if not rtype.has_status:
                raise not_found(rtype, name)
            new = (
                {**old, "status": new.get("status")}
                if new.get("status") is not None
                else {k: v for k, v in old.items() if k != "status"}
            )
        elif subresource:
            raise ApiError(404, "NotFound", f"subresource {subresource!r} is not served")
        else:
            m = o.meta(new)
            for field in ("uid", "creationTimestamp", "generation", "namespace", "name"):
                if field in old["metadata"]:
                    m[field] = old["metadata"][field]
            new["apiVersion"], new["kind"] = rtype.api_version, rtype.kind
            if rtype.has_status:
                new.pop("status", None)
                if "status" in old:
                    new["status"] = old["status"]
            if rtype.key == JOBS:
                self._check_job_update(rtype, old, new)
            if _spec_of(new) != _spec_of(old):
                m["generation"] = int(old["metadata"].get("generation", 1)) + 1
        if _without_rv(new) == _without_rv(old):
            return old  # a no-op write does not bump the resourceVersion, as in Kubernetes
        return self._commit(rtype, "MODIFIED", new, old)

    def _check_job_update(self, rtype: ResourceType, old: Obj, new: Obj) -> None:
        name = old["metadata"]["name"]
        for field in ("selector", "completionMode"):
            if dig(new, "spec", field) != dig(old, "spec", field):
                raise _invalid(rtype, name, f"spec.{field}: Invalid value: field is immutable")
        # Kubernetes lets the pod template change only while the Job is suspended and has
        # not started since (the controller clears startTime on suspension).
        mutable = dig(old, "spec", "suspend") and not dig(old, "status", "startTime")
        if dig(new, "spec", "template") != dig(old, "spec", "template") and not mutable:
            raise _invalid(rtype, name, "spec.template: Invalid value: field is immutable")

    def force(self, rtype: ResourceType | str, obj: Obj) -> Obj:
        """Commit spec and status together, with no checks: what a controller and a kubelet
        achieve in two writes (the job runner binds and starts a pod in one)."""
        rtype = self.registry.resolve(rtype)
        with self.cond:
            old = self.get(rtype, dig(obj, "metadata", "namespace"), obj["metadata"]["name"])
            return self._commit(rtype, "MODIFIED", obj, old)

    def delete(
        self,
        rtype: ResourceType | str,
        namespace: str | None,
        name: str,
        preconditions: Obj | None = None,
    ) -> Obj:
        """Delete at once (no finalizers, no grace period); returns the object as deleted."""
        rtype = self.registry.resolve(rtype)
        with self.cond:
            old = self.get(rtype, namespace, name)
            pre = preconditions or {}
            if pre.get("resourceVersion") not in (None, old["metadata"]["resourceVersion"]):
                raise _conflict(rtype, name)
            if pre.get("uid") not in (None, old["metadata"]["uid"]):
                raise _conflict(rtype, name)
            if rtype.key == NAMESPACES:
                for other in self.registry.all():
                    if other.namespaced:
                        for key in [k for k in self._bucket(other) if k[0] == name]:
                            self.delete(other, name, key[1])
            return self._commit(rtype, "DELETED", old, old)

    # --- watch ------------------------------------------------------------------------------

    def watch(
        self, rtype: ResourceType, namespace: str | None, resource_version: str | None
    ) -> tuple[builtins.list[Obj] | None, Feed]:
        """Open a watch: (objects to send as ADDED first, or None; the feed of the events
        after them). Without a resourceVersion (or "0") the watch starts with the current
        objects; with one it replays the history after it (410 Gone if compacted away).
        `unwatch` the feed when done."""
        namespace = (namespace or "") if rtype.namespaced else ""
        with self.cond:
            if resource_version in (None, "", "0"):
                items = [
                    obj
                    for (ns, _), obj in sorted(self._bucket(rtype).items())
                    if not namespace or ns == namespace
                ]
                backlog: builtins.list[Event] = []
            else:
                try:
                    cursor = int(resource_version)  # type: ignore[arg-type]
                except ValueError:
                    raise ApiError(400, "BadRequest", "invalid resourceVersion") from None
                self.check_cursor(cursor)
                items = None
                start = bisect_right(self._history, cursor, key=lambda e: e.rv)
                backlog = [
                    e
                    for e in self._history[start:]
                    if e.rtype is rtype
                    and (not namespace or e.obj["metadata"].get("namespace") == namespace)
                ]
            feed = Feed(self, rtype, namespace, self.rv, backlog)
            self._feeds.setdefault(feed.key, set()).add(feed)
            return items, feed

    def unwatch(self, feed: Feed) -> None:
        with self.cond:
            feeds = self._feeds.get(feed.key)
            if feeds is not None:
                feeds.discard(feed)
                if not feeds:
                    del self._feeds[feed.key]

    def wake_watches(self) -> None:
        """Wake every open watch (stopping, compaction): each checks where it stands."""
        with self.cond:
            for feeds in self._feeds.values():
                for feed in feeds:
                    feed.cond.notify_all()

    def check_cursor(self, cursor: int) -> None:
        if cursor < self.compacted_rv:
            raise ApiError(
                410, "Expired", f"too old resource version: {cursor} ({self.compacted_rv})"
            )

    def compact(self) -> int:
        """Forget all history: watches and continue tokens from before now get 410 Gone."""
        with self.cond:
            self.compacted_rv = self.rv
            self._history.clear()
            self.wake_watches()
            return self.rv

    def reset(self) -> None:
        """Drop every object (default namespaces come back); resourceVersions keep rising."""
        with self.cond, self.acting("reset"):
            namespaces = self.registry.resolve("namespaces")
            for rtype in self.registry.all():
                if rtype is not namespaces:
                    for obj in list(self._bucket(rtype).values()):
                        self._commit(rtype, "DELETED", obj, obj)
            for (_, name), obj in list(self._bucket(namespaces).items()):
                if name not in DEFAULT_NAMESPACES:
                    self._commit(namespaces, "DELETED", obj, obj)
            self.compact()

    def count(self, rtype: ResourceType | str) -> int:
        """How many objects of a kind there are."""
        return len(self._bucket(self.registry.resolve(rtype)))

    def counts(self) -> dict[str, int]:
        with self.cond:
            return {
                f"{rtype.api_version}/{rtype.plural}": len(self._bucket(rtype))
                for rtype in self.registry.all()
            }


def _encode_continue(rv: int, namespace: str, name: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([rv, namespace, name]).encode()).decode()
