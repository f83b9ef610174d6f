"""Several small requests down one keep-alive connection at once (HTTP/1.1 pipelining).

The telling writes ~40,000 Events per end-to-end run, one POST each, and each went
through urllib3 and http.client alone: building the request, a ``sendall``, a blocking
read of the answer (a wake-up of the writer and of the API server's handler per
Event), and http.client's header parsing through the ``email`` package. ~0.45 ms of the
watcher's CPU per Event, 80 % of it in that stack.

Here a batch of requests is written in one ``sendall`` on a connection of the client's
own urllib3 pool (its TLS, timeouts and credentials hold), and the answers are read
back in order from one buffered reader. An HTTP/1.1 server answers pipelined requests
one after the other, in order (RFC 9112 §9.3.2; Go's net/http and so the API server
does); this reads each answer's status line, its headers and its body (Content-Length
or chunked). A server that closes the connection after an answer (``Connection:
close``, or a broken stream) leaves the later requests without one: they are returned
as ``Unanswered`` for the caller to send again the ordinary way, since the server may
not have read them.

Only for requests that are safe to send this way: the caller decides what a lost
answer means (Events: advice; a resent create comes back 409 and is read, as after a
restart). Not used through a proxy (the request line would differ): the caller falls
back to one request at a time.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

#: The most requests written before their answers are read, and the most bytes: both
#: sides' socket buffers hold a batch and its answers, so neither blocks writing while
#: the other writes too.
MAX_REQUESTS = 32
MAX_BYTES = 48 * 1024
_MAX_LINE = 65536
_MAX_HEADERS = 100


class Unanswered(Exception):
    """The connection ended before this request's answer (it may not have been read)."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: Mapping[str, str]  # names in lower case
    data: bytes


def encode_request(url: str, method: str, headers: Mapping[str, str], body: bytes | None) -> bytes:
    """One HTTP/1.1 request as bytes: the request line (path and query of ``url``), Host,
    the given headers, Content-Length, the body."""
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    # Identity, as http.client asks by default: no compressed answer to undo.
    lines = [f"{method} {target} HTTP/1.1", f"Host: {parts.netloc}", "Accept-Encoding: identity"]
    for name, value in headers.items():
        if "\r" in name or "\n" in name or "\r" in str(value) or "\n" in str(value):
            raise ValueError(f"a header may not hold a line break: {name!r}")
        lines.append(f"{name}: {value}")
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body or b'')}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + (body or b"")


def read_answer(reader: Any) -> tuple[Answer, bool]:
    """One answer from a buffered binary reader: (the answer, whether the connection
    stays open after it). Raises ``Unanswered`` when the stream ends first, ValueError
    for what is not an HTTP/1.x answer."""
    while True:
        line = reader.readline(_MAX_LINE + 1)
        if not line:
            raise Unanswered("the connection closed before the answer")
        words = line.split(None, 2)
        if len(words) < 2 or not words[0].startswith(b"HTTP/1."):
            raise ValueError(f"not an HTTP answer: {line[:80]!r}")
        status = int(words[1])
        headers: dict[str, str] = {}
        while True:
            field = reader.readline(_MAX_LINE + 1)
            if not field:
                raise Unanswered("the connection closed inside an answer's headers")
            if field in (b"\r\n", b"\n"):
                break
            if len(field) > _MAX_LINE or len(headers) > _MAX_HEADERS:
                raise ValueError("an answer's headers are too large")
            name, colon, value = field.decode("latin-1").partition(":")
            if colon:
                headers[name.strip().lower()] = value.strip()
        if 100 <= status < 200:  # an interim answer: the real one follows
            continue
        break
    keep = words[0] != b"HTTP/1.0" and headers.get("connection", "").lower() != "close"
    if words[0] == b"HTTP/1.0" and headers.get("connection", "").lower() == "keep-alive":
        keep = True
    if "chunked" in headers.get("transfer-encoding", "").lower():
        data = _read_chunked(reader)
    elif "content-length" in headers:
        length = int(headers["content-length"])
        data = reader.read(length) if length else b""
        if len(data) != length:
            raise Unanswered("the connection closed inside an answer's body")
    elif status in (204, 304):
        data = b""
    else:  # the body runs to the end of the connection
        data, keep = reader.read(), False
    return Answer(status, headers, data), keep


def _read_chunked(reader: Any) -> bytes:
    out: list[bytes] = []
    while True:
        size_line = reader.readline(_MAX_LINE + 1)
        if not size_line:
            raise Unanswered("the connection closed inside a chunked answer")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while True:  # trailers, then the blank line
                trailer = reader.readline(_MAX_LINE + 1)
                if trailer in (b"\r\n", b"\n", b""):
                    return b"".join(out)
        chunk = reader.read(size)
        if len(chunk) != size:
            raise Unanswered("the connection closed inside a chunk")
        out.append(chunk)
        reader.readline(_MAX_LINE + 1)  # the chunk's CRLF


def batches(encoded: Sequence[bytes]) -> list[list[int]]:
    """Indexes of ``encoded`` in batches of at most MAX_REQUESTS and MAX_BYTES (a request
    larger than that goes alone)."""
    out: list[list[int]] = []
    size = 0
    for index, request in enumerate(encoded):
        if not out or len(out[-1]) >= MAX_REQUESTS or size + len(request) > MAX_BYTES:
            out.append([])
            size = 0
        out[-1].append(index)
        size += len(request)
    return out


def exchange(
    sock: socket.socket, requests: Sequence[bytes]
) -> tuple[list[Answer | Unanswered], bool]:
    """Write ``requests`` at once and read their answers in order: (one answer or
    ``Unanswered`` per request, whether the connection may carry more). The requests
    after a closing answer, a broken stream or a garbled answer are ``Unanswered``."""
    sock.sendall(b"".join(requests))
    out: list[Answer | Unanswered] = []
    with sock.makefile("rb") as reader:
        for _ in requests:
            try:
                answer, keep = read_answer(reader)
            except (Unanswered, OSError, ValueError) as exc:
                missing = exc if isinstance(exc, Unanswered) else Unanswered(str(exc))
                out.extend([missing] * (len(requests) - len(out)))
                return out, False
            out.append(answer)
            if not keep:
                gone = Unanswered("the server closed the connection after an earlier answer")
                out.extend([gone] * (len(requests) - len(out)))
                return out, False
    return out, True
