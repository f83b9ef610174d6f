"""Kubernetes Events on the queue's jobs, so ``kubectl describe`` tells the story the
dashboard tells: queued, admitted, preempted, requeued, and why a job waits.

Deduplicated and rate-limited as client-go's event correlator does it:

- the same (object, type, reason, message) is one Event whose ``count`` and
  ``lastTimestamp`` grow; its name is derived from those four, so a recorder restarted
  elsewhere finds and bumps it (409 on create, then a read and a patch);
- each object gets at most ``burst`` Events, then one more per ``refill_s``: a job whose
  explanation changes every cycle cannot flood the namespace;
- each request is tried once (no retry waits inside the sync): an Event lost to an API
  error is logged, never a reason for the sync to slow down.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from queueing.cluster.events import KubeEvent
from queueing.cluster.kubernetes.client import MERGE_PATCH, ApiCallError, Obj, Rest

log = logging.getLogger(__name__)

COMPONENT = "koord-queue"
MESSAGE_MAX = 1024  # the API server refuses longer Event messages


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    """Writes KubeEvents through the adapter's REST client (core/v1 Events)."""

    def __init__(
        self,
        rest: Rest,
        *,
        burst: int = 10,
        refill_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rest = rest
        self.burst = burst
        self.refill_s = refill_s
        self.clock = clock
        self.instance = f"{socket.gethostname()}-{os.getpid()}"
        self._tokens: dict[str, tuple[float, float]] = {}  # object uid -> (tokens, at)
        self._counts: dict[str, int] = {}  # Event name -> count written
        self.dropped = 0

    def _allow(self, uid: str) -> bool:
        now = self.clock()
        tokens, at = self._tokens.get(uid, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) / self.refill_s)
        if tokens < 1.0:
            self._tokens[uid] = (tokens, now)
            return False
        self._tokens[uid] = (tokens - 1.0, now)
        if len(self._tokens) > 100_000:  # forget the oldest half; a map, not a leak
            for key in list(self._tokens)[: len(self._tokens) // 2]:
                del self._tokens[key]
        return True

    @staticmethod
    def name_of(event: KubeEvent) -> str:
        digest = hashlib.sha256(
            "\0".join((event.ref.uid, event.type, event.reason, event.message)).encode()
        ).hexdigest()[:16]
        return f"{event.ref.name[:200]}.{digest}"

    def record(self, events: Iterable[KubeEvent]) -> int:
        """Write what the rate limit lets through; returns Events written (created or
        bumped). An API error on one Event is logged and the rest go on: Events are
        advice, never a reason to fail a sync.

        New Events (the most of them: a job's Queued, Admitted, Pending<Kind>) are
        created together, their POSTs pipelined down one connection (``Rest.pipelined``);
        one that exists already (409: a restarted recorder, or the same Event twice in
        this batch) and repeats are bumped one at a time after them."""
        written = 0
        creates: list[tuple[KubeEvent, str, str]] = []  # (event, name, stamp)
        later: list[tuple[KubeEvent, bool]] = []  # (event, known to exist)
        named: set[str] = set()
        for event in events:
            if not event.ref.uid or not event.ref.namespace:
                continue
            if not self._allow(event.ref.uid):
                self.dropped += 1
                continue
            name = self.name_of(event)
            if self._counts.get(name, 0) or name in named:
                later.append((event, False))
                continue
            named.add(name)
            creates.append((event, name, _stamp(event.at or datetime.now(UTC))))
        if creates:
            answers = self.rest.pipelined(
                [
                    ("POST", self._path(event), self._body(event, name, at), None)
                    for event, name, at in creates
                ]
            )
            for (event, name, _at), answer in zip(creates, answers, strict=True):
                if not isinstance(answer, ApiCallError):
                    self._counts[name] = 1
                    written += 1
                    continue
                self.rest.count("create", answer)
                if answer.status == 409:  # exists: read its count, then bump it
                    later.append((event, True))
                else:
                    self._log_failure(event, answer)
        for event, exists in later:
            try:
                self._write(event, exists=exists)
                written += 1
            except ApiCallError as err:
                self._log_failure(event, err)
        return written

    @staticmethod
    def _log_failure(event: KubeEvent, err: ApiCallError) -> None:
        log.warning("could not record %s on %s: %s", event.reason, event.ref.name, err)

    @staticmethod
    def _path(event: KubeEvent) -> str:
        return f"/api/v1/namespaces/{event.ref.namespace}/events"

    def _body(self, event: KubeEvent, name: str, at: str) -> Obj:
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": event.ref.namespace},
            "involvedObject": {
                "apiVersion": event.ref.api_version,
                "kind": event.ref.kind,
                "namespace": event.ref.namespace,
                "name": event.ref.name,
                "uid": event.ref.uid,
            },
            "reason": event.reason,
            "message": event.message[:MESSAGE_MAX],
            "type": event.type,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.instance[:128],
            "firstTimestamp": at,
            "lastTimestamp": at,
            "count": 1,
        }

    def _write(self, event: KubeEvent, *, exists: bool = False) -> None:
        """One Event alone: created, or (it exists) its count bumped."""
        name = self.name_of(event)
        at = _stamp(event.at or datetime.now(UTC))
        path = self._path(event)
        count = self._counts.get(name, 0)
        if count == 0 and not exists:
            try:  # once: a 409 here means "exists", not "try again"
                self.rest.once("POST", path, body=self._body(event, name, at))
                self._counts[name] = 1
                return
            except ApiCallError as err:
                self.rest.count("create", err)
                if err.status != 409:
                    raise
        if count == 0:
            # Another recorder (or this one before a restart) made it: read its count.
            current = self._once("get", "GET", f"{path}/{name}")
            count = int(current.get("count") or 1)
        self._once(
            "patch",
            "PATCH",
            f"{path}/{name}",
            body={"count": count + 1, "lastTimestamp": at},
            content_type=MERGE_PATCH,
        )
        self._counts[name] = count + 1

    def _once(self, verb: str, method: str, path: str, **kw: Any) -> Any:
        """One try: an Event is not worth a retry's wait inside the sync."""
        try:
            return self.rest.once(method, path, **kw)
        except ApiCallError as err:
            self.rest.count(verb, err)
            raise
