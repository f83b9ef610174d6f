"""``kq``: the command line. Each command is one or two REST calls and a rendering.

Exit codes are in kq.errors (and docs/cli.md); errors go to stderr as one line,
``kq: <message>``, and with ``--output json|yaml`` the server's error answer follows
on stderr in that format.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from kq import __version__, config, output, units
from kq.client import Client
from kq.errors import Exit, KqError
from kq.output import relative, table
from kq.workloads import FINISHED, find, where

LIVE_PHASES = ("Pending", "Backoff", "Admitted", "Running", "Preempted")
PHASES = (*LIVE_PHASES, *sorted(FINISHED))


# --- parsing helpers -------------------------------------------------------------------------


def resource_map(text: str) -> dict[str, str]:
    """ "cpu=4,memory=16Gi" -> {"cpu": "4", "memory": "16Gi"}; "memory=" removes memory."""
    result: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or not name.strip():
            raise argparse.ArgumentTypeError(f"{part!r} is not RESOURCE=QUANTITY")
        result[name.strip()] = value.strip()
    if not result:
        raise argparse.ArgumentTypeError("give at least one RESOURCE=QUANTITY")
    return result


def pod_set(text: str) -> dict[str, Any]:
    """ "count=2,cpu=4,memory=16Gi[,name=workers]" -> a pod set."""
    fields = resource_map(text)
    spec: dict[str, Any] = {}
    if "name" in fields:
        spec["name"] = fields.pop("name")
    count = fields.pop("count", "1")
    if not count.isdigit() or int(count) < 1:
        raise argparse.ArgumentTypeError(f"count must be a whole number of pods, not {count!r}")
    spec["count"] = int(count)
    if not fields or any(not value for value in fields.values()):
        raise argparse.ArgumentTypeError(f"{text!r}: give each pod's requests, e.g. cpu=2")
    spec["requests"] = fields
    return spec


def positive_float(text: str) -> float:
    """A finite number above zero (the server checks its upper bound)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number above zero")
    return value


def label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def toleration(text: str) -> dict[str, str]:
    """ "KEY[=VALUE][:EFFECT]" -> a toleration (Exists without a value, Equal with one)."""
    rest, _, effect = text.partition(":")
    key, sep, value = rest.partition("=")
    result = {"key": key, "operator": "Equal" if sep else "Exists"}
    if sep:
        result["value"] = value
    if effect:
        result["effect"] = effect
    return result


def read_manifest(path: str) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise KqError(f"Cannot read {path}: {exc.strerror}", Exit.USAGE) from exc
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise KqError(f"{path} is not YAML or JSON: {exc}", Exit.USAGE) from exc
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise KqError(f"{path} must hold exactly one Job manifest.", Exit.USAGE)
    manifest = documents[0]
    if manifest.get("kind") != "Job":
        raise KqError(
            f"{path} is a {manifest.get('kind') or 'manifest without a kind'}; "
            "kq submits a batch/v1 Job.",
            Exit.USAGE,
        )
    return manifest


# --- commands --------------------------------------------------------------------------------


class Context:
    def __init__(self, args: argparse.Namespace, out: TextIO) -> None:
        self.args = args
        self.out = out
        self.format: str = args.output
        self._client: Client | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(config.load(self.args.url))
        return self._client

    def emit(self, data: Any) -> bool:
        """Print ``data`` as JSON/YAML when asked; False means: render a table instead."""
        if self.format == "table":
            return False
        output.dump(data, self.format, self.out)
        return True

    def say(self, line: str) -> None:
        self.out.write(line + "\n")


WORKLOAD_COLUMNS: list[output.Column] = [
    ("ID", lambda w: w["id"]),
    ("NAME", lambda w: w["name"]),
    ("NAMESPACE", lambda w: w["namespace"]),
    ("QUEUE", lambda w: w["queue"]),
    ("PHASE", lambda w: w["phase"]),
    ("PRIORITY", lambda w: w["priority"]),
    ("POS", lambda w: w.get("position")),
    ("ETA", lambda w: relative(w.get("eta_p50")) if w.get("eta_p50") else None),
    ("REQUESTS", lambda w: units.describe(w.get("total_request"))),
    ("REASON", lambda w: w.get("reason")),
]


def cmd_ls(ctx: Context) -> Exit:
    args = ctx.args
    params: dict[str, Any] = {"ordering": "queue_order_at"}
    if args.queue:
        params["queue"] = args.queue
    if args.tenant:
        params["tenant"] = args.tenant
    if args.namespace:
        params["namespace"] = args.namespace
    phases = [p for group in args.phase or [] for p in group]
    if phases:
        params["phase"] = phases
    elif not args.all:
        params["phase"] = list(LIVE_PHASES)
    rows = list(ctx.client.pages("workloads", params=params, limit=args.limit))
    # Waiting ones in their queue's order, then the rest as they queued.
    rows.sort(key=lambda w: (w["queue"], w.get("position") is None, w.get("position") or 0))
    if not ctx.emit(rows):
        if rows:
            table(rows, WORKLOAD_COLUMNS, ctx.out)
        else:
            ctx.say("No workloads match.")
    return Exit.OK


def explain(workload: dict[str, Any]) -> list[str]:
    """The structured explanation, one fact a line."""
    lines = [f"Why: {workload.get('reason') or '-'}"]
    e = workload.get("explanation") or {}
    if e.get("quota"):
        limit = f" (its {e['limit']} limit)" if e.get("limit") else ""
        lines.append(f"  blocked at quota {e['quota']}{limit}")
    if e.get("shortfall"):
        lines.append(f"  short of: {units.describe(e['shortfall'])}")
    if e.get("largest_free_slot") is not None:
        nodes = e.get("eligible_nodes")
        lines.append(
            f"  largest free slot on one node: {units.describe(e['largest_free_slot'])}"
            + (f" ({nodes} eligible nodes)" if nodes is not None else "")
        )
    if e.get("ahead"):
        lines.append("  ahead of it: " + ", ".join(f"#{i}" for i in e["ahead"]))
    if e.get("blocked_by"):
        lines.append(f"  held back by #{e['blocked_by']} (the queue blocks behind its head)")
    if e.get("to_free"):
        lines.append(f"  would start if this were freed: {units.describe(e['to_free'])}")
    if e.get("victims"):
        lines.append("  preemption could take: " + ", ".join(f"#{i}" for i in e["victims"]))
    if e.get("borrowable"):
        lines.append(f"  its quota could still borrow: {units.describe(e['borrowable'])}")
    if e.get("detail"):
        lines.append(f"  {e['detail']}")
    return lines


def cmd_why(ctx: Context) -> Exit:
    workload = find(ctx.client, ctx.args.workload, ctx.args.namespace)
    data = {
        key: workload.get(key)
        for key in ("id", "name", "namespace", "queue", "phase", "position", "reason")
    }
    data["explanation"] = workload.get("explanation")
    if not ctx.emit(data):
        ctx.say(where(workload))
        for line in explain(workload):
            ctx.say(line)
    return Exit.OK


def cmd_eta(ctx: Context) -> Exit:
    workload = find(ctx.client, ctx.args.workload, ctx.args.namespace)
    keys = ("id", "name", "namespace", "queue", "phase", "position", "global_position")
    data = {key: workload.get(key) for key in keys}
    data |= {k: workload.get(k) for k in ("eta_p50", "eta_p90", "admitted_at", "started_at")}
    if not ctx.emit(data):
        ctx.say(where(workload))
    return Exit.OK


def cmd_cancel(ctx: Context) -> Exit:
    workload = find(ctx.client, ctx.args.workload, ctx.args.namespace)
    if workload["phase"] in FINISHED:
        raise KqError(
            f"{workload['name']} (#{workload['id']}) already finished: {workload['phase']}.",
            Exit.INVALID,
        )
    body = {"reason": ctx.args.reason} if ctx.args.reason else {}
    done = ctx.client.post("workloads", workload["id"], "cancel", body=body)
    if not ctx.emit(done):
        ctx.say(f"Cancelled {done['name']} ({done['namespace']}, #{done['id']}).")
    return Exit.OK


def cmd_submit(ctx: Context) -> Exit:
    args = ctx.args
    body: dict[str, Any] = {}
    if args.file:
        manifest = read_manifest(args.file)
        body["manifest"] = manifest
        # Names on the command line win: one manifest can be submitted many times.
        metadata = manifest.setdefault("metadata", {})
        if args.name:
            metadata["name"] = args.name
        if args.namespace:
            metadata["namespace"] = args.namespace
        body["name"] = metadata.get("name")
        if metadata.get("namespace"):
            body["namespace"] = metadata["namespace"]
    else:
        if not args.pod_set:
            raise KqError(
                "Give pod sets (--pod-set count=2,cpu=4) or a Job manifest (-f).", Exit.USAGE
            )
        body["name"] = args.name
        if args.namespace:
            body["namespace"] = args.namespace
    if not body.get("name"):
        raise KqError("Give the workload a name (or metadata.name in the manifest).", Exit.USAGE)
    if args.pod_set:
        body["pod_sets"] = args.pod_set
        for spec in body["pod_sets"]:
            if args.toleration:
                spec["tolerations"] = args.toleration
    for key in ("queue", "quota", "priority", "priority_class"):
        value = getattr(args, key)
        if value is not None:
            body[key] = value
    if args.runtime is not None:
        body["expected_runtime_s"] = args.runtime
    if args.label:
        body["labels"] = dict(args.label)
    created = ctx.client.post("workloads", body=body)
    if not ctx.emit(created):
        ctx.say(
            f"Submitted {created['name']} (#{created['id']}) to queue {created['queue']} "
            f"of quota {created['quota']}: {created['phase']}, requesting "
            f"{units.describe(created.get('total_request'))}."
        )
    return Exit.OK


QUOTA_COLUMNS: list[output.Column] = [
    ("QUOTA", lambda r: r["quota"]),
    ("TENANT", lambda r: r["tenant"]),
    ("RESOURCE", lambda r: r["resource"]),
    ("MIN", lambda r: r["min"]),
    ("MAX", lambda r: r["max"]),
    ("RUNTIME", lambda r: r["runtime"]),
    ("USED", lambda r: r["used"]),
    ("WAITING", lambda r: r["pending"]),
]


def quota_rows(quota: dict[str, Any]) -> list[dict[str, Any]]:
    names = sorted(
        set().union(*(quota.get(k) or {} for k in ("min", "max", "runtime", "used", "pending")))
    )
    return [
        {
            "quota": quota["name"],
            "tenant": quota.get("tenant") or "(cluster)",
            "resource": name,
            **{
                key: units.human_value(name, (quota.get(key) or {}).get(name, 0))
                for key in ("min", "max", "runtime", "used", "pending")
            },
        }
        for name in names
    ]


def cmd_quota_show(ctx: Context) -> Exit:
    cluster = ctx.client.get("cluster")
    quotas = cluster["quotas"]
    if ctx.args.quotas:
        wanted = set(ctx.args.quotas)
        quotas = [q for q in quotas if q["name"] in wanted]
        missing = wanted - {q["name"] for q in quotas}
        if missing:
            raise KqError(
                f"No quota named {', '.join(sorted(missing))} that you can see.", Exit.NOT_FOUND
            )
    if not ctx.emit(quotas):
        rows = [row for quota in quotas for row in quota_rows(quota)]
        if rows:
            table(rows, QUOTA_COLUMNS, ctx.out)
        else:
            ctx.say("No quotas.")
    return Exit.OK


def _merged(current: dict[str, Any], change: dict[str, str] | None) -> dict[str, str] | None:
    """The API replaces a resource map whole; kq changes only the resources named."""
    if change is None:
        return None
    merged = {**(current or {}), **change}
    return {name: value for name, value in merged.items() if value != ""}


def cmd_quota_preview(ctx: Context) -> Exit:
    args = ctx.args
    body: dict[str, Any]
    if args.parent:
        new: dict[str, Any] = {"name": args.quota, "parent": args.parent}
        for key, value in (("min", args.min), ("max", args.max), ("shared_weight", args.weight)):
            if value:
                new[key] = {k: v for k, v in value.items() if v != ""}
        if args.fair_weight is not None:
            new["fair_weight"] = args.fair_weight
        body = {"new": new}
    else:
        changes = (args.min, args.max, args.weight, args.lend, args.fair_weight)
        if all(change is None for change in changes):
            raise KqError(
                "Say what would change: --min, --max, --weight, --fair-weight or --lend.",
                Exit.USAGE,
            )
        current = ctx.client.get("quotas", args.quota)
        body = {"quota": args.quota}
        for key, value in (("min", args.min), ("max", args.max), ("shared_weight", args.weight)):
            merged = _merged(current.get(key) or {}, value)
            if merged is not None:
                body[key] = merged
        if args.lend is not None:
            body["allow_lent"] = args.lend == "yes"
        if args.fair_weight is not None:
            body["fair_weight"] = args.fair_weight
    preview = ctx.client.post("preview", body=body)
    if ctx.emit(preview):
        return Exit.OK
    changed = [q for q in preview["quotas"] if q["changed"]]
    if changed:
        rows = []
        for quota in changed:
            before, after = quota["before"], quota["after"]
            for name in sorted(set(before["runtime"]) | set(after["runtime"])):
                old = units.human_value(name, before["runtime"].get(name, 0))
                new_ = units.human_value(name, after["runtime"].get(name, 0))
                if old != new_:
                    rows.append(
                        {"quota": quota["name"], "resource": name, "change": f"{old} → {new_}"}
                    )
        table(rows or [{"quota": q["name"], "resource": "-", "change": "limits only"} for q in changed],
              [("QUOTA", lambda r: r["quota"]), ("RESOURCE", lambda r: r["resource"]),
               ("RUNTIME QUOTA", lambda r: r["change"])], ctx.out)  # fmt: skip
    else:
        ctx.say(
            "No quota's runtime quota would change now: runtime quotas move only when quotas "
            "compete, and with today's demand none does."
        )
        rows = [
            {"quota": q["name"], "resource": name,
             "change": f"{units.human_value(name, q['before'].get(name, 0))} → "
                       f"{units.human_value(name, q['after'].get(name, 0))}"}
            for q in preview.get("full_demand", [])
            for name in sorted(set(q["before"]) | set(q["after"]))
            if q["before"].get(name) != q["after"].get(name)
        ]  # fmt: skip
        if rows:
            ctx.say("Under full demand (every quota asking for all it may hold) it would move:")
            table(rows, [("QUOTA", lambda r: r["quota"]), ("RESOURCE", lambda r: r["resource"]),
                         ("RUNTIME QUOTA", lambda r: r["change"])], ctx.out)  # fmt: skip
        else:
            ctx.say("Even under full demand no runtime quota would move.")
    if preview["workloads"]:
        ctx.say("")

        def moved(w: dict[str, Any], key: str, show: Any = lambda v: v) -> str:
            old, new_ = show(w["before"].get(key)), show(w["after"].get(key))
            return f"{output.cell(old)} → {output.cell(new_)}" if old != new_ else output.cell(old)

        table(preview["workloads"], [
            ("WORKLOAD", lambda w: w["name"]),
            ("QUEUE", lambda w: w["queue"]),
            ("ADMITTED", lambda w: moved(w, "admitted", lambda v: "yes" if v else "no")),
            ("POSITION", lambda w: moved(w, "position")),
            ("ETA", lambda w: moved(w, "eta_p50", lambda v: relative(v) if v else None)),
        ], ctx.out)  # fmt: skip
    s = preview["summary"]
    ctx.say(
        f"\nAdmitted this cycle: {s['admitted_before']} → {s['admitted_after']}; preempted: "
        f"{s['preempted_before']} → {s['preempted_after']}; {s['changed_workloads']} workload(s) "
        f"would move. Nothing was saved."
    )
    return Exit.OK


def cmd_whoami(ctx: Context) -> Exit:
    me = ctx.client.get("me")
    if not ctx.emit(me):
        roles = ", ".join(f"{role} of {tenant}" for tenant, role in sorted(me["roles"].items()))
        admin = "cluster admin; " if me["cluster_admin"] else ""
        token = me.get("token") or {}
        scope = " (read-only token)" if token.get("read_only") else ""
        ctx.say(
            f"{me['username']} at {ctx.client.config.url}: {admin}{roles or 'no tenant'}{scope}"
        )
    return Exit.OK


def cmd_watch(ctx: Context) -> Exit:
    from kq.watch import watch  # the WebSocket client is needed by this command only

    return watch(ctx)


# --- the parser ------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-o", "--output", choices=output.FORMATS, default=argparse.SUPPRESS,
        help="table for people (default); json or yaml print the API's objects",
    )  # fmt: skip
    common.add_argument("--url", default=argparse.SUPPRESS, help="server address (else KQ_URL)")

    top = argparse.ArgumentParser(
        prog="kq",
        parents=[common],
        description="Koord-Queue from the terminal. Configure with KQ_URL and KQ_TOKEN "
        "(or ~/.config/kq/config); see docs/cli.md.",
    )
    top.add_argument("--version", action="version", version=f"kq {__version__}")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help_, description=help_, parents=[common])

    ls = command("ls", "List workloads (live ones unless --phase or --all).")
    ls.add_argument("--queue", help="queue name")
    ls.add_argument("--tenant", help="tenant name")
    ls.add_argument("--namespace", help="namespace")
    ls.add_argument(
        "--phase", action="append", metavar="PHASE[,PHASE]",
        type=lambda v: [p.strip().capitalize() for p in v.split(",") if p.strip()],
        help=f"one or more of {', '.join(PHASES)} (repeatable)",
    )  # fmt: skip
    ls.add_argument("--all", action="store_true", help="finished workloads too")
    ls.add_argument("--limit", type=int, default=1000, help="at most this many (default 1000)")
    ls.set_defaults(run=cmd_ls)

    for name, help_, run in (
        ("why", "Why a workload waits: the reason and what would unblock it.", cmd_why),
        ("eta", "Where a workload stands and when it should start (p50, p90).", cmd_eta),
        ("cancel", "Cancel a workload (its job is deleted).", cmd_cancel),
    ):
        sub = command(name, help_)
        sub.add_argument("workload", metavar="NAME", help="workload name, or its id")
        sub.add_argument("-n", "--namespace", help="the namespace, when a name is in several")
        if name == "cancel":
            sub.add_argument("--reason", help="why (kept in the workload's timeline)")
        sub.set_defaults(run=run)

    submit = command(
        "submit", "Submit a workload: pod sets on the command line, or a Job manifest."
    )
    submit.add_argument("name", nargs="?", help="workload name (default: the manifest's)")
    submit.add_argument("-f", "--file", help="a batch/v1 Job manifest, YAML or JSON ('-': stdin)")
    target = submit.add_argument_group("where (one of them; the others follow)")
    target.add_argument("--queue", help="queue name")
    target.add_argument("--quota", help="leaf quota name")
    target.add_argument("-n", "--namespace", help="namespace (its quota's queue)")
    submit.add_argument(
        "--pod-set", action="append", type=pod_set, metavar="count=N,RESOURCE=QTY,...",
        help="pods and each one's requests, e.g. count=2,cpu=4,memory=16Gi,nvidia.com/gpu=1 "
        "(repeatable; optional name=...)",
    )  # fmt: skip
    submit.add_argument(
        "--toleration", action="append", type=toleration, metavar="KEY[=VALUE][:EFFECT]",
        help="tolerate a node taint (for every pod set; repeatable)",
    )  # fmt: skip
    submit.add_argument("--priority", type=int)
    submit.add_argument("--priority-class", dest="priority_class")
    submit.add_argument("--runtime", type=float, metavar="SECONDS", help="expected runtime")
    submit.add_argument("--label", action="append", type=label, metavar="KEY=VALUE")
    submit.set_defaults(run=cmd_submit)

    quota = command("quota", "Quotas: limits, usage and runtime quota; what-if previews.")
    quota_commands = quota.add_subparsers(
        dest="quota_command", required=True, metavar="show|preview"
    )
    show = quota_commands.add_parser(
        "show", parents=[common], help="limits, runtime quota, usage and waiting demand"
    )
    show.add_argument("quotas", nargs="*", metavar="QUOTA", help="only these (default: all)")
    show.set_defaults(run=cmd_quota_show)
    preview = quota_commands.add_parser(
        "preview", parents=[common],
        help="the predicted effect of a quota change (or a new quota); nothing is saved",
    )  # fmt: skip
    preview.add_argument("quota", metavar="QUOTA")
    preview.add_argument("--parent", help="preview a NEW quota under this parent")
    for flag, dest in (("--min", "min"), ("--max", "max"), ("--weight", "weight")):
        preview.add_argument(
            flag, dest=dest, type=resource_map, metavar="RESOURCE=QTY,...",
            help="resources to change (the others keep their value; RESOURCE= removes one)",
        )  # fmt: skip
    preview.add_argument("--lend", choices=("yes", "no"), help="allow lending its idle min")
    preview.add_argument(
        "--fair-weight", dest="fair_weight", type=positive_float, metavar="WEIGHT",
        help="its weight in fair sharing between sibling quotas (default 1)",
    )  # fmt: skip
    preview.set_defaults(run=cmd_quota_preview)

    watch = command("watch", "Live positions of a queue, redrawn in place as they change.")
    watch.add_argument("queue", metavar="QUEUE")
    watch.add_argument("--rows", type=int, default=20, help="positions shown (default 20)")
    watch.add_argument("--count", type=int, help="stop after this many updates")
    watch.add_argument("--timeout", type=float, metavar="SECONDS", help="stop after this long")
    watch.set_defaults(run=cmd_watch)

    whoami = command("whoami", "Who the token belongs to, and its roles.")
    whoami.set_defaults(run=cmd_whoami)
    return top


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    args = parser().parse_args(argv)
    args.output = getattr(args, "output", "table")
    args.url = getattr(args, "url", None)
    ctx = Context(args, out)
    try:
        return int(args.run(ctx))
    except KqError as exc:
        sys.stderr.write(f"kq: {exc}\n")
        if args.output != "table" and exc.body is not None:
            output.dump(exc.body, args.output, sys.stderr)
        return int(exc.code)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return int(Exit.OK)  # `kq ls | head`: the reader has what it wanted


def run() -> None:
    """The console script's entry point."""
    sys.exit(main())
