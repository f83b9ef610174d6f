"""docs/api.md runs as written: every shell block, then the Python example, against a
live server holding the demo world (what a fresh `make run` serves)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from queueing import demo
from queueing.admission import tick
from queueing.choices import Phase
from queueing.models import Quota, Workload
from tests.services import ROOT, child_env, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

DOC = ROOT / "docs" / "api.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_curl_examples_answer_as_documented(live_server, settings, tmp_path):
    settings.VAR_DIR = tmp_path
    demo.seed()
    shell = blocks("sh")
    assert shell[0].startswith("KQ=http://127.0.0.1:8000")
    # Only the address differs from `make run`; everything else runs as written.
    script = "set -eu\n" + "\n".join(shell).replace(
        "KQ=http://127.0.0.1:8000", f"KQ={live_server.url}", 1
    )
    result = subprocess.run(
        ["bash", "-c", script],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    out = result.stdout
    assert "Traceback" not in result.stderr, result.stderr

    submitted = Workload.objects.get(name="bert-finetune-1")
    assert submitted.total_request["nvidia.com/gpu"] == 2
    tokenize = Workload.objects.get(name="tokenize-1")
    assert tokenize.total_request == {"cpu": 6000, "memory": 3 * 4 * 2**30}
    assert submitted.phase == Phase.CANCELLED  # the cancel example ran
    assert re.search(r"Pending position \S+ of queue nlp-research", out)
    assert '"count":' in out  # the pending list
    assert "{'admitted_before'" in out  # the preview summary
    quota = Quota.objects.get(name="vision-dev")
    assert quota.max["cpu"] == 160_000
    assert quota.version == 2  # the PATCH with If-Match went through once
    assert "max cpu (900) is more than the parent 'vision' allows (500)" in out


def test_the_python_example_submits_and_sees_its_workload_admitted(live_server, settings, tmp_path):
    settings.VAR_DIR = tmp_path
    demo.seed()
    [example] = blocks("python")
    script = tmp_path / "example.py"
    script.write_text(example.replace("time.sleep(3)", "time.sleep(0.2)"))
    token = subprocess.run(
        [".venv/bin/python", "manage.py", "create_token", "noor"],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    proc = subprocess.Popen(
        [str(Path(ROOT, ".venv/bin/python")), str(script)],
        cwd=ROOT,
        env=child_env(NOOR=token, KQ=live_server.url),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    mine = Workload.objects.filter(name__startswith="nightly-eval-")
    try:
        wait_until(mine.exists, timeout=60, what="the example to submit")
        # The cycle runs here, as beat would run it under `make run`.
        wait_until(
            lambda: tick() and mine.exclude(phase__in=[Phase.PENDING, Phase.BACKOFF]).exists(),
            timeout=60,
            what="the cycle to admit it",
        )
        output = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    assert "final: Admitted" in output or "final: Running" in output, output
