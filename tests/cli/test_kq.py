"""kq against a live server: what it sends, what it prints, the exit codes it promises."""

from __future__ import annotations

import json
import textwrap

import pytest

from queueing import actions
from queueing.admission import tick
from queueing.choices import Phase
from queueing.models import Quota, Workload
from tests import live
from tests.builders import SYSTEM, submit
from tests.services import free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.live, pytest.mark.slow]


def test_submit_pod_sets_then_list_them(kq, site):
    run = kq(
        "submit", "train-1", "--queue", site.queue.name, "--priority", "7",
        "--pod-set", "count=2,cpu=3,memory=6Gi", "--runtime", "120", "-o", "json",
    )  # fmt: skip
    assert run.code == 0, run.err
    created = run.json()
    workload = Workload.objects.get(pk=created["id"])
    assert (workload.name, workload.queue_id, workload.priority) == ("train-1", site.queue.pk, 7)
    assert workload.total_request == {"cpu": 6000, "memory": 12 * 2**30}
    assert workload.expected_runtime_s == 120
    assert created["total_request"] == {"cpu": "6", "memory": "12Gi"}

    listed = kq("ls", "--queue", site.queue.name)
    assert listed.code == 0, listed.err
    header, row = listed.out.splitlines()
    assert header.split()[:4] == ["ID", "NAME", "NAMESPACE", "QUEUE"]
    assert row.split()[:5] == [str(workload.pk), "train-1", "team-a", site.queue.name, "Pending"]
    assert "cpu 6, memory 12Gi" in row


def test_submit_a_job_manifest_from_a_file_and_from_stdin(kq, site, tmp_path):
    manifest = textwrap.dedent(
        """\
        apiVersion: batch/v1
        kind: Job
        metadata: {name: tokenize-1, namespace: team-a}
        spec:
          parallelism: 3
          template:
            spec:
              restartPolicy: Never
              containers:
              - name: main
                image: python:3.11
                resources: {requests: {cpu: 1500m, memory: 2Gi}}
        """
    )
    path = tmp_path / "job.yaml"
    path.write_text(manifest)
    run = kq("submit", "-f", str(path))
    assert run.code == 0, run.err
    workload = Workload.objects.get(name="tokenize-1")
    assert workload.queue_id == site.queue.pk  # the namespace's quota's default queue
    assert workload.total_request == {"cpu": 4500, "memory": 6 * 2**30}
    assert run.out.strip() == (
        f"Submitted tokenize-1 (#{workload.pk}) to queue {site.queue.name} of quota "
        f"{site.quota.name}: Pending, requesting cpu 4.5, memory 6Gi."
    )
    # The name on the command line wins over metadata.name; "-" reads stdin.
    again = kq("submit", "tokenize-2", "-f", "-", "-o", "yaml", stdin=manifest)
    assert again.code == 0, again.err
    assert "name: tokenize-2\n" in again.out
    assert Workload.objects.filter(name="tokenize-2").count() == 1


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--pod-set", "cpu=lots"], 4, "cpu: 'lots' is not a Kubernetes quantity"),
        (["--queue", "no-such-queue", "--pod-set", "cpu=1"], 4, "queue"),
        (["--pod-set", "count=0,cpu=1"], 2, "count must be a whole number"),
        ([], 2, "Give pod sets"),
    ],
)
def test_bad_submissions_exit_with_a_clear_message_and_create_nothing(
    kq, site, args, code, message
):
    queue = [] if "--queue" in args else ["--queue", site.queue.name]
    run = kq("submit", "bad-1", *queue, *args)
    assert run.code == code, run.err
    assert message in run.err
    assert run.out == ""
    assert not Workload.objects.filter(name="bad-1").exists()


def test_invalid_input_with_json_output_also_prints_the_servers_error(kq, site):
    run = kq("submit", "bad-2", "--queue", site.queue.name, "--pod-set", "cpu=-1", "-o", "json")
    assert run.code == 4
    first, rest = run.err.split("\n", 1)
    assert first.startswith("kq: ")
    error = json.loads(rest)
    assert error["code"] == "invalid"
    assert error["status"] == 400
    assert any(name.startswith("pod_sets") for name in error["fields"])


def test_why_and_eta_tell_where_a_waiting_workload_stands(kq, site):
    big = submit(site.world, "holds-all", cpu="8", count=2)
    waiting = submit(site.world, "waits-1", cpu="4")
    tick()
    big.refresh_from_db()
    waiting.refresh_from_db()
    assert big.phase in (Phase.ADMITTED, Phase.RUNNING)
    assert waiting.phase == Phase.PENDING
    assert waiting.explanation  # the cycle said why

    why = kq("why", "waits-1")
    assert why.code == 0, why.err
    lines = why.out.splitlines()
    assert lines[0].startswith(f"waits-1 (team-a, #{waiting.pk}): Pending")
    assert lines[1] == f"Why: {waiting.reason}"
    as_json = kq("why", str(waiting.pk), "-o", "json").json()
    assert as_json["explanation"] == waiting.explanation
    assert as_json["reason"] == waiting.reason

    live.rank([waiting.pk])
    waiting.refresh_from_db()
    eta = kq("eta", "waits-1", "-o", "json")
    assert eta.code == 0, eta.err
    data = eta.json()
    assert (data["id"], data["position"], data["phase"]) == (waiting.pk, 1, "Pending")
    assert data["eta_p50"] is not None
    assert data["eta_p50"].replace("Z", "+00:00") == waiting.eta_p50.isoformat()
    table = kq("eta", "waits-1")
    assert f"position 1 in queue {site.queue.name}; expected to start in " in table.out
    assert "90% likely by" in table.out

    running = kq("eta", "holds-all")
    assert running.out.startswith(f"holds-all (team-a, #{big.pk}): {big.phase} since ")


def test_ls_filters_by_phase_queue_and_tenant(kq, site):
    mine = submit(site.world, "mine-1")
    done = submit(site.world, "mine-2")
    actions.cancel_workload(SYSTEM, done)
    submit(site.world, "theirs-1", queue=site.other_queue, quota=Quota.objects.get(name="team-b-q"))

    def names(*args: str, who: str = "root") -> list[str]:
        run = kq("ls", *args, "-o", "json", who=who)
        assert run.code == 0, run.err
        return sorted(w["name"] for w in run.json())

    assert names() == ["mine-1", "theirs-1"]  # live ones, every tenant for a cluster admin
    assert names("--all") == ["mine-1", "mine-2", "theirs-1"]
    assert names("--phase", "cancelled") == ["mine-2"]
    assert names("--phase", "Pending,Cancelled", "--tenant", "team-a") == ["mine-1", "mine-2"]
    assert names("--queue", site.other_queue.name) == ["theirs-1"]
    assert names(who="ada") == ["mine-1"]  # never another tenant's
    assert names("--tenant", "team-b", who="ada") == []
    empty = kq("ls", "--queue", site.other_queue.name)
    assert (empty.code, empty.out) == (0, "No workloads match.\n")
    assert mine.phase == Phase.PENDING


def test_cancel_and_the_exit_codes_of_refusals(kq, site):
    workload = submit(site.world, "cancel-me")
    theirs = submit(
        site.world, "not-yours", queue=site.other_queue, quota=Quota.objects.get(name="team-b-q")
    )

    viewer = kq("cancel", "cancel-me", who="vic")
    assert viewer.code == 6, viewer.err  # a viewer may see it, not cancel it
    assert Workload.objects.get(pk=workload.pk).phase == Phase.PENDING

    done = kq("cancel", "cancel-me", "--reason", "changed my mind")
    assert done.code == 0, done.err
    assert done.out == f"Cancelled cancel-me (team-a, #{workload.pk}).\n"
    workload.refresh_from_db()
    assert workload.phase == Phase.CANCELLED
    assert workload.events.filter(
        to_phase=Phase.CANCELLED, message__contains="changed my mind"
    ).exists()

    again = kq("cancel", str(workload.pk))
    assert again.code == 4
    assert "already finished: Cancelled" in again.err

    assert kq("cancel", "no-such-workload").code == 3
    other = kq("cancel", str(theirs.pk))  # another tenant's reads as unknown
    assert other.code == 3
    assert Workload.objects.get(pk=theirs.pk).phase == Phase.PENDING


def test_a_name_in_two_namespaces_is_ambiguous_until_narrowed(kq, site):
    second = actions.create_quota(
        SYSTEM, name="team-a-2", tenant=site.tenant, parent=site.world.root,
        min={"cpu": "1"}, max={"cpu": "4"}, namespaces=["team-a-two"],
    )  # fmt: skip
    first = submit(site.world, "same-name")
    other = submit(site.world, "same-name", quota=second)
    run = kq("eta", "same-name")
    assert run.code == 9
    assert f"{first.pk} (team-a)" in run.err
    assert f"{other.pk} (team-a-two)" in run.err
    narrowed = kq("eta", "same-name", "-n", "team-a-two", "-o", "json")
    assert narrowed.code == 0, narrowed.err
    assert narrowed.json()["id"] == other.pk


def test_quota_show_in_units_for_people(kq, site):
    Quota.objects.filter(pk=site.quota.pk).update(
        max={"cpu": 16000, "memory": 9835802968}, min={"cpu": 500}
    )
    run = kq("quota", "show", site.quota.name)
    assert run.code == 0, run.err
    rows = [line.split() for line in run.out.splitlines()]
    assert rows[0] == ["QUOTA", "TENANT", "RESOURCE", "MIN", "MAX", "RUNTIME", "USED", "WAITING"]
    by_resource = {row[2]: row for row in rows[1:]}
    assert by_resource["cpu"][3:5] == ["500m", "16"]
    assert by_resource["memory"][3:5] == ["0", "9.16Gi"]
    as_json = kq("quota", "show", "-o", "json").json()
    assert {q["name"] for q in as_json} >= {"cluster", site.quota.name}
    assert "team-b-q" not in {q["name"] for q in as_json}  # another tenant's quota
    missing = kq("quota", "show", "team-b-q")
    assert missing.code == 3
    assert "No quota named team-b-q" in missing.err


def test_quota_preview_changes_only_the_named_resource_and_saves_nothing(kq, site):
    Quota.objects.filter(pk=site.quota.pk).update(max={"cpu": 8000, "memory": 64 * 2**30})
    submit(site.world, "needs-12", cpu="6", count=2)
    tick()
    version = Quota.objects.get(pk=site.quota.pk).version
    # A tenant's top quota is the cluster admin's to change.
    run = kq("quota", "preview", site.quota.name, "--max", "cpu=16", "-o", "json", who="root")
    assert run.code == 0, run.err
    preview = run.json()
    mine = next(q for q in preview["quotas"] if q["name"] == site.quota.name)
    assert mine["after"]["max"] == {"cpu": "16", "memory": "64Gi"}  # memory kept
    assert preview["summary"]["admitted_after"] == preview["summary"]["admitted_before"] + 1
    [moved] = preview["workloads"]
    assert (moved["name"], moved["before"]["admitted"], moved["after"]["admitted"]) == (
        "needs-12",
        False,
        True,
    )
    text = kq("quota", "preview", site.quota.name, "--max", "cpu=16", who="root")
    assert "needs-12" in text.out
    assert "no → yes" in text.out
    assert text.out.rstrip().endswith("Nothing was saved.")
    quota = Quota.objects.get(pk=site.quota.pk)
    assert (quota.version, quota.max) == (version, {"cpu": 8000, "memory": 64 * 2**30})

    refused = kq("quota", "preview", site.quota.name, "--max", "cpu=900", who="root")
    assert refused.code == 4
    assert "max cpu (900)" in refused.err
    for who in ("vic", "ada"):
        assert kq("quota", "preview", site.quota.name, "--max", "cpu=9", who=who).code == 6
    assert kq("quota", "preview", site.quota.name).code == 2  # nothing to change


def test_quota_preview_of_an_edit_that_changes_nothing_now(kq, site):
    actions.create_quota(
        SYSTEM, name="team-a-other", tenant=site.tenant, parent=site.world.root,
        min={"cpu": "1"}, max={"cpu": "32"},  # the mins leave 3 of the 16 nodes' cpu idle
    )  # fmt: skip
    run = kq("quota", "preview", site.quota.name, "--weight", "cpu=64", who="root")
    assert run.code == 0, run.err
    assert "No quota's runtime quota would change now" in run.out
    assert "Under full demand (every quota asking for all it may hold) it would move:" in run.out
    moved = {line.split()[0]: line.split()[2:] for line in run.out.splitlines() if " → " in line}
    assert moved[site.quota.name][1] == "→"
    assert float(moved[site.quota.name][2]) > float(moved[site.quota.name][0])  # more for it
    assert float(moved["team-a-other"][2]) < float(moved["team-a-other"][0])


def test_configuration_errors_and_a_config_file(kq, site):
    none = kq("ls", who=None, KQ_URL="")
    assert none.code == 2
    assert "No server: set KQ_URL" in none.err
    no_token = kq("ls", who=None)
    assert no_token.code == 2
    assert "No token" in no_token.err

    bad = kq("ls", who=None, KQ_TOKEN="kq_not-a-real-key")
    assert bad.code == 5
    assert bad.err == "kq: Invalid token.\n"

    closed = kq("ls", KQ_URL=f"http://127.0.0.1:{free_port()}")
    assert closed.code == 7
    assert "Cannot reach" in closed.err

    config = kq.home / ".config" / "kq" / "config"
    config.parent.mkdir(parents=True)
    config.write_text(f"[kq]\nurl = {kq.url}\ntoken = {kq.keys['mem']}\n")
    config.chmod(0o644)
    readable = kq("whoami", who=None, KQ_URL="")
    assert readable.code == 2
    assert f"chmod 600 {config}" in readable.err
    assert kq("whoami", who="mem").code == 0  # with URL and token in the environment, unread
    config.chmod(0o600)
    me = kq("whoami", who=None, KQ_URL="")
    assert me.code == 0, me.err
    assert me.out == f"mem at {kq.url}: member of team-a\n"
    # The environment wins over the file.
    assert kq("whoami", "-o", "json", who="vic-ro").json()["username"] == "vic"


def test_a_read_only_token_reads_but_may_not_write(kq, site):
    assert kq("ls", who="vic-ro").code == 0
    refused = kq("submit", "ro-1", "--queue", site.queue.name, "--pod-set", "cpu=1", who="vic-ro")
    assert refused.code == 6
    assert not Workload.objects.filter(name="ro-1").exists()


def test_quota_preview_of_a_fair_share_weight(kq, site):
    version = Quota.objects.get(pk=site.quota.pk).version
    run = kq("quota", "preview", site.quota.name, "--fair-weight", "2.5", who="root")
    assert run.code == 0, run.err
    assert run.out.rstrip().endswith("Nothing was saved.")
    assert Quota.objects.get(pk=site.quota.pk).version == version
    assert Quota.objects.get(pk=site.quota.pk).fair_weight == 1.0
    # The flag reaches the server: only it knows the upper bound.
    too_heavy = kq("quota", "preview", site.quota.name, "--fair-weight", "5000", who="root")
    assert too_heavy.code == 4
    assert "fair_weight must be greater than 0 and at most 1000" in too_heavy.err
    for bad in ("0", "-1", "nan", "inf", "heavy"):
        refused = kq("quota", "preview", site.quota.name, "--fair-weight", bad, who="root")
        assert refused.code == 2, bad
        assert "--fair-weight" in refused.err
