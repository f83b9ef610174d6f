"""`python -m tests.fakekube --port 0 --port-file PATH [--load FILE ...]`: serve until
SIGTERM or SIGINT. ``--load`` creates the objects of a YAML file (several documents, any
kind the fake serves; a Node keeps its ``status.allocatable``) before serving, as
``kubectl apply -f`` would on an empty cluster; ``--kubeconfig PATH`` writes a kubeconfig
for the server once it serves (docs/kubernetes.md, "Trying it without a cluster")."""

from __future__ import annotations

import argparse
import os
import signal
import threading
from pathlib import Path
from typing import Any

import yaml

from .client import write_kubeconfig
from .server import FakeKube


def load(fake: FakeKube, obj: dict[str, Any]) -> None:
    """Create one object of a manifest (a Node through ``add_node``, to keep its status)."""
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    meta = obj.get("metadata") or {}
    if kind == "Node":
        status = obj.get("status") or {}
        fake.add_node(
            str(meta["name"]),
            status.get("allocatable") or {},
            labels=meta.get("labels") or {},
        )
        return
    for rtype in fake.store.registry.all():
        if rtype.kind == kind and rtype.api_version == api_version:
            fake.create(rtype.plural, obj, meta.get("namespace"))
            return
    raise SystemExit(f"the fake does not serve {api_version} {kind}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fakekube", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", type=Path, help="write the bound port here once serving")
    parser.add_argument("--default-runtime", type=float, default=1.0)
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--history-limit", type=int, default=50_000)
    parser.add_argument("--bookmark-interval", type=float, default=1.0)
    parser.add_argument("--watch-timeout", type=float, default=1800.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--no-runner", action="store_true", help="do not run Jobs")
    parser.add_argument(
        "--load", type=Path, action="append", default=[], help="YAML objects to create first"
    )
    parser.add_argument("--kubeconfig", type=Path, help="write a kubeconfig for the server here")
    args = parser.parse_args(argv)

    fake = FakeKube(
        host=args.host,
        port=args.port,
        default_runtime=args.default_runtime,
        time_scale=args.time_scale,
        history_limit=args.history_limit,
        bookmark_interval=args.bookmark_interval,
        watch_timeout=args.watch_timeout,
        seed=args.seed,
        runner=not args.no_runner,
    )
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    for path in args.load:
        for obj in yaml.safe_load_all(path.read_text()):
            if obj:
                load(fake, obj)
    url = fake.start()
    if args.kubeconfig:
        write_kubeconfig(args.kubeconfig, url)
    if args.port_file:
        # Written atomically: a reader polling for the file never sees it half-written.
        tmp = args.port_file.with_suffix(".tmp")
        tmp.write_text(url.rsplit(":", 1)[1])
        os.replace(tmp, args.port_file)
    print(f"fakekube serving on {url}", flush=True)
    done.wait()
    fake.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
