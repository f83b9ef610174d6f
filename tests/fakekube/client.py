"""Reaching a fake from tests: kubeconfig, ApiClient, a subprocess server, remote control."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from .audit import Entry
from .server import FaultSpec

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

REPO_ROOT = Path(__file__).resolve().parents[2]


def write_kubeconfig(path: str | os.PathLike[str], url: str, namespace: str = "default") -> Path:
    """Write a kubeconfig whose current context points at `url` (plain HTTP, no auth)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fakekube", "cluster": {"server": url}}],
        "users": [{"name": "fakekube", "user": {"token": "fakekube"}}],
        "contexts": [
            {
                "name": "fakekube",
                "context": {"cluster": "fakekube", "user": "fakekube", "namespace": namespace},
            }
        ],
        "current-context": "fakekube",
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(config))
    return target


def api_client(url: str, user_agent: str | None = None, retries: Any = None) -> ApiClient:
    """A `kubernetes.client.ApiClient` configured for the fake at `url`.

    `retries` goes to urllib3: by default it retries a 429 or 503 that carries Retry-After
    (up to 3 times, sleeping as told); `retries=False` shows every response as it is."""
    from kubernetes import client

    configuration = client.Configuration(host=url)
    if retries is not None:
        configuration.retries = retries
    api = client.ApiClient(configuration)
    if user_agent:
        api.user_agent = user_agent
    return api


class RemoteFakeKube:
    """The `/_fake/` control endpoints of a fake in another process, as Python methods
    (the same names as on FakeKube)."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, what: str, body: Any = None, **query: Any) -> Any:
        params = "&".join(f"{k}={v}" for k, v in query.items() if v is not None)
        request = urllib.request.Request(  # noqa: S310 - our own loopback URL
            f"{self.url}/_fake/{what}{'?' + params if params else ''}",
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
            return json.loads(response.read())

    def state(self) -> dict[str, Any]:
        return self._call("GET", "state")

    def log_entries(self, since: int = 0, types: list[str] | None = None) -> list[Entry]:
        return self._call("GET", "log", since=since, types=",".join(types or []) or None)["entries"]

    def set_faults(
        self,
        specs: dict[str, FaultSpec | dict[str, Any]] | None = None,
        *,
        seed: int | None = None,
        **by_verb: FaultSpec | dict[str, Any],
    ) -> dict[str, Any]:
        verbs = {
            verb: asdict(spec) if isinstance(spec, FaultSpec) else spec
            for verb, spec in {**(specs or {}), **by_verb}.items()
        }
        return self._call("PUT", "faults", {"verbs": verbs, "seed": seed})

    def clear_faults(self) -> dict[str, Any]:
        return self._call("DELETE", "faults")

    def config(self) -> dict[str, Any]:
        return self._call("GET", "config")

    def configure(self, **settings: Any) -> dict[str, Any]:
        return self._call("PUT", "config", settings)

    def reset(self, *, log: bool = True, faults: bool = True) -> dict[str, Any]:
        return self._call("POST", "reset", {"log": log, "faults": faults})

    def compact(self) -> int:
        return int(self._call("POST", "compact")["compactedResourceVersion"])

    def step(self) -> dict[str, Any]:
        return self._call("POST", "step")


class FakeKubeProcess:
    """`python -m tests.fakekube` in a subprocess; `with FakeKubeProcess() as proc: proc.url`."""

    def __init__(self, *args: str, startup_timeout: float = 20.0) -> None:
        self.args = list(args)
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def control(self) -> RemoteFakeKube:
        return RemoteFakeKube(self.url)

    def start(self) -> str:
        self._dir = tempfile.TemporaryDirectory(prefix="fakekube-")
        port_file = Path(self._dir.name) / "port"
        command = [sys.executable, "-m", "tests.fakekube", "--port", "0"]
        command += ["--port-file", str(port_file), *self.args]
        self.process = subprocess.Popen(command, cwd=REPO_ROOT)
        deadline = time.monotonic() + self.startup_timeout
        while not port_file.exists():
            if self.process.poll() is not None:
                raise RuntimeError(f"fakekube exited with {self.process.returncode}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError("fakekube did not start")
            time.sleep(0.02)  # polling for the port file, with a deadline
        self.url = f"http://127.0.0.1:{port_file.read_text().strip()}"
        return self.url

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> FakeKubeProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
