from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from queueing.cluster import set_cluster
from tests import builders


@pytest.fixture
def world(db: None) -> Iterator[builders.World]:
    """A cluster root, two 8-cpu nodes, one tenant with one leaf quota and its queue."""
    w = builders.world()
    set_cluster(w.cluster)
    yield w
    set_cluster(None)


@pytest.fixture(scope="session", autouse=True)
def _fast_password_hashing() -> None:
    """Tests create many users; PBKDF2's deliberate slowness only costs them time."""
    from django.conf import settings

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # The test process wakes no cycles (tests/queueing/test_wake.py turns it on); the
    # workers that end-to-end tests start do.
    settings.KQ_WAKE = False
    # Tests tick many times a second: every cycle forecasts unless a test says otherwise.
    settings.KQ_FORECAST_EVERY_S = 0.0
    # ... and reads what finished work teaches afresh (hand clocks move minutes a second).
    settings.KQ_HISTORY_TTL_S = 0.0


@pytest.fixture(scope="session", autouse=True)
def _static_files_listed_once() -> Iterator[None]:
    """Django's test client loads the middleware anew for each client it makes (the API
    tests make one per call), and WhiteNoise's middleware lists and stats every static
    file of the finders as it loads: two thirds of the middleware's load, ~7 ms a client.
    The files do not change during a run: the listing is made once per configuration
    (the settings it reads) and each new middleware gets the same entries a fresh
    listing would give it."""
    from django.conf import settings
    from whitenoise.middleware import WhiteNoiseMiddleware

    listed: dict[str, dict[str, Any]] = {}
    original = WhiteNoiseMiddleware.add_files_from_finders

    def add_files_from_finders(self: WhiteNoiseMiddleware) -> None:
        names = ("DEBUG", "INSTALLED_APPS", "STATIC_URL", "STATICFILES_DIRS",
                 "STATICFILES_FINDERS", "STORAGES", "FORCE_SCRIPT_NAME")  # fmt: skip
        key = repr(
            sorted((name, getattr(settings, name, None)) for name in dir(settings)
                   if name in names or name.startswith("WHITENOISE_"))
        )  # fmt: skip
        if key not in listed:
            before = dict(self.files)
            original(self)
            listed[key] = {u: f for u, f in self.files.items() if before.get(u) is not f}
        self.files.update(listed[key])

    WhiteNoiseMiddleware.add_files_from_finders = add_files_from_finders  # type: ignore[method-assign]
    yield
    WhiteNoiseMiddleware.add_files_from_finders = original  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _reset_cluster() -> Iterator[None]:
    from queueing import forecaster, forecasting, world
    from queueing.state import annotate

    world.forget()  # each test's trees start from its own database, as a new worker would
    forecasting.clear_cache()
    annotate.forget()  # and the first cycles full, whatever the last test's took
    forecaster.forget()  # and no forecaster seen yet
    yield
    set_cluster(None)
    world.forget()
    forecasting.clear_cache()
    annotate.forget()
    forecaster.forget()


@pytest.fixture(scope="session")
def django_db_modify_db_settings(
    request: pytest.FixtureRequest, django_db_modify_db_settings_parallel_suffix: None
) -> None:
    """Browser tests serve pages from a server thread: on SQLite it needs a test database
    in a file (an in-memory one cannot be shared between threads safely)."""
    from django.conf import settings

    wants_server = any(
        item.get_closest_marker("browser") or item.get_closest_marker("live")
        for item in request.session.items
    )
    db = settings.DATABASES["default"]
    if wants_server and db["ENGINE"].endswith("sqlite3"):
        folder = Path(tempfile.mkdtemp(prefix="kq-test-db-"))
        db.setdefault("TEST", {})["NAME"] = str(folder / "test.sqlite3")


# --- db_independent: run in one of CI's two passes only -------------------------------------
#
# CI (.ci/run) runs the suite twice, on PostgreSQL + Redis and on SQLite + in-process layers,
# and deselects `db_independent` tests in the second pass. A test is db_independent when
# the pass's backends cannot change what it does: the pure engine (tests/engine; the
# import contract keeps Django and Redis out of queueing.engine), plain-code modules
# listed below (quantities, kinds, the adapter against the fake API server), and tests whose
# processes bring their own database and broker (a fresh `make run` in an empty var/, a
# scratch PostgreSQL, a supervised Redis). The check below refuses the marker on any test
# that touches the suite's database, so it can never hide a backend's failure.

# Paths under tests/ (a folder ends with /): no database, no Redis, no setting of either.
DB_INDEPENDENT = (
    "engine/",  # the pure engine
    "kube/test_adapter.py",  # the adapter against the in-process fake API server
    "kube/test_deploy_manifests.py",
    "kube/test_fakekube.py",
    "kube/test_fakekube_load.py",
    "kube/test_kinds_unit.py",
    "kube/test_rbac.py",
    "kube/test_watch_cache.py",
    "portal/test_units.py",
    "queueing/test_quantities_grammar.py",
    "test_parallel.py",  # the suite's own helpers
    "test_polling.py",
)


TESTS_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        rel = Path(str(item.path)).resolve().relative_to(TESTS_DIR).as_posix()
        if rel.startswith(DB_INDEPENDENT):
            item.add_marker(pytest.mark.db_independent)
        if item.get_closest_marker("db_independent") is None:
            continue
        fixtures = set(getattr(item, "fixturenames", ()))
        if item.get_closest_marker("django_db") or "django_db_setup" in fixtures:
            raise pytest.UsageError(
                f"{item.nodeid} is marked db_independent but uses the suite's database: "
                "it must run on both backends (remove the marker)"
            )
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the order xdist's scheduler hands out
        _heavy_modules_first(items)


# --- pytest-xdist --------------------------------------------------------------------------
#
# CI (.ci/run) runs each pass on two xdist workers with `--dist loadfile`: a module's tests
# run one after another on one worker. The cases of an e2e module (each starts several
# product processes: Celery workers, beat, servers) never run side by side, and a module's
# module-scoped live server (``server_url``) is started once. (Not `--dist loadgroup`:
# pytest-xdist 3.8 files grouped tests by rewriting ``item._nodeid``, which pytest 9 no
# longer reads, so its xdist_group marks have no effect here.) Each worker has its own test
# database (pytest-django suffixes its name with the worker id) and its own Redis database
# (tests/parallel.py, which .ci/run loads; the check below refuses a parallel run with
# REDIS_URL without it).


def _heavy(item: pytest.Item) -> bool:
    """Starts processes (Celery workers, servers) or drives a browser: seconds a test."""
    return bool(item.get_closest_marker("slow") or item.get_closest_marker("browser"))


def _heavy_modules_first(items: list[pytest.Item]) -> None:
    """Order the modules for `--dist loadfile` (with --no-loadscope-reorder, as .ci/run
    runs it): modules of heavy tests first, then by their number of tests, each module's
    own tests in their order. xdist's default order (most tests first) handed the chaos
    test (one case, a minute) and the fresh `make run`s to the workers last, and one
    worker idled while the other ran them."""
    modules: dict[Path, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(Path(str(item.path)), []).append(item)
    ordered = sorted(modules.values(), key=lambda tests: (not any(map(_heavy, tests)), -len(tests)))
    items[:] = [item for tests in ordered for item in tests]


def pytest_configure(config: pytest.Config) -> None:
    """A parallel run with REDIS_URL needs tests/parallel.py (a Redis database per worker)."""
    workers = len(config.getoption("tx", None) or ())
    if (
        workers > 1
        and os.environ.get("REDIS_URL")
        and not config.pluginmanager.has_plugin("tests.parallel")
    ):
        raise pytest.UsageError(
            f"{workers} xdist workers would share the Redis database of REDIS_URL: "
            "add -p tests.parallel (each worker gets a database of its own; see .ci/run)"
        )
