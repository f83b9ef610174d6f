"""`pip install .` installs the console script kq, and kq only (the server runs from the
checkout). Built offline from a copy of the package in a throwaway venv that borrows
the project venv's libraries, so nothing is downloaded."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.services import ROOT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.live, pytest.mark.slow]


def test_pip_installs_the_kq_console_script(tmp_path, kq):
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(ROOT / "pyproject.toml", source)
    shutil.copytree(ROOT / "kq", source / "kq", ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = Path(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
    )  # fmt: skip
    # As --system-site-packages would, with the project venv as the "system".
    (purelib / "project-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", "--no-build-isolation",
         "--no-index", "--disable-pip-version-check", "-q", str(source)],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr
    script = venv / "bin" / "kq"
    assert script.exists()
    installed = sorted(p.name for p in purelib.iterdir() if not p.name.endswith(".pth"))
    assert installed == ["koord_queue-0.1.0.dist-info", "kq"]  # no server package
    assert (purelib / "kq" / "watch.py").exists()

    version = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert (version.returncode, version.stdout) == (0, "kq 0.1.0\n")
    me = subprocess.run(
        [str(script), "whoami"], capture_output=True, text=True, check=False, cwd=tmp_path,
        env=kq.env("mem"), timeout=60,
    )  # fmt: skip
    assert (me.returncode, me.stdout) == (0, f"mem at {kq.url}: member of team-a\n"), me.stderr
