"""Pipelined requests (``queueing.cluster.kubernetes.pipeline``, ``Rest.pipelined``): the
telling's Event POSTs written down one keep-alive connection at once, the answers read
in order; what a connection leaves unanswered is sent again alone."""

from __future__ import annotations

import io
import socket
import socketserver
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from queueing.cluster.base import JobRef
from queueing.cluster.events import KubeEvent
from queueing.cluster.kubernetes import pipeline
from queueing.cluster.kubernetes.client import ApiCallError
from queueing.cluster.kubernetes.events import EventRecorder
from tests.fakekube import FakeKube
from tests.kube.conftest import make_adapter
from tests.kube.test_events import events_of

# --- the answer reader --------------------------------------------------------------------


def read_all(raw: bytes, count: int) -> list[tuple[Any, bool]]:
    reader = io.BufferedReader(io.BytesIO(raw))
    return [pipeline.read_answer(reader) for _ in range(count)]


def test_answers_by_length_chunked_and_after_an_interim_one() -> None:
    raw = (
        b"HTTP/1.1 201 Created\r\nContent-Length: 7\r\nContent-Type: application/json\r\n\r\n"
        b'{"a":1}'
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'3\r\n{"b\r\n4;ext=1\r\n":2}\r\n0\r\nX-Trailer: t\r\n\r\n'
        b"HTTP/1.1 204 No Content\r\n\r\n"
    )
    (first, k1), (second, k2), (third, k3) = read_all(raw, 3)
    assert (first.status, first.data, first.headers["content-type"]) == (
        201,
        b'{"a":1}',
        "application/json",
    )
    assert (second.status, second.data) == (200, b'{"b":2}')
    assert (third.status, third.data) == (204, b"")
    assert (k1, k2, k3) == (True, True, True)


def test_a_closing_answer_and_http_1_0_say_the_connection_ends() -> None:
    [(answer, keep)] = read_all(
        b"HTTP/1.1 409 Conflict\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}", 1
    )
    assert (answer.status, keep) == (409, False)
    [(answer, keep)] = read_all(b"HTTP/1.0 200 OK\r\n\r\nto the end", 1)
    assert (answer.data, keep) == (b"to the end", False)
    [(answer, keep)] = read_all(
        b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", 1
    )
    assert keep


def test_a_cut_answer_is_unanswered_and_garbage_is_refused() -> None:
    with pytest.raises(pipeline.Unanswered):
        read_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", 1)
    with pytest.raises(pipeline.Unanswered):
        read_all(b"", 1)
    with pytest.raises(ValueError, match="not an HTTP answer"):
        read_all(b"SSH-2.0-OpenSSH\r\n", 1)


def test_requests_are_encoded_with_host_and_length_and_batched_by_count_and_size() -> None:
    raw = pipeline.encode_request(
        "http://h:8080/api/v1/namespaces/a/events?x=1",
        "POST",
        {"Accept": "application/json"},
        b"{}",
    )
    assert raw == (
        b"POST /api/v1/namespaces/a/events?x=1 HTTP/1.1\r\nHost: h:8080\r\n"
        b"Accept-Encoding: identity\r\n"
        b"Accept: application/json\r\nContent-Length: 2\r\n\r\n{}"
    )
    with pytest.raises(ValueError, match="line break"):
        pipeline.encode_request("http://h/", "GET", {"X": "a\r\nB: c"}, None)
    small = [b"x" * 100] * (pipeline.MAX_REQUESTS + 5)
    assert [len(b) for b in pipeline.batches(small)] == [pipeline.MAX_REQUESTS, 5]
    large = [b"x" * (pipeline.MAX_BYTES // 2 + 1)] * 3
    assert pipeline.batches(large) == [[0], [1], [2]]


# --- against servers ------------------------------------------------------------------------


def test_the_recorder_creates_a_batch_down_one_connection(fake: FakeKube) -> None:
    """Seventy new Events (three pipelined batches), one of them twice and one that
    exists already (409, then read and bumped): every one is written, on few
    connections."""
    fake.add_namespace("team-a")
    cluster = make_adapter(fake.url)
    recorder = EventRecorder(cluster.rest)
    refs = [JobRef("Job", "batch/v1", "team-a", f"j{i}", f"uid-{i}") for i in range(70)]
    stories = [KubeEvent(ref, "Queued", "Queued in queue q of quota a.") for ref in refs]
    assert EventRecorder(cluster.rest).record([stories[5]]) == 1  # another recorder's
    before = fake.log.last_seq
    assert recorder.record([*stories, stories[3]]) == 71
    for i, story in enumerate(stories):
        [event] = events_of(fake, "team-a", story.ref.name)
        assert event["count"] == (2 if i in (3, 5) else 1), (i, event["count"])
    posts = [e for e in fake.log_entries(before, types=["request"]) if e["method"] == "POST"]
    accepted = {e["status"] for e in posts}
    assert (len(posts), accepted) == (70, {201, 409})
    cluster.api.close()


class _Closer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    """An HTTP/1.1 server whose first connection answers one request, then closes it (as
    a server going away does); later connections answer every request."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _CloserHandler)
        self.connections = 0
        self.requests: list[bytes] = []
        self.lock = threading.Lock()


class _CloserHandler(socketserver.StreamRequestHandler):
    server: _Closer

    def handle(self) -> None:
        with self.server.lock:
            self.server.connections += 1
            first = self.server.connections == 1
        while True:
            line = self.rfile.readline()
            if not line:
                return
            length = 0
            while (header := self.rfile.readline()) not in (b"\r\n", b""):
                if header.lower().startswith(b"content-length:"):
                    length = int(header.split(b":")[1])
            body = self.rfile.read(length)
            with self.server.lock:
                self.server.requests.append(body)
            answer = b'{"seen":%d}' % len(self.server.requests)
            close = b"Connection: close\r\n" if first else b""
            self.wfile.write(
                b"HTTP/1.1 201 Created\r\n%sContent-Length: %d\r\n\r\n%s"
                % (close, len(answer), answer)
            )
            if first:
                return


@pytest.fixture
def closer() -> Iterator[_Closer]:
    server = _Closer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_what_a_closed_connection_left_unanswered_is_sent_again_alone(closer: _Closer) -> None:
    port = closer.server_address[1]
    cluster = make_adapter(f"http://127.0.0.1:{port}")
    requests = [("POST", "/api/v1/namespaces/a/events", {"n": i}, None) for i in range(4)]
    answers = cluster.rest.pipelined(requests)
    assert not any(isinstance(a, ApiCallError) for a in answers), answers
    # The first answered on the pipelined connection; the three it dropped, once each.
    assert sorted(closer.requests) == sorted(b'{"n": %d}' % i for i in range(4))
    first = answers[0]
    assert isinstance(first, dict)
    assert first["seen"] == 1
    assert closer.connections >= 2
    cluster.api.close()


def test_a_refused_connection_is_an_error_per_request() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cluster = make_adapter(f"http://127.0.0.1:{port}")
    answers = cluster.rest.pipelined([("POST", "/api/v1/namespaces/a/events", {}, None)] * 2)
    assert [a.status for a in answers] == [0, 0]  # NO_ANSWER, as once() says it
    cluster.api.close()


def test_one_request_and_a_pipelined_batch_over_tls(tmp_path: Any) -> None:
    """The direct path takes its connection from urllib3's pool: TLS, with the CA of the
    configuration, is urllib3's, and an untrusted server is no answer."""
    import http.server
    import ssl

    from kubernetes import client as k8s

    from queueing.cluster.kubernetes.client import Rest
    from queueing.webhookcert import issue

    cert = issue(["localhost"], ips=["127.0.0.1"])
    (tmp_path / "ca.pem").write_bytes(cert.ca_pem)
    (tmp_path / "cert.pem").write_bytes(cert.cert_pem)
    (tmp_path / "key.pem").write_bytes(cert.key_pem)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            data = self.rfile.read(length)
            self.send_response(201)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:

        def rest(ca: str | None) -> Rest:
            configuration = k8s.Configuration()
            configuration.host = f"https://127.0.0.1:{server.server_address[1]}"
            configuration.ssl_ca_cert = ca
            configuration.retries = False
            return Rest(k8s.ApiClient(configuration), timeout_s=5.0)

        trusted = rest(str(tmp_path / "ca.pem"))
        assert trusted.once("POST", "/x", body={"n": 1}) == {"n": 1}
        batch = [("POST", "/x", {"n": i}, None) for i in range(5)]
        assert trusted.pipelined(batch) == [{"n": i} for i in range(5)]
        with pytest.raises(ApiCallError) as refused:
            rest(None).once("POST", "/x", body={"n": 1})  # the system's CAs do not know it
        assert refused.value.status == 0
    finally:
        server.shutdown()
        server.server_close()
