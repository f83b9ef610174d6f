"""The HTTP face of the fake: Kubernetes REST paths, watch streams, discovery, faults and
the `/_fake/` control endpoints."""

from __future__ import annotations

import contextlib
import email.utils
import itertools
import math
import random
import select
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from . import objects as o
from . import webhooks
from .audit import AuditLog, Entry, TransitionRecorder
from .objects import ApiError, Obj, status_body
from .resources import Registry, ResourceType
from .runner import JobRunner
from .store import Event, Feed, Store, watch_line

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
WRITE_VERBS = ("create", "update", "patch", "delete")
VERSION_INFO = {
    "major": "1",
    "minor": "33",
    "gitVersion": "v1.33.0-fakekube",
    "gitCommit": "0" * 40,
    "gitTreeState": "clean",
    "buildDate": "2025-04-23T00:00:00Z",
    "goVersion": "go1.24.2",
    "compiler": "gc",
    "platform": "linux/amd64",
}
_REASONS = {
    409: "Conflict",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


@dataclass
class FaultSpec:
    """Faults for one verb (or "*"): a share of requests fails, all are slowed."""

    error_rate: float = 0.0  # probability a request gets an injected error
    codes: tuple[int, ...] = (500,)  # picked uniformly: 500, 503, 429 (with Retry-After), 409
    retry_after: float = 1.0  # seconds, for 429
    latency: float = 0.0  # seconds added to every matching request
    committed_rate: float = 0.0  # share of injected write errors sent after the write applied
    resources: tuple[str, ...] = ()  # plurals it applies to; empty: all

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FaultSpec:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ApiError(400, "BadRequest", f"unknown fault settings: {sorted(unknown)}")
        spec = cls(**data)
        spec.codes, spec.resources = tuple(spec.codes), tuple(spec.resources)
        return spec


class Faults:
    """Fault settings per verb, with their own seeded random source."""

    def __init__(self, seed: int | None = None) -> None:
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self._specs: dict[str, FaultSpec] = {}
        self.injected = 0

    def configure(
        self, specs: Mapping[str, FaultSpec | Mapping[str, Any]], seed: int | None = None
    ) -> None:
        """Replace all settings; keys are verbs from VERBS or "*" (any verb)."""
        parsed = {}
        for verb, spec in specs.items():
            if verb not in (*VERBS, "*"):
                raise ApiError(400, "BadRequest", f"unknown verb {verb!r}")
            parsed[verb] = spec if isinstance(spec, FaultSpec) else FaultSpec.from_dict(spec)
        with self._lock:
            self._specs = parsed
            if seed is not None:
                self._rng.seed(seed)

    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            return {verb: asdict(spec) for verb, spec in self._specs.items()}

    def decide(self, verb: str, plural: str) -> tuple[float, int | None, bool]:
        """(latency, injected error code or None, whether the write happens first)."""
        with self._lock:
            spec = self._specs.get(verb) or self._specs.get("*")
            if spec is None or (spec.resources and plural not in spec.resources):
                return 0.0, None, False
            if self._rng.random() >= spec.error_rate:
                return spec.latency, None, False
            self.injected += 1
            code = self._rng.choice(spec.codes)
            committed = verb in WRITE_VERBS and self._rng.random() < spec.committed_rate
            return spec.latency, code, committed

    def error(self, code: int, verb: str) -> ApiError:
        spec = self._specs.get(verb) or self._specs.get("*") or FaultSpec()
        headers, details = {}, None
        if code == 429:
            seconds = max(0, math.ceil(spec.retry_after))
            headers["Retry-After"] = str(seconds)
            details = {"retryAfterSeconds": seconds}
        reason = _REASONS.get(code, "InternalError")
        return ApiError(code, reason, f"fakekube: injected {code} on {verb}", details, headers)


_MAX_LINE = 65536  # http.client's limits
_MAX_HEADERS = 100


class Headers(dict[str, str]):
    """Request headers by lower-cased name (the first of repeated ones, as
    `email.message.Message.get` answers); `get` takes any case."""

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(name.lower(), default)


_date: tuple[int, str] = (0, "")


def http_date() -> str:
    """The Date header's value, formatted once per second."""
    global _date
    now = time.time()
    second = math.floor(now)
    cached = _date
    if cached[0] != second:
        cached = _date = (second, email.utils.formatdate(second, usegmt=True))
    return cached[1]


@dataclass
class Route:
    rtype: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None
    verb: str = ""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], fake: FakeKube) -> None:
        self.fake = fake
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    raw_requestline: bytes  # set by handle_one_request before parse_request

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        with self.server.connections_lock:
            self.server.connections.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the audit log records requests

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # (send_response formats a line for it otherwise)

    def date_time_string(self, timestamp: float | None = None) -> str:
        return http_date() if timestamp is None else super().date_time_string(timestamp)

    def parse_request(self) -> bool:
        """The request line and headers, as http.server reads them but without the email
        parser (`http.client.parse_headers` builds an `email.message` for every request).
        Anything but a plain HTTP/1.x request line goes the standard way."""
        words = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n").split()
        if len(words) != 3 or words[2] not in ("HTTP/1.1", "HTTP/1.0"):
            return super().parse_request()
        self.requestline = " ".join(words)
        self.command, path, self.request_version = words
        self.path = "/" + path.lstrip("/") if path.startswith("//") else path
        self.close_connection = self.request_version == "HTTP/1.0"
        headers = Headers()
        while True:
            line = self.rfile.readline(_MAX_LINE + 1)
            if len(line) > _MAX_LINE or len(headers) > _MAX_HEADERS:
                self.send_error(431, "Request header fields too large")
                return False
            if line in (b"\r\n", b"\n", b""):
                break
            name, colon, value = line.decode("iso-8859-1").partition(":")
            if colon:
                headers.setdefault(name.strip().lower(), value.strip())
        self.headers = headers  # type: ignore[assignment]
        connection = headers.get("connection", "").lower()
        if connection == "close":
            self.close_connection = True
        elif connection == "keep-alive":
            self.close_connection = False
        if (
            headers.get("expect", "").lower() == "100-continue"
            and self.request_version == "HTTP/1.1"
        ):
            return self.handle_expect_100()
        return True

    def do_GET(self) -> None:
        self._handle()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    # --- plumbing ---------------------------------------------------------------------------

    def _send(self, code: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        data = body if isinstance(body, bytes) else encode(self.server.fake.store, body)
        self.send_response(code)
        ctype = "application/json" if not isinstance(body, bytes) else "text/plain"
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        # One write for headers and body: no Nagle/delayed-ACK stalls between them.
        self._headers_buffer.append(b"\r\n" + data)  # type: ignore[attr-defined]
        self.flush_headers()

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        try:
            return o.loads(raw)
        except ValueError:
            raise ApiError(400, "BadRequest", "the request body is not valid JSON") from None

    def _handle(self) -> None:
        fake = self.server.fake
        url = urlsplit(self.path)
        path = "/" + url.path.strip("/")
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        if path.startswith("/_fake/"):
            try:
                self._send(200, fake.control(self.command, path, query, self._body()))
            except ApiError as err:
                self._send(err.code, err.status(), err.headers)
            except (ValueError, TypeError) as exc:
                self._send(400, status_body(400, "BadRequest", str(exc)))
            return
        started = time.monotonic()
        entry: dict[str, Any] = {
            "id": fake.next_request_id(),
            "method": self.command,
            "path": path,
            "query": url.query,
            "user_agent": self.headers.get("User-Agent"),
            "verb": None,
            "fault": None,
        }
        headers: Mapping[str, str] = {}
        try:
            body = self._body()
            static = fake.static_response(self.command, path)
            if static is not None:
                entry["verb"] = "get"
                code, payload = static
            else:
                route = fake.route(self.command, path, query)
                entry.update(
                    verb=route.verb,
                    resource=route.rtype.qualified,
                    namespace=route.namespace,
                    name=route.name,
                    subresource=route.subresource,
                )
                if route.verb == "watch":
                    self._api(route, query, body, entry, started)
                    return
                code, payload = self._api(route, query, body, entry, started)
        except ApiError as err:
            code, payload, headers = err.code, err.status(), err.headers
        except Exception as exc:
            fake.server_errors.append(traceback.format_exc())
            code, payload = 500, status_body(500, "InternalError", f"fakekube bug: {exc!r}")
        # Logged before the answer leaves: whoever got the answer can find the entry.
        self._log(entry, code, started)
        try:
            self._send(code, payload, headers)
        except OSError:
            self.close_connection = True  # the client hung up

    def _log(self, entry: dict[str, Any], code: int, started: float) -> None:
        ms = round((time.monotonic() - started) * 1000, 3)
        self.server.fake.log.append("request", **entry, status=code, ms=ms)

    def _api(
        self, route: Route, query: dict[str, str], body: Any, entry: dict[str, Any], started: float
    ) -> tuple[int, Any]:
        fake = self.server.fake
        fault_verb = "delete" if route.verb == "deletecollection" else route.verb
        latency, fault, committed = fake.faults.decide(fault_verb, route.rtype.plural)
        if latency:
            fake.stopping.wait(latency)
        if fault is not None:
            entry["fault"] = f"{'committed' if committed else 'injected'}-{fault}"
            if not committed:
                raise fake.faults.error(fault, fault_verb)
        user_agent = self.headers.get("User-Agent")
        with fake.store.acting("api", entry["id"], user_agent):
            if route.verb == "watch":
                self._watch(route, query, entry, started)
                return 200, None
            code, payload = fake.execute(route, query, body, self.headers.get("Content-Type"))
        if fault is not None:
            raise fake.faults.error(fault, fault_verb)
        return code, payload

    # --- watch ------------------------------------------------------------------------------

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _watch(
        self, route: Route, query: dict[str, str], entry: dict[str, Any], started: float
    ) -> None:
        fake, store, rtype = self.server.fake, self.server.fake.store, route.rtype
        match = store.matcher(rtype, query.get("labelSelector"), query.get("fieldSelector"))
        filtered = bool(query.get("labelSelector") or query.get("fieldSelector"))
        try:
            timeout = float(query.get("timeoutSeconds") or fake.watch_timeout)
        except ValueError:
            raise ApiError(400, "BadRequest", "invalid timeoutSeconds") from None
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        deadline = time.monotonic() + timeout
        initial: list[Obj] | None = None
        feed: Feed | None = None
        expired: ApiError | None = None
        try:
            initial, feed = store.watch(rtype, route.namespace, query.get("resourceVersion"))
        except ApiError as err:
            if err.code != 410:
                raise
            expired = err
        self._log(entry, 200, started)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def render(event: Event) -> bytes | None:
            # The feed holds only this kind in this namespace (or all): selectors remain.
            if not filtered:
                return event.line()
            now_ok = match(event.obj)
            if event.type == "DELETED":
                return event.line() if now_ok else None
            was_ok = event.old is not None and match(event.old)
            if now_ok:
                return event.line("MODIFIED" if was_ok else "ADDED")
            return event.line("DELETED") if was_ok else None

        try:
            if initial:
                lines = [watch_line("ADDED", store.encoded(o)) for o in initial if match(o)]
                if lines:
                    self._chunk(b"".join(lines))
            last_bookmark = time.monotonic()
            while feed is not None and expired is None and not fake.stopping.is_set():
                now = time.monotonic()
                if now >= deadline:
                    break
                wait = min(deadline - now, 0.5)
                if bookmarks:
                    wait = max(0.0, min(wait, last_bookmark + fake.bookmark_interval - now))
                try:
                    events, cursor = feed.take(wait)
                except ApiError as err:
                    expired = err
                    break
                lines = [line for e in events if (line := render(e)) is not None]
                if lines:
                    self._chunk(b"".join(lines))
                elif not self._client_alive():
                    self.close_connection = True
                    return
                if bookmarks and time.monotonic() - last_bookmark >= fake.bookmark_interval:
                    mark = {
                        "kind": rtype.kind,
                        "apiVersion": rtype.api_version,
                        "metadata": {"resourceVersion": str(cursor)},
                    }
                    self._chunk(o.dumps({"type": "BOOKMARK", "object": mark}) + b"\n")
                    last_bookmark = time.monotonic()
            if expired is not None:
                self._chunk(o.dumps({"type": "ERROR", "object": expired.status()}) + b"\n")
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
        finally:
            if feed is not None:
                store.unwatch(feed)

    def _client_alive(self) -> bool:
        """A watch only writes when there is news; notice a client that hung up meanwhile."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return not readable or self.connection.recv(1, socket.MSG_PEEK) != b""
        except OSError:
            return False


class ManualClock:
    """A clock tests move by hand: `clock.advance(30)`."""

    def __init__(self, start: float = 1_750_000_000.0) -> None:
        self.now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        with self._lock:
            self.now += seconds
            return self.now


class FakeKube:
    """A stateful fake Kubernetes API server over real HTTP on loopback.

    `start()` returns the URL; `stop()` (or leaving the `with` block) shuts it down."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Callable[[], float] = time.time,
        default_runtime: float = 1.0,
        time_scale: float = 1.0,
        history_limit: int = 50_000,
        bookmark_interval: float = 1.0,
        watch_timeout: float = 1800.0,
        runner: bool = True,
        seed: int | None = None,
        resources: Iterable[ResourceType] = (),
    ) -> None:
        self.host, self.port = host, port
        self.clock = clock
        self.registry = Registry()
        for rtype in resources:
            self.registry.register(rtype)
        self.log = AuditLog(clock)
        self.store = Store(self.registry, clock, history_limit, seed)
        self.store.listeners.append(TransitionRecorder(self.log))
        self.runner = JobRunner(self.store, clock, default_runtime, time_scale)
        self.faults = Faults(seed)
        self.bookmark_interval = bookmark_interval
        self.watch_timeout = watch_timeout
        self.run_runner = runner
        self.stopping = threading.Event()
        self._ids = itertools.count(1)
        self._ids_lock = threading.Lock()
        self.requests = 0
        self.server_errors: list[str] = []  # tracebacks of bugs in the fake itself
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeKube is not started")
        return f"http://{self.host}:{self._server.server_address[1]}"

    def start(self) -> str:
        self.stopping.clear()
        self._server = _Server((self.host, self.port), self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            daemon=True,
            name="fakekube-http",
        )
        self._thread.start()
        if self.run_runner:
            self.runner.start()
        return self.url

    def stop(self) -> None:
        self.stopping.set()
        self.store.wake_watches()
        self.runner.stop()
        if self._server is not None:
            self._server.shutdown()
            with self._server.connections_lock:
                for conn in list(self._server.connections):
                    with contextlib.suppress(OSError):
                        conn.shutdown(socket.SHUT_RDWR)
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeKube:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def next_request_id(self) -> int:
        with self._ids_lock:
            self.requests += 1
            return next(self._ids)

    # --- steering from Python (the control endpoints call the same methods) ----------------

    def config(self) -> dict[str, Any]:
        return {
            "default_runtime": self.runner.default_runtime,
            "time_scale": self.runner.time_scale,
            "history_limit": self.store.history_limit,
            "bookmark_interval": self.bookmark_interval,
            "watch_timeout": self.watch_timeout,
            "runner_paused": self.runner.paused,
        }

    def configure(self, **settings: Any) -> dict[str, Any]:
        """Change settings at runtime; keys as returned by `config()`."""
        unknown = set(settings) - set(self.config())
        if unknown:
            raise ApiError(400, "BadRequest", f"unknown settings: {sorted(unknown)}")
        for key, value in settings.items():
            if key == "runner_paused":
                self.runner.paused = bool(value)
            elif key in ("default_runtime", "time_scale"):
                setattr(self.runner, key, float(value))
            elif key == "history_limit":
                self.store.history_limit = int(value)
            else:
                setattr(self, key, float(value))
        return self.config()

    def set_faults(
        self,
        specs: Mapping[str, FaultSpec | Mapping[str, Any]] | None = None,
        *,
        seed: int | None = None,
        **by_verb: FaultSpec | Mapping[str, Any],
    ) -> None:
        """`fake.set_faults(patch=FaultSpec(error_rate=0.1, codes=(500, 429)))`; replaces all;
        "*" applies to verbs without their own entry."""
        self.faults.configure({**(specs or {}), **by_verb}, seed=seed)

    def clear_faults(self) -> None:
        self.faults.configure({})

    def reset(self, *, log: bool = True, faults: bool = True) -> None:
        """Delete every object (default namespaces stay); optionally clear log and faults."""
        self.store.reset()
        if log:
            self.log.clear()
        if faults:
            self.clear_faults()

    def compact(self) -> int:
        """Drop the watch history: resuming from any older resourceVersion gets 410 Gone."""
        return self.store.compact()

    def state(self) -> dict[str, Any]:
        return {
            "resourceVersion": str(self.store.rv),
            "compactedResourceVersion": str(self.store.compacted_rv),
            "objects": self.store.counts(),
            "requests": self.requests,
            "faultsInjected": self.faults.injected,
            "runnerErrors": list(self.runner.errors),
            "serverErrors": list(self.server_errors),
            "time": self.clock(),
            "config": self.config(),
        }

    def log_entries(self, since: int = 0, types: Iterable[str] | None = None) -> list[Entry]:
        return self.log.entries(since, types)

    # --- seeding helpers --------------------------------------------------------------------

    def create(self, resource: str, body: Obj, namespace: str | None = None) -> Obj:
        """Create an object directly (no HTTP); `resource` like "jobs" or "queues"."""
        with self.store.acting("seed"):
            return self.store.create(resource, namespace, body)

    def add_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> Obj:
        return self.create("namespaces", {"metadata": {"name": name, "labels": dict(labels or {})}})

    def add_node(
        self,
        name: str,
        allocatable: Mapping[str, str | int | float],
        *,
        labels: Mapping[str, str] | None = None,
        taints: list[Obj] | None = None,
        unschedulable: bool = False,
    ) -> Obj:
        alloc = {k: str(v) for k, v in allocatable.items()}
        alloc.setdefault("pods", "110")
        spec: Obj = {"unschedulable": True} if unschedulable else {}
        if taints:
            spec["taints"] = taints
        return self.create(
            "nodes",
            {
                "metadata": {
                    "name": name,
                    "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                },
                "spec": spec,
                "status": {
                    "allocatable": alloc,
                    "capacity": dict(alloc),
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
        )

    # --- routing and verbs ------------------------------------------------------------------

    def static_response(self, method: str, path: str) -> tuple[int, Any] | None:
        """Discovery, /version and health checks, or None for resource paths."""
        if method != "GET":
            return None
        if path == "/version":
            return 200, VERSION_INFO
        if path in ("/healthz", "/livez", "/readyz"):
            return 200, b"ok"
        groups = self.registry.groups()
        parts = path.strip("/").split("/")
        if path == "/api":
            address = [{"clientCIDR": "0.0.0.0/0", "serverAddress": self.url.split("//")[1]}]
            return 200, {
                "kind": "APIVersions",
                "versions": groups.get("", ["v1"]),
                "serverAddressByClientCIDRs": address,
            }
        if path == "/apis":
            return 200, {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [_group(g, vs) for g, vs in groups.items() if g],
            }
        if parts[0] == "apis" and len(parts) == 2 and parts[1] in groups:
            return 200, {
                "kind": "APIGroup",
                "apiVersion": "v1",
                **_group(parts[1], groups[parts[1]]),
            }
        if (parts[0] == "api" and len(parts) == 2) or (parts[0] == "apis" and len(parts) == 3):
            group, version = ("", parts[1]) if parts[0] == "api" else (parts[1], parts[2])
            served = [r for r in self.registry.all() if (r.group, r.version) == (group, version)]
            if served:
                return 200, _resource_list(group, version, served)
        return None

    def route(self, method: str, path: str, query: Mapping[str, str]) -> Route:
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 3:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 4:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise _not_served()
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            inner = self.registry.get(group, version, rest[2])
            if inner is not None and inner.namespaced:
                namespace, rest = rest[1], rest[2:]
        rtype = self.registry.get(group, version, rest[0])
        if rtype is None or len(rest) > 3 or (rtype.namespaced and len(rest) > 1 and not namespace):
            raise _not_served()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and (sub != "status" or not rtype.has_status):
            raise _not_served()  # no binding, eviction, log, scale, ...
        verb = {
            ("GET", True): "get",
            ("PUT", True): "update",
            ("PATCH", True): "patch",
            ("DELETE", True): "delete",
            ("POST", False): "create",
            ("DELETE", False): "deletecollection",
        }.get((method, name is not None))
        if method == "GET" and name is None:
            verb = "watch" if query.get("watch") in ("true", "1") else "list"
        if verb is None or (verb == "create" and rtype.namespaced and not namespace):
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {path}")
        return Route(rtype, namespace, name, sub, verb)

    def execute(
        self, route: Route, query: Mapping[str, str], body: Any, content_type: str | None
    ) -> tuple[int, Any]:
        store, rtype, ns, name = self.store, route.rtype, route.namespace, route.name
        if route.verb in ("create", "update", "patch") and body is None:
            raise ApiError(400, "BadRequest", "the request body is required")
        if route.verb == "get":
            return 200, store.get(rtype, ns, name or "")
        if route.verb in ("list", "deletecollection"):
            try:
                limit = int(query.get("limit") or 0)
            except ValueError:
                raise ApiError(400, "BadRequest", "invalid limit") from None
            items, rv, token, remaining = store.list(
                rtype,
                ns,
                query.get("labelSelector"),
                query.get("fieldSelector"),
                limit if route.verb == "list" else 0,
                query.get("continue") or None,
            )
            if route.verb == "deletecollection":
                items = [
                    store.delete(rtype, i["metadata"].get("namespace"), i["metadata"]["name"])
                    for i in items
                ]
            list_meta: Obj = {"resourceVersion": str(rv)}
            if token:
                list_meta.update({"continue": token, "remainingItemCount": remaining})
            return 200, {
                "kind": f"{rtype.kind}List",
                "apiVersion": rtype.api_version,
                "metadata": list_meta,
                "items": items,
            }
        if route.verb == "create":
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "the request body must be an object")
            return 201, store.create(rtype, ns, webhooks.mutate(store, rtype, ns, body))
        if route.verb == "update":
            return 200, store.update(rtype, ns, name or "", body, route.subresource)
        if route.verb == "patch":
            ctype = content_type or "application/merge-patch+json"
            return 200, store.patch(rtype, ns, name or "", body, ctype, route.subresource)
        deleted = store.delete(rtype, ns, name or "", (body or {}).get("preconditions"))
        if rtype.key == ("", "v1", "pods"):
            return 200, deleted  # pods answer with the object, most kinds with a Status
        details = {
            "name": name,
            "group": rtype.group,
            "kind": rtype.plural,
            "uid": deleted["metadata"]["uid"],
        }
        return 200, status_body(200, "", "", details)

    def control(self, method: str, path: str, query: Mapping[str, str], body: Any) -> Any:
        """The `/_fake/` endpoints, for tests whose clients run in other processes."""
        body = body or {}
        what = path.removeprefix("/_fake/")
        if what == "state" and method == "GET":
            return self.state()
        if what == "log" and method == "GET":
            types = [t for t in (query.get("types") or "").split(",") if t] or None
            entries = self.log_entries(int(query.get("since") or 0), types)
            return {"entries": entries, "lastSeq": self.log.last_seq}
        if what == "faults":
            if method in ("PUT", "POST"):
                self.set_faults(body.get("verbs") or {}, seed=body.get("seed"))
            elif method == "DELETE":
                self.clear_faults()
            return {"verbs": self.faults.to_dict(), "injected": self.faults.injected}
        if what == "config":
            return self.configure(**body) if method in ("PUT", "PATCH", "POST") else self.config()
        if what == "reset" and method == "POST":
            self.reset(log=body.get("log", True), faults=body.get("faults", True))
            return self.state()
        if what == "compact" and method == "POST":
            return {"compactedResourceVersion": str(self.compact())}
        if what == "step" and method == "POST":
            self.runner.step()
            return self.state()
        raise ApiError(404, "NotFound", f"no control endpoint {method} {path}")


def encode(store: Store, body: Any) -> bytes:
    """A response body as JSON; committed objects (alone or as a list's items) in the
    encoding their watch events share."""
    if not isinstance(body, dict):
        return o.dumps(body)
    items = body.get("items")
    if isinstance(items, list) and str(body.get("kind", "")).endswith("List"):
        head = o.dumps({**body, "items": None})
        if head.endswith(b'"items":null}'):
            listed = b",".join(store.encoded(item) for item in items)
            return head[: -len(b"null}")] + b"[" + listed + b"]}"
    return store.encoded(body)


def _not_served() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def _group(name: str, versions: list[str]) -> Obj:
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


def _resource_list(group: str, version: str, served: list[ResourceType]) -> Obj:
    verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
    resources: list[Obj] = []
    for r in served:
        resources.append(
            {
                "name": r.plural,
                "singularName": r.singular(),
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": verbs,
            }
        )
        if r.has_status:
            resources.append(
                {
                    "name": f"{r.plural}/status",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }
