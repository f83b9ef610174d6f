"""Exit codes a script can rely on (docs/cli.md lists them) and the error that carries one."""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    OK = 0
    ERROR = 1  # the server failed (5xx) or answered something kq cannot read
    USAGE = 2  # bad command line, or no URL/token configured
    NOT_FOUND = 3  # no such workload, queue, quota (or not yours: the API says 404 for both)
    INVALID = 4  # the server refused the request as asked (400, 409, 412)
    UNAUTHENTICATED = 5  # no token, or an unknown, revoked or expired one (401)
    FORBIDDEN = 6  # your role may not do this (403); a stream refusing you (4403)
    UNREACHABLE = 7  # no answer from the server (connection refused, timeout, TLS)
    THROTTLED = 8  # too many requests (429); retry after the time given
    AMBIGUOUS = 9  # a name matches more than one workload; give --namespace or the id
    TIMEOUT = 10  # `kq watch --timeout` ran out before `--count` updates arrived


class KqError(Exception):
    """A failure to report in one line on stderr, with its exit code."""

    def __init__(self, message: str, code: Exit = Exit.ERROR, body: object = None) -> None:
        super().__init__(message)
        self.code = code
        self.body = body  # the server's error answer, for --output json|yaml


STATUS_EXIT = {
    400: Exit.INVALID,
    401: Exit.UNAUTHENTICATED,
    403: Exit.FORBIDDEN,
    404: Exit.NOT_FOUND,
    405: Exit.ERROR,
    409: Exit.INVALID,
    412: Exit.INVALID,
    415: Exit.ERROR,
    429: Exit.THROTTLED,
}


def exit_for_status(status: int) -> Exit:
    return STATUS_EXIT.get(status, Exit.ERROR if status >= 400 else Exit.OK)
