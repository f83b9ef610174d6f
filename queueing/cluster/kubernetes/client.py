"""The client wrapper: the only module that imports the ``kubernetes`` client.

``Rest`` sends raw JSON through the official client's urllib3 pool (auth, TLS, kubeconfig
from its ApiClient; the request built here, not by the client's per-call serialisation,
``wire_request``) and owns the retry policy: a 409 is the caller's to resolve, 429 honours Retry-After, 5xx
and requests that got no answer are retried with jittered exponential backoff within a
time budget; what is left is an ``ApiCallError`` whose ``to_cluster_error`` tells the
sync whether a later try may succeed. Objects travel as plain JSON (``dict``), never the
client's models: one code path for builtin and custom kinds, and no model
deserialisation on large lists.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import decimal
import enum
import json
import logging
import random
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson
import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from queueing.cluster.base import ClusterError
from queueing.cluster.kubernetes import pipeline

log = logging.getLogger(__name__)

Obj = dict[str, Any]
ApiClient = k8s.ApiClient
MERGE_PATCH = "application/merge-patch+json"
PAGE_SIZE = 500
RETRYABLE_STATUSES = frozenset({409, 429, 500, 502, 503, 504})
NO_ANSWER = 0  # the status of a request that got no HTTP answer (refused, reset, timed out)

# --- errors and retries ------------------------------------------------------------------


class ApiCallError(Exception):
    """One failed request, before the retry layer decides what it means."""

    def __init__(
        self, status: int, message: str, *, reason: str = "", retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after

    @property
    def label(self) -> str:
        return str(self.status) if self.status else "timeout"

    @property
    def retryable(self) -> bool:
        return self.status == NO_ANSWER or self.status in RETRYABLE_STATUSES

    def to_cluster_error(self, what: str) -> ClusterError:
        return ClusterError(f"{what}: {self}", retryable=self.retryable, status=self.status or None)


def _error_from_response(status: int, data: bytes, headers: Mapping[str, str]) -> ApiCallError:
    message, reason, retry_after = f"HTTP {status}", "", None
    try:
        body = json.loads(data) if data else {}
    except ValueError:
        body = {}
    if isinstance(body, dict):
        message = str(body.get("message") or message)
        reason = str(body.get("reason") or "")
        details = body.get("details") or {}
        if isinstance(details, dict) and details.get("retryAfterSeconds") is not None:
            with contextlib.suppress(TypeError, ValueError):
                retry_after = float(details["retryAfterSeconds"])
    header = (headers.get("Retry-After") or headers.get("retry-after")) if headers else None
    if header is not None:
        with contextlib.suppress(TypeError, ValueError):
            retry_after = float(header)
    return ApiCallError(status, message, reason=reason, retry_after=retry_after)


def _decoded(status: int, data: bytes, headers: Mapping[str, str]) -> Any:
    """A 2xx answer's JSON (None when empty); the ApiCallError of anything else."""
    if not 200 <= status < 300:
        return _error_from_response(status, data, headers)
    try:
        return orjson.loads(data) if data else None
    except ValueError:
        return ApiCallError(NO_ANSWER, "the API server answered with invalid JSON")


@dataclass(frozen=True)
class RetryPolicy:
    """How long one call may keep trying, and how it waits between tries."""

    budget_s: float = 20.0  # total time a call may spend retrying
    base_s: float = 0.05  # first backoff; doubles each try
    cap_s: float = 2.0  # longest backoff
    max_retry_after_s: float = 10.0  # a Retry-After longer than this is cut to it
    max_attempts: int = 10

    def backoff(self, attempt: int, rng: random.Random) -> float:
        # Equal jitter: half fixed, half random, so racing workers spread out.
        step = min(self.cap_s, self.base_s * (2**attempt))
        return step / 2 + rng.uniform(0, step / 2)


def record_api_error(verb: str, label: str) -> None:
    """Count an API error in the shared metrics; never let counting break the call."""
    try:
        from django.db import transaction

        from queueing import metrics

        with transaction.atomic():
            metrics.increment("cluster_api_error", f"{verb} {label}")
    except Exception:  # the database may be down too; the log still says it
        log.debug("could not count an API error (%s %s)", verb, label, exc_info=True)


JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


def _json_default(value: Any) -> Any:
    """What ``ApiClient.sanitize_for_serialization`` makes of the few non-JSON values a
    body may hold (a datetime in an Event, say); plain JSON never gets here."""
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (decimal.Decimal, uuid.UUID)):
        return str(value)
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):  # a client model
        return to_dict()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _query_value(value: Any) -> str:
    # As ApiClient.parameters_to_url_query: booleans lower case, dicts as JSON, then
    # percent-encoded with "/" kept.
    if isinstance(value, bool):
        value = "true" if value else "false"
    elif isinstance(value, dict):
        value = json.dumps(value)
    return quote(str(value))


def wire_request(
    api: k8s.ApiClient,
    method: str,
    path: str,
    query: Mapping[str, Any] | None,
    body: Any,
    content_type: str | None,
) -> tuple[str, dict[str, str], bytes | None]:
    """The URL, headers and body the client's ``param_serialize`` + ``call_api`` would
    send for this request: the configuration's host, the ApiClient's default headers
    (User-Agent) and cookie, the bearer token (after the refresh hook), JSON in and out.
    ``None`` query values are left out; a JSON patch that is not a list is sent as a
    strategic merge patch, as the client does."""
    configuration = api.configuration
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type or "application/json"
    headers.update(api.default_headers)
    if api.cookie:
        headers["Cookie"] = api.cookie
    keys = configuration.api_key
    if "BearerToken" in keys or "authorization" in keys:
        token = configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
        if token is not None:
            headers["authorization"] = token
    url = configuration.host + path
    if query:
        pairs = [f"{k}={_query_value(v)}" for k, v in query.items() if v is not None]
        if pairs:
            url += "?" + "&".join(pairs)
    data = None
    if method not in ("GET", "HEAD"):
        if headers.get("Content-Type") == JSON_PATCH and not isinstance(body, list):
            headers["Content-Type"] = STRATEGIC_MERGE_PATCH
        if body is not None:
            data = json.dumps(body, default=_json_default).encode()
    return url, headers, data


WATCH_READ = 1 << 16  # the most a watch stream's read asks for at once


def watch_lines(response: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
    """The non-empty lines of a watch stream, as bytes (JSON decodes them as they are).

    ``read1`` hands over what one chunk of the answer holds (or what arrived of it),
    undecoded: one read per chunk however many events it carries, and no copy of the
    buffer per line (the client's ``iter_resp_lines`` decodes each line to a string and
    copies what remains of its buffer after each one)."""
    rest = b""
    while True:
        data = response.read1(WATCH_READ, decode_content=False)
        if not data:
            break
        if rest:
            data = rest + data
        lines = data.split(b"\n")
        rest = lines.pop()
        for line in lines:
            if line.strip():
                yield line
    if rest.strip():
        yield rest  # a last line without its newline


class Rest:
    """Raw JSON over the official client's ApiClient (auth, TLS, kubeconfig), with the
    retry policy. ``once`` is one request; ``call`` retries what may succeed later."""

    def __init__(
        self,
        api: k8s.ApiClient,
        *,
        timeout_s: float = 30.0,
        policy: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        on_error: Callable[[str, str], None] = record_api_error,
        seed: int | None = None,
    ) -> None:
        self.api = api
        self.timeout_s = timeout_s
        self.policy = policy or RetryPolicy()
        self.sleep = sleep
        self.on_error = on_error
        self.rng = random.Random(seed)  # noqa: S311 - backoff jitter, not secrets
        self._stream: Any = None  # the response of the watch in progress, to interrupt it
        # The default timeouts of one request: connect within 5 s, each read within 30 s.
        self._timeout = urllib3.Timeout(connect=min(5.0, timeout_s), read=timeout_s)

    def _send(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None,
        body: Any,
        content_type: str | None,
        timeout: float | tuple[float, float] | None,
    ) -> urllib3.BaseHTTPResponse:
        """One request through the client's urllib3 pool (the ApiClient's own, so its
        TLS, proxy and pool size hold), built here: what ``ApiClient.param_serialize``
        and ``call_api`` would send (``wire_request``), without their per-call
        serialisation machinery."""
        api = self.api
        configuration = api.configuration
        throttle_token_refresh(configuration)
        url, headers, data = wire_request(api, method, path, query, body, content_type)
        if timeout is None:
            request_timeout = self._timeout
        elif isinstance(timeout, tuple):
            request_timeout = urllib3.Timeout(connect=timeout[0], read=timeout[1])
        else:
            request_timeout = urllib3.Timeout(total=timeout)
        try:
            return api.rest_client.pool_manager.request(
                method,
                url,
                body=data,
                headers=headers,
                timeout=request_timeout,
                preload_content=False,
            )
        except urllib3.exceptions.HTTPError as exc:
            raise ApiCallError(NO_ANSWER, f"{type(exc).__name__}: {exc}") from exc
        except OSError as exc:
            raise ApiCallError(NO_ANSWER, f"{type(exc).__name__}: {exc}") from exc

    def once(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
    ) -> Any:
        """One request; raises ApiCallError for anything but a 2xx answer.

        Written and read on a connection of the client's pool by ``pipeline`` (a batch
        of one), not through urllib3's ``urlopen`` and http.client's answer parsing: ~0.12
        ms of client CPU a PATCH instead of ~0.28 (an unsuspension, say). Through a
        proxy, urllib3's way."""
        if getattr(self.api.configuration, "proxy", None):
            response = self._send(method, path, query, body, content_type, None)
            try:
                data = response.data
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise ApiCallError(NO_ANSWER, f"{type(exc).__name__}: {exc}") from exc
            answer = _decoded(response.status, data, response.headers)
        else:
            answer = self._direct(method, path, query, body, content_type)
        if isinstance(answer, ApiCallError):
            raise answer
        return answer

    def _direct(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None,
        body: Any,
        content_type: str | None,
    ) -> Any:
        """One request on a pooled connection, its answer decoded (or its ApiCallError)."""
        api = self.api
        configuration = api.configuration
        throttle_token_refresh(configuration)
        url, headers, data = wire_request(api, method, path, query, body, content_type)
        pool = api.rest_client.pool_manager.connection_from_url(configuration.host)
        [answer], _reusable = self._exchange(
            pool, [pipeline.encode_request(url, method, headers, data)]
        )
        if isinstance(answer, pipeline.Unanswered):
            return ApiCallError(NO_ANSWER, str(answer))
        return _decoded(answer.status, answer.data, answer.headers)

    def pipelined(
        self, requests: Sequence[tuple[str, str, Any, str | None]]
    ) -> list[Any | ApiCallError]:
        """Several requests -- (method, path, JSON body, content type) -- written down one
        keep-alive connection of the pool at once, their answers read in order
        (``pipeline``): one try each, as ``once``; per request its decoded answer or the
        ApiCallError ``once`` would have raised. A request the connection ended before
        answering is sent again alone (the server may not have read it). Through a
        proxy, one request at a time."""
        if not requests:
            return []
        api = self.api
        configuration = api.configuration
        if getattr(configuration, "proxy", None):
            return [self._one(m, p, b, c) for m, p, b, c in requests]
        throttle_token_refresh(configuration)
        encoded = []
        for method, path, body, content_type in requests:
            url, headers, data = wire_request(api, method, path, None, body, content_type)
            encoded.append(pipeline.encode_request(url, method, headers, data))
        out: list[Any | ApiCallError] = [None] * len(requests)
        pool = api.rest_client.pool_manager.connection_from_url(configuration.host)
        for batch in pipeline.batches(encoded):
            # A connection that ends early is not reused: the next batch takes another.
            answers, _reusable = self._exchange(pool, [encoded[i] for i in batch])
            for index, answer in zip(batch, answers, strict=True):
                if isinstance(answer, pipeline.Unanswered):
                    out[index] = self._one(*requests[index])
                else:
                    out[index] = _decoded(answer.status, answer.data, answer.headers)
        return out

    def _one(self, method: str, path: str, body: Any, content_type: str | None) -> Any:
        try:
            return self.once(method, path, body=body, content_type=content_type)
        except ApiCallError as err:
            return err

    def _exchange(
        self, pool: Any, requests: list[bytes]
    ) -> tuple[list[pipeline.Answer | pipeline.Unanswered], bool]:
        """One batch on a connection taken from the pool (urllib3's own: its TLS and
        socket options), given back after if it may carry more."""
        try:
            conn = pool._get_conn(timeout=self.timeout_s)
        except urllib3.exceptions.HTTPError as exc:
            missing = pipeline.Unanswered(f"no connection: {exc}")
            return [missing] * len(requests), False
        reusable = False
        try:
            if conn.sock is None:
                conn.timeout = self._timeout.connect_timeout
                conn.connect()
            conn.sock.settimeout(self._timeout.read_timeout)
            answers, reusable = pipeline.exchange(conn.sock, requests)
            return answers, reusable
        except (OSError, urllib3.exceptions.HTTPError) as exc:
            return [pipeline.Unanswered(f"{type(exc).__name__}: {exc}")] * len(requests), False
        finally:
            if not reusable:
                conn.close()
            pool._put_conn(conn)

    def count(self, verb: str, err: ApiCallError) -> None:
        self.on_error(verb, err.label)

    def pause(self, err: ApiCallError, attempt: int, deadline: float) -> bool:
        """Wait before the next try; False when the budget does not allow another."""
        if attempt + 1 >= self.policy.max_attempts:
            return False
        wait = self.policy.backoff(attempt, self.rng)
        if err.status == 429 and err.retry_after is not None:
            wait = max(wait, min(err.retry_after, self.policy.max_retry_after_s))
        if time.monotonic() + wait > deadline:
            return False
        self.sleep(wait)
        return True

    def deadline(self) -> float:
        return time.monotonic() + self.policy.budget_s

    def call(
        self,
        verb: str,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
    ) -> Any:
        """A request retried while the error may pass (409, 429, 5xx, no answer).

        Only for requests that are safe to repeat: reads, and writes that are idempotent.
        """
        deadline, attempt = self.deadline(), 0
        while True:
            try:
                return self.once(method, path, query=query, body=body, content_type=content_type)
            except ApiCallError as err:
                self.count(verb, err)
                if not err.retryable or not self.pause(err, attempt, deadline):
                    raise
                attempt += 1

    def list_all(
        self, path: str, query: Mapping[str, Any] | None = None, *, page_size: int = PAGE_SIZE
    ) -> tuple[list[Obj], str]:
        """Every item of a collection, page by page; (items, resourceVersion).

        A continue token that expired (410) restarts the list: the pages of one list are
        one consistent snapshot, so they are never stitched across two.
        """
        restarts = 0
        while True:
            items: list[Obj] = []
            token: str | None = None
            try:
                while True:
                    page = self.call(
                        "list",
                        "GET",
                        path,
                        query={**(query or {}), "limit": page_size, "continue": token},
                    )
                    items.extend(page.get("items") or [])
                    meta = page.get("metadata") or {}
                    token = meta.get("continue") or None
                    if not token:
                        return items, str(meta.get("resourceVersion") or "")
            except ApiCallError as err:
                if err.status == 410 and token and restarts < 3:
                    restarts += 1
                    continue
                raise

    def stream(
        self, path: str, query: Mapping[str, Any], *, read_timeout_s: float
    ) -> Iterator[Obj]:
        """A watch: its events, one JSON object each, until the server ends the stream."""
        response = self._send("GET", path, query, None, None, (5.0, read_timeout_s))
        if response.status != 200:
            data = response.read()
            raise _error_from_response(response.status, data, response.headers)
        self._stream = response
        try:
            for line in watch_lines(response):
                try:
                    yield orjson.loads(line)
                except ValueError:
                    log.warning("ignoring a watch line that is not JSON: %.200r", line)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiCallError(NO_ANSWER, f"watch stream broke: {exc}") from exc
        finally:
            with contextlib.suppress(Exception):
                response.release_conn()

    # --- JSON helpers ------------------------------------------------------------------------

    def with_api(self, api: k8s.ApiClient) -> Rest:
        """A Rest over another connection pool, with this one's policy and counters."""
        return Rest(
            api,
            timeout_s=self.timeout_s,
            policy=self.policy,
            sleep=self.sleep,
            on_error=self.on_error,
        )

    def interrupt(self) -> None:
        """End the watch stream in progress (if any) from another thread."""
        response = self._stream
        if response is not None:
            with contextlib.suppress(Exception):
                response.shutdown()


def dedicated_api(api: k8s.ApiClient, *, pool_size: int, purpose: str) -> k8s.ApiClient:
    """A second ApiClient with the same credentials and a pool of its own (watches hold
    their connections open for minutes; writes must not queue behind them)."""
    configuration = copy.copy(api.configuration)
    configuration.connection_pool_maxsize = pool_size
    out = k8s.ApiClient(configuration)
    out.user_agent = f"{api.user_agent} ({purpose})"
    return out


def ensure_pool(api: k8s.ApiClient, size: int) -> None:
    """Let ``size`` requests of this client run at once."""
    current = getattr(api.configuration, "connection_pool_maxsize", None) or 0
    if current < size:
        api.configuration.connection_pool_maxsize = size
        api.rest_client = type(api.rest_client)(api.configuration)


# The kubeconfig and in-cluster loaders install a hook that the client calls before every
# request to refresh the bearer token. Each call sets the configuration's host again,
# and that setter reads every environment variable for proxy settings: about a third of
# the CPU of an unsuspend PATCH. The loaders refresh a token well ahead of its end (five
# minutes before a kubeconfig token expires; the in-cluster token file is re-read every
# minute), so calling the hook at most once per TOKEN_CHECK_S per configuration loses
# nothing.
TOKEN_CHECK_S = 1.0


class ThrottledRefresh:
    """A token refresh hook called at most once per ``every_s`` per configuration.

    The loaders' hook installs itself again each time it runs; the newest one is kept
    and this wrapper put back in its place."""

    def __init__(
        self,
        hook: Callable[[Any], None],
        *,
        every_s: float = TOKEN_CHECK_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.hook = hook
        self.every_s = every_s
        self.clock = clock
        self._last: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def __call__(self, configuration: Any) -> None:
        last = self._last.get(configuration)
        if last is not None and self.clock() - last < self.every_s:
            return
        with self._lock:
            last = self._last.get(configuration)
            if last is not None and self.clock() - last < self.every_s:
                return
            self.hook(configuration)
            self._last[configuration] = self.clock()
            installed = getattr(configuration, "refresh_api_key_hook", None)
            if installed is not self:
                if installed is not None and not isinstance(installed, ThrottledRefresh):
                    self.hook = installed
                configuration.refresh_api_key_hook = self


def throttle_token_refresh(configuration: Any) -> None:
    """Wrap the configuration's token refresh hook (if any) in a ThrottledRefresh. Cheap
    enough to call before each request: a hook that a racing refresh left unwrapped is
    wrapped again."""
    hook = getattr(configuration, "refresh_api_key_hook", None)
    if hook is not None and not isinstance(hook, ThrottledRefresh):
        configuration.refresh_api_key_hook = ThrottledRefresh(hook)


def connect(kubeconfig: str | None = None, *, user_agent: str = "koord-queue") -> k8s.ApiClient:
    """An ApiClient from a kubeconfig file, or the in-cluster service account.

    urllib3's own retries are off: the retry layer above decides, counts and logs. The
    token refresh hook is throttled (ThrottledRefresh)."""
    configuration = k8s.Configuration()
    try:
        if kubeconfig:
            k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        else:
            k8s_config.load_incluster_config(client_configuration=configuration)
    except (k8s_config.ConfigException, OSError) as exc:
        where = f"the kubeconfig {kubeconfig}" if kubeconfig else "the in-cluster service account"
        raise ClusterError(
            f"cannot reach Kubernetes through {where}: {exc}", retryable=False
        ) from exc
    configuration.retries = False
    throttle_token_refresh(configuration)
    api = k8s.ApiClient(configuration)
    api.user_agent = user_agent
    return api


# --- list + watch ------------------------------------------------------------------------
