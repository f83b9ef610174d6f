"""What ``Rest`` puts on the wire, against a tiny loopback HTTP server.

``Rest`` builds its requests itself (``wire_request``) and sends them through the
ApiClient's urllib3 pool, instead of the client's ``param_serialize`` + ``call_api``: these
tests pin the method, path, query, headers (auth, content types), body and the error
mapping, and that the request is the one the client would have built.
"""

from __future__ import annotations

import datetime
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from kubernetes import client as k8s

from queueing.cluster.kubernetes.client import (
    MERGE_PATCH,
    NO_ANSWER,
    ApiCallError,
    Rest,
    RetryPolicy,
    ensure_pool,
    wire_request,
)

pytestmark = pytest.mark.db_independent

FAST = RetryPolicy(budget_s=5.0, base_s=0.001, cap_s=0.002, max_retry_after_s=3.0)


@dataclass
class Seen:
    method: str
    path: str
    query: list[tuple[str, str]]
    raw_query: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Answer:
    status: int = 200
    body: bytes = b"{}"
    headers: dict[str, str] = field(default_factory=dict)
    hang: threading.Event | None = None  # hold the answer until set (a timeout)


class Loopback:
    """An HTTP server on 127.0.0.1 that records each request and answers from a script
    (the last answer repeats)."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.answers: list[Answer] = [Answer()]
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                owner.seen.append(
                    Seen(
                        self.command,
                        parts.path,
                        parse_qsl(parts.query, keep_blank_values=True),
                        parts.query,
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                    )
                )
                answer = owner.answers.pop(0) if len(owner.answers) > 1 else owner.answers[0]
                if answer.hang is not None:
                    answer.hang.wait(10)
                try:
                    self.send_response(answer.status)
                    for name, value in answer.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(answer.body)))
                    self.end_headers()
                    self.wfile.write(answer.body)
                except (BrokenPipeError, ConnectionResetError):
                    # A client that timed out has hung up (the timeout cases): nothing to
                    # answer, and no traceback on stderr.
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self.thread.start()

    def script(self, *answers: Answer) -> None:
        self.answers = list(answers)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server() -> Iterator[Loopback]:
    loop = Loopback()
    yield loop
    loop.close()


def api_for(url: str, *, token: str | None = None) -> k8s.ApiClient:
    configuration = k8s.Configuration(host=url)
    configuration.retries = False
    if token is not None:
        configuration.api_key = {"authorization": token}
        configuration.api_key_prefix = {"authorization": "Bearer"}
    api = k8s.ApiClient(configuration)
    api.user_agent = "kq-test"
    return api


@dataclass
class Errors:
    seen: list[tuple[str, str]] = field(default_factory=list)

    def __call__(self, verb: str, label: str) -> None:
        self.seen.append((verb, label))


@pytest.fixture
def errors() -> Errors:
    return Errors()


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def rest(server: Loopback, errors: Errors, sleeps: list[float]) -> Iterator[Rest]:
    api = api_for(server.url, token="s3cret")
    yield Rest(api, policy=FAST, sleep=sleeps.append, on_error=errors, seed=1, timeout_s=5.0)
    api.close()


# --- method, path, query, headers, body --------------------------------------------------


def test_get_sends_method_path_and_query(server: Loopback, rest: Rest) -> None:
    server.script(Answer(body=b'{"items": []}'))
    out = rest.once(
        "GET",
        "/api/v1/namespaces/ns/pods",
        query={
            "labelSelector": "a=b,c in (d)",
            "limit": 500,
            "watch": False,
            "continue": None,
            "resourceVersion": "12",
        },
    )
    assert out == {"items": []}
    (seen,) = server.seen
    assert seen.method == "GET"
    assert seen.path == "/api/v1/namespaces/ns/pods"
    assert seen.query == [
        ("labelSelector", "a=b,c in (d)"),
        ("limit", "500"),
        ("watch", "false"),
        ("resourceVersion", "12"),
    ]
    assert "continue" not in seen.raw_query  # None values are left out
    assert seen.body == b""
    assert "content-type" not in seen.headers


def test_headers_carry_accept_user_agent_and_bearer_token(server: Loopback, rest: Rest) -> None:
    rest.once("GET", "/api/v1/nodes")
    headers = server.seen[0].headers
    assert headers["accept"] == "application/json"
    assert headers["user-agent"] == "kq-test"
    assert headers["authorization"] == "Bearer s3cret"


def test_no_authorization_header_without_a_token(server: Loopback) -> None:
    api = api_for(server.url)
    try:
        Rest(api, policy=FAST).once("GET", "/api/v1/nodes")
    finally:
        api.close()
    assert "authorization" not in server.seen[0].headers


def test_the_refresh_hook_renews_the_token(server: Loopback) -> None:
    api = api_for(server.url, token="old")
    calls: list[int] = []

    def refresh(configuration: Any) -> None:
        calls.append(1)
        configuration.api_key["authorization"] = "new"

    api.configuration.refresh_api_key_hook = refresh
    try:
        Rest(api, policy=FAST).once("GET", "/api/v1/nodes")
    finally:
        api.close()
    assert calls == [1]
    assert server.seen[0].headers["authorization"] == "Bearer new"


def test_default_headers_and_cookie_of_the_api_client_are_sent(server: Loopback) -> None:
    api = api_for(server.url)
    api.set_default_header("X-Extra", "1")
    api.cookie = "session=abc"
    try:
        Rest(api, policy=FAST).once("GET", "/api/v1/nodes")
    finally:
        api.close()
    assert server.seen[0].headers["x-extra"] == "1"
    assert server.seen[0].headers["cookie"] == "session=abc"


def test_post_sends_json(server: Loopback, rest: Rest) -> None:
    body = {"metadata": {"name": "j", "labels": {"x": "ü"}}, "spec": {"parallelism": 2}}
    server.script(Answer(status=201, body=b'{"metadata": {"name": "j"}}'))
    out = rest.once("POST", "/apis/batch/v1/namespaces/ns/jobs", body=body)
    assert out == {"metadata": {"name": "j"}}
    seen = server.seen[0]
    assert seen.method == "POST"
    assert seen.headers["content-type"] == "application/json"
    assert json.loads(seen.body) == body
    assert int(seen.headers["content-length"]) == len(seen.body)


@pytest.mark.parametrize(
    ("content_type", "body", "sent_as"),
    [
        (MERGE_PATCH, {"spec": {"suspend": False}}, MERGE_PATCH),
        (
            "application/strategic-merge-patch+json",
            {"spec": {"suspend": False}},
            "application/strategic-merge-patch+json",
        ),
        (
            "application/json-patch+json",
            [{"op": "replace", "path": "/spec/suspend", "value": False}],
            "application/json-patch+json",
        ),
        # The client sends a JSON patch that is not a list as a strategic merge patch.
        (
            "application/json-patch+json",
            {"spec": {"suspend": False}},
            "application/strategic-merge-patch+json",
        ),
    ],
)
def test_patch_content_types(
    server: Loopback, rest: Rest, content_type: str, body: Any, sent_as: str
) -> None:
    rest.once("PATCH", "/apis/batch/v1/namespaces/ns/jobs/j", body=body, content_type=content_type)
    seen = server.seen[0]
    assert seen.method == "PATCH"
    assert seen.headers["content-type"] == sent_as
    assert json.loads(seen.body) == body


def test_delete_without_a_body(server: Loopback, rest: Rest) -> None:
    rest.once("DELETE", "/apis/batch/v1/namespaces/ns/jobs/j", query={"propagationPolicy": "X"})
    seen = server.seen[0]
    assert (seen.method, seen.body) == ("DELETE", b"")
    assert "content-type" not in seen.headers
    assert seen.query == [("propagationPolicy", "X")]


def test_a_datetime_in_a_body_travels_as_iso8601(server: Loopback, rest: Rest) -> None:
    at = datetime.datetime(2026, 12, 4, 13, 0, tzinfo=datetime.UTC)
    rest.once("POST", "/api/v1/namespaces/ns/events", body={"eventTime": at})
    assert json.loads(server.seen[0].body) == {"eventTime": at.isoformat()}


def test_an_empty_answer_is_none(server: Loopback, rest: Rest) -> None:
    server.script(Answer(body=b""))
    assert rest.once("DELETE", "/api/v1/namespaces/ns/pods/p") is None


@pytest.mark.parametrize(
    ("method", "query", "body", "content_type"),
    [
        ("GET", {"labelSelector": "a in (b,c)", "limit": 5, "watch": True, "x": None}, None, None),
        ("POST", None, {"a": [1, 2, {"b": None}], "t": "é"}, None),
        ("PATCH", {"fieldManager": "kq"}, {"spec": {"suspend": False}}, MERGE_PATCH),
        ("PATCH", None, {"spec": {}}, "application/json-patch+json"),
        ("DELETE", {"propagationPolicy": "Background"}, None, None),
        ("PUT", None, {}, None),
    ],
)
def test_the_request_is_the_one_the_client_would_build(
    method: str, query: dict[str, Any] | None, body: Any, content_type: str | None
) -> None:
    api = api_for("https://example.invalid:6443", token="tok")
    api.cookie = "c=1"
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type or "application/json"
    params = api.param_serialize(
        method=method,
        resource_path="/apis/x/v1/things",
        query_params=[(k, v) for k, v in (query or {}).items() if v is not None],
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    their_method, their_url, their_headers, their_body, _ = params
    url, ours, data = wire_request(api, method, "/apis/x/v1/things", query, body, content_type)
    assert (method, url) == (their_method, their_url)
    rewritten = their_headers.get("Content-Type") == "application/json-patch+json"
    if rewritten and not isinstance(their_body, list):  # the client's rest layer does so
        their_headers["Content-Type"] = "application/strategic-merge-patch+json"
    assert ours == their_headers
    expected = None if body is None or method == "GET" else json.dumps(their_body).encode()
    assert data == expected


# --- answers and errors ----------------------------------------------------------------


def test_an_error_answer_maps_status_message_and_reason(server: Loopback, rest: Rest) -> None:
    status = {"kind": "Status", "message": 'jobs "j" not found', "reason": "NotFound"}
    server.script(Answer(status=404, body=json.dumps(status).encode()))
    with pytest.raises(ApiCallError) as caught:
        rest.once("GET", "/apis/batch/v1/namespaces/ns/jobs/j")
    err = caught.value
    assert (err.status, err.reason, str(err)) == (404, "NotFound", 'jobs "j" not found')
    assert not err.retryable


def test_an_error_without_a_json_body(server: Loopback, rest: Rest) -> None:
    server.script(Answer(status=502, body=b"<html>bad gateway</html>"))
    with pytest.raises(ApiCallError) as caught:
        rest.once("GET", "/api/v1/nodes")
    assert (caught.value.status, str(caught.value)) == (502, "HTTP 502")
    assert caught.value.retryable


def test_call_retries_a_conflict_and_counts_it(
    server: Loopback, rest: Rest, errors: Errors, sleeps: list[float]
) -> None:
    server.script(Answer(status=409, body=b'{"reason": "Conflict"}'), Answer(body=b'{"ok": 1}'))
    assert rest.call("patch", "PATCH", "/x", body={"a": 1}) == {"ok": 1}
    assert errors.seen == [("patch", "409")]
    assert len(sleeps) == 1
    assert [s.method for s in server.seen] == ["PATCH", "PATCH"]
    assert server.seen[0].body == server.seen[1].body  # the same request again


def test_a_429_waits_as_retry_after_says(
    server: Loopback, rest: Rest, errors: Errors, sleeps: list[float]
) -> None:
    server.script(
        Answer(status=429, headers={"Retry-After": "2"}, body=b'{"reason": "TooManyRequests"}'),
        Answer(body=b"[]"),
    )
    assert rest.call("list", "GET", "/x") == []
    assert errors.seen == [("list", "429")]
    assert sleeps == [2.0]


def test_retry_after_seconds_in_the_status_details(server: Loopback, rest: Rest) -> None:
    status = {"reason": "TooManyRequests", "details": {"retryAfterSeconds": 1}}
    server.script(Answer(status=429, body=json.dumps(status).encode()))
    with pytest.raises(ApiCallError) as caught:
        rest.once("GET", "/x")
    assert caught.value.retry_after == 1.0


def test_5xx_is_retried_until_it_passes(server: Loopback, rest: Rest, errors: Errors) -> None:
    server.script(Answer(status=500), Answer(status=503), Answer(body=b'{"done": true}'))
    assert rest.call("get", "GET", "/x") == {"done": True}
    assert errors.seen == [("get", "500"), ("get", "503")]


def test_gone_and_not_found_are_not_retried(server: Loopback, rest: Rest, errors: Errors) -> None:
    server.script(Answer(status=410, body=b'{"reason": "Expired"}'))
    with pytest.raises(ApiCallError) as caught:
        rest.call("list", "GET", "/x")
    assert caught.value.status == 410
    assert errors.seen == [("list", "410")]
    assert len(server.seen) == 1


def test_a_410_mid_list_restarts_the_list(server: Loopback, rest: Rest) -> None:
    server.script(
        Answer(body=b'{"items": [1], "metadata": {"continue": "t1"}}'),
        Answer(status=410, body=b'{"reason": "Expired"}'),
        Answer(body=b'{"items": [1], "metadata": {"continue": "t2"}}'),
        Answer(body=b'{"items": [2], "metadata": {"resourceVersion": "9"}}'),
    )
    assert rest.list_all("/x", page_size=1) == ([1, 2], "9")
    assert [dict(s.query).get("continue") for s in server.seen] == [None, "t1", None, "t2"]


def test_invalid_json_is_no_answer(server: Loopback, rest: Rest) -> None:
    server.script(Answer(body=b"{not json"))
    with pytest.raises(ApiCallError) as caught:
        rest.once("GET", "/x")
    assert caught.value.status == NO_ANSWER


def test_a_read_timeout_is_no_answer(server: Loopback, errors: Errors) -> None:
    release = threading.Event()
    server.script(Answer(hang=release))
    api = api_for(server.url)
    once = Rest(api, policy=FAST, timeout_s=0.2, on_error=errors)
    try:
        with pytest.raises(ApiCallError) as caught:
            once.once("GET", "/x")
    finally:
        release.set()
        api.close()
    assert caught.value.status == NO_ANSWER
    assert caught.value.label == "timeout"
    assert caught.value.retryable


def test_a_refused_connection_is_no_answer() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    api = api_for(f"http://127.0.0.1:{port}")
    try:
        with pytest.raises(ApiCallError) as caught:
            Rest(api, policy=FAST).once("GET", "/x")
    finally:
        api.close()
    assert caught.value.status == NO_ANSWER


# --- pools and streams -----------------------------------------------------------------


def test_a_resized_pool_is_the_one_used(server: Loopback, rest: Rest) -> None:
    ensure_pool(rest.api, 64)
    assert rest.api.rest_client.pool_manager.connection_pool_kw["maxsize"] == 64
    rest.once("GET", "/x")
    pools = rest.api.rest_client.pool_manager.pools
    assert len(pools) == 1  # the request went through the new pool manager


def test_a_watch_streams_its_lines(server: Loopback, rest: Rest) -> None:
    lines = [{"type": "ADDED", "object": {"n": i}} for i in range(3)]
    server.script(Answer(body=b"".join(json.dumps(x).encode() + b"\n" for x in lines)))
    got = list(rest.stream("/x", {"watch": True, "resourceVersion": "5"}, read_timeout_s=5))
    assert got == lines
    assert server.seen[0].query == [("watch", "true"), ("resourceVersion", "5")]


def test_a_watch_that_is_refused_raises_its_status(server: Loopback, rest: Rest) -> None:
    server.script(Answer(status=410, body=b'{"reason": "Expired", "message": "too old"}'))
    with pytest.raises(ApiCallError) as caught:
        list(rest.stream("/x", {"watch": True}, read_timeout_s=5))
    assert (caught.value.status, str(caught.value)) == (410, "too old")


def chunked_answer(chunks: list[bytes]) -> tuple[str, socket.socket]:
    """A one-shot HTTP server answering with ``chunks``, each written (and flushed) as one
    chunk of a chunked answer, as a watch streams."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            )
            for chunk in chunks:
                conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            conn.sendall(b"0\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}", listener


def test_watch_lines_are_whole_however_the_chunks_cut_them() -> None:
    events = [{"type": "ADDED", "object": {"n": i, "s": "é" * i}} for i in range(5)]
    wire = b"".join(json.dumps(e, ensure_ascii=False).encode() + b"\n" for e in events)
    cut = wire.index("é".encode()) + 1  # inside a two-byte character
    chunks = [
        wire[:cut],  # a line cut in the middle of a character
        wire[cut : wire.index(b"\n", cut) + 1],  # the rest of it
        b"\n",  # an empty line
        b"not json\n",  # skipped
    ]
    rest_start = sum(map(len, chunks[:2]))
    second = wire.index(b"\n", wire.index(b"\n", rest_start) + 1) + 1
    chunks.append(wire[rest_start:second])  # two lines in one chunk
    chunks.append(wire[second:-1])  # the last line, its newline missing
    url, listener = chunked_answer(chunks)
    try:
        got = list(Rest(api_for(url)).stream("/x", {"watch": True}, read_timeout_s=5))
    finally:
        listener.close()
    assert got == events
