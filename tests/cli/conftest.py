"""The command-line client against a live server: the real ASGI app (HTTP and WebSockets)
in uvicorn on a thread of this process, with a Redis channel layer (the browser tests'
fixtures), and ``kq`` run as the subprocess a user would run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from portal import tokens
from queueing.cluster import set_cluster
from tests.browser.conftest import channel_layer, redis_url, server_url  # noqa: F401
from tests.builders import SYSTEM
from tests.services import ROOT
from tests.sites import Site, make_site


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def kq_env(home: Path, **extra: str) -> dict[str, str]:
    """The caller's environment without any kq settings of theirs, and a home of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KQ_")}
    env |= {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "COLUMNS": "200"}
    env |= extra
    return env


class Kq:
    """Runs ``python -m kq`` as ``who`` against the live server."""

    def __init__(self, url: str, keys: dict[str, str], home: Path) -> None:
        self.url = url
        self.keys = keys
        self.home = home

    def env(self, who: str | None = "ada", **extra: str) -> dict[str, str]:
        settings = {"KQ_URL": self.url}
        if who is not None:
            settings["KQ_TOKEN"] = self.keys[who]
        return kq_env(self.home, **(settings | extra))

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "kq", *args]

    def __call__(
        self, *args: str, who: str | None = "ada", stdin: str | None = None, **env: str
    ) -> Run:
        done = subprocess.run(
            self.argv(*args),
            cwd=ROOT,
            env=self.env(who, **env),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return Run(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def site(transactional_db: None) -> Iterator[Site]:
    s = make_site()
    set_cluster(s.world.cluster)
    yield s
    set_cluster(None)


@pytest.fixture
def kq(site: Site, server_url: str, tmp_path: Path) -> Kq:  # noqa: F811
    keys = {who: tokens.create_token(SYSTEM, user).key for who, user in site.users.items()}
    keys["vic-ro"] = tokens.create_token(SYSTEM, site.users["vic"], read_only=True).key
    return Kq(server_url, keys, tmp_path)
