"""Koord-Queue settings, read from the environment with safe development defaults.

Every knob an operator turns is an environment variable; nothing secret lives in this
file. A misconfiguration raises ImproperlyConfigured with one sentence, which the entry
points (manage.py, asgi.py, celery.py) print without a traceback.
"""

from __future__ import annotations

import secrets
from datetime import timedelta
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
VAR_DIR = Path(env.str("KQ_VAR_DIR", default=str(BASE_DIR / "var")))


_TRUE = frozenset(("true", "1", "yes", "y", "on"))
_FALSE = frozenset(("false", "0", "no", "n", "off", ""))


def _bool(name: str, default: bool) -> bool:
    # env.bool reads anything it does not know as false: a typo ("ture") would turn a
    # setting off without a word.
    raw = env.str(name, default=None)
    if raw is None:
        return default
    word = raw.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, not {raw!r}.")


def _int(name: str, default: int, minimum: int | None = None) -> int:
    try:
        value = env.int(name, default=default)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, not {env.str(name)!r}.") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {value}.")
    return value


def _gc_threshold(name: str, default: str) -> tuple[int, ...] | None:
    """``gc.set_threshold``'s one to three positive integers, comma-separated; empty:
    None (Python's own)."""
    raw = env.str(name, default=default).strip()
    if not raw:
        return None
    parts = [part.strip() for part in raw.split(",")]
    if not 1 <= len(parts) <= 3 or not all(part.isdigit() and int(part) > 0 for part in parts):
        raise ImproperlyConfigured(
            f"{name} must be one to three positive integers separated by commas "
            f"(gc.set_threshold's), not {raw!r}."
        )
    return tuple(int(part) for part in parts)


def _float(name: str, default: float, minimum: float | None = None) -> float:
    try:
        value = env.float(name, default=default)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a number, not {env.str(name)!r}.") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {value}.")
    return value


def _choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = env.str(name, default=default).strip().lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, not {value!r}.")
    return value


# Off unless asked for: a debug page lists URL patterns and settings to whoever asks.
DEBUG = _bool("DEBUG", False)
TESTING = _bool("KQ_TESTING", False)
# Served over TLS (by this process or a proxy in front): cookies only over HTTPS, HSTS,
# and a SECRET_KEY from the environment. Said explicitly (deploy/config.yaml does):
# `make run`, CI and the tests serve plain HTTP on loopback, where a Secure cookie would
# never come back and a key kept under var/ does.
KQ_TLS = _bool("KQ_TLS", False)


def _secret_key() -> str:
    key = env.str("SECRET_KEY", default="")
    if key:
        return key
    if KQ_TLS:
        raise ImproperlyConfigured("SECRET_KEY must be set when KQ_TLS is on (a deployment).")
    # Loopback (make run, tests): generate once and keep it under var/ so sessions survive.
    path = VAR_DIR / "secret_key"
    if not path.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        candidate = path.with_suffix(".tmp")
        candidate.write_text(secrets.token_urlsafe(50))
        candidate.chmod(0o600)
        candidate.replace(path)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
SESSION_COOKIE_SECURE = _bool("SESSION_COOKIE_SECURE", KQ_TLS)
CSRF_COOKIE_SECURE = _bool("CSRF_COOKIE_SECURE", KQ_TLS)
if KQ_TLS:
    # SecurityMiddleware sends it on HTTPS answers only, so plain HTTP never pins a host.
    SECURE_HSTS_SECONDS = _int("SECURE_HSTS_SECONDS", 31536000, 0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = _bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
if _bool("KQ_BEHIND_TLS_PROXY", False):
    # Only behind a proxy that sets (and strips clients' own) X-Forwarded-Proto.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_HTTPONLY = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Request bodies: the API's largest honest body (a workload with its manifest) is far
# below this; Django answers a larger one with 400 before any view reads it.
DATA_UPLOAD_MAX_MEMORY_SIZE = _int("KQ_MAX_BODY_BYTES", 1024 * 1024, 1024)
DATA_UPLOAD_MAX_NUMBER_FIELDS = 2000

# Content-Security-Policy (django-csp): scripts only from our own static files, no inline
# script anywhere; style attributes (the quota bars' widths) are the one inline allowance.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "style-src-attr": ["'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "font-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

# Failed logins (django-axes): a username, and separately an address, is locked after
# AXES_FAILURE_LIMIT failures for the cool-off; 429 with Retry-After; audited.
AXES_FAILURE_LIMIT = _int("KQ_LOGIN_FAILURE_LIMIT", 5, 1)
AXES_COOLOFF_TIME = timedelta(minutes=_float("KQ_LOGIN_COOLOFF_MIN", 15.0, 0.1))
AXES_LOCKOUT_PARAMETERS = ["ip_address", "username"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "portal.security.lockout_response"
AXES_IPWARE_META_PRECEDENCE_ORDER = ("REMOTE_ADDR",)  # forwarded headers can be forged
AXES_VERBOSE = False
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "axes",
    "csp",
    "queueing",
    "portal",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "portal.outage.ServiceOutageMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "portal.urls"
ASGI_APPLICATION = "portal.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.context_processors.navigation",
            ],
        },
    },
]

# --- Database ---------------------------------------------------------------------------
_default_sqlite = VAR_DIR / "koord-queue.sqlite3"
try:
    DATABASES = {"default": env.db_url("DATABASE_URL", default=f"sqlite:///{_default_sqlite}")}
except (ValueError, KeyError) as exc:
    raise ImproperlyConfigured(
        f"DATABASE_URL is not a database URL Koord-Queue understands: {exc}."
    ) from exc
_engine = DATABASES["default"]["ENGINE"]
if _engine.endswith("sqlite3"):
    if DATABASES["default"]["NAME"] not in ("", ":memory:"):
        Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # Web, worker and beat share one file: WAL lets readers run beside the writer, and
    # IMMEDIATE transactions take the write lock up front instead of failing to upgrade.
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
    }
    # A file, not memory, so tests can share the database with worker subprocesses.
    DATABASES["default"]["TEST"] = {
        "NAME": env.str("KQ_TEST_DB_NAME", default=str(VAR_DIR / "test-koord-queue.sqlite3"))
    }
elif "postgresql" in _engine:
    DATABASES["default"]["ENGINE"] = "django.db.backends.postgresql"
    if _bool("KQ_DB_POOL", False):
        # Under ASGI every request runs its sync code in a fresh thread, so a persistent
        # (per-thread) connection is never reused and each request would connect anew:
        # the ASGI server runs with KQ_DB_POOL=1 (see run_all). Workers and commands keep
        # persistent connections (a pool's threads would not survive Celery's fork).
        DATABASES["default"]["CONN_MAX_AGE"] = 0
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            "max_size": _int("KQ_DB_POOL_SIZE", 8, 1),
            "timeout": _float("KQ_DB_POOL_TIMEOUT_S", 10.0, 0.1),
        }
    else:
        DATABASES["default"].setdefault("CONN_MAX_AGE", _int("DB_CONN_MAX_AGE", 60, 0))
        DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # The session's time zone set by the connection's startup packet: Django (USE_TZ)
    # wants UTC and sends SET TIME ZONE on every new connection whose server default is
    # another name for it (Debian's is "Etc/UTC"): one round trip per connection saved.
    _options = DATABASES["default"].setdefault("OPTIONS", {})
    _options["options"] = f"{_options.get('options', '')} -c TimeZone=UTC".strip()
    if not _bool("KQ_DB_JIT", False):
        # PostgreSQL's JIT compiles a statement whose estimated cost passes
        # jit_above_cost; on a table whose statistics lag a burst, a read of a few
        # hundred rows by index is estimated at 100x its cost and spent 30-38 ms
        # compiling for 9 ms of work (the sync's read, Kueue's baseline). The product's
        # statements are short, by index: no JIT (KQ_DB_JIT=1 gives the server's own).
        _options["options"] += " -c jit=off"
    if env.str("KQ_TEST_DB_NAME", default=""):
        DATABASES["default"]["TEST"] = {"NAME": env.str("KQ_TEST_DB_NAME")}
else:
    raise ImproperlyConfigured("DATABASE_URL must point at PostgreSQL or SQLite.")
DATABASE_IS_SQLITE = _engine.endswith("sqlite3")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis, Celery, Channels -----------------------------------------------------------
REDIS_URL = env.str("REDIS_URL", default="")
if REDIS_URL and not REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
    raise ImproperlyConfigured("REDIS_URL must start with redis://, rediss:// or unix://.")

CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL or "memory://")
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True  # a worker killed mid-task leaves the message for another
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = _bool("KQ_CELERY_EAGER", False)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TIMEZONE = "UTC"
CELERY_WORKER_HIJACK_ROOT_LOGGER = False  # Django's LOGGING below decides
# Celery's Django fixup closes every database connection before and after each task
# unless this is set: a worker then connected anew per task (18-20 ms of wall time on
# PostgreSQL each, thousands a minute under load). Now a worker process keeps its
# connection for this many tasks; portal.celery checks it before each task (a broken
# one, after a PostgreSQL restart, is replaced; CONN_MAX_AGE still ages it out).
CELERY_DB_REUSE_MAX = _int("KQ_DB_REUSE_TASKS", 10_000, 0) or None
KQ_CYCLE_INTERVAL_S = _float("KQ_CYCLE_INTERVAL_S", 3.0, 0.1)
# The garbage collector's thresholds in workers and the cluster watcher (queueing.gctune:
# start-up's objects frozen, young collections per 50,000 allocations instead of 700).
KQ_GC_THRESHOLD = _gc_threshold("KQ_GC_THRESHOLD", "50000,20,100")
# Event-driven cycles (queueing/wake.py, docs/realtime.md): on wherever a broker carries
# tasks to other processes; beat's tick above stays the periodic reconciliation.
KQ_WAKE = _bool("KQ_WAKE", not CELERY_BROKER_URL.startswith("memory://"))
KQ_WAKE_DEBOUNCE_MS = _int("KQ_WAKE_DEBOUNCE_MS", 20, 0)
KQ_CYCLE_QUEUE = env.str("KQ_CYCLE_QUEUE", default="cycle")
# A woken sync cycles the trees it touched in the same task (no react of theirs on its
# way), instead of sending each its own react behind whatever the queue holds.
KQ_SYNC_CYCLES = _bool("KQ_SYNC_CYCLES", True)
# A woken sync's pass also takes the trees with a react on their way, and runs again
# while wakes of the sync come (docs/realtime.md §1). Off: at full scale it cost the
# worker more CPU than it saved waiting (docs/BENCHMARKS.md, helper cyc).
KQ_SYNC_PASS_TAKES = _bool("KQ_SYNC_PASS_TAKES", False)
# A woken sync's pass cycles its trees in turn for at most this long, then syncs again
# before the rest (the finishes seen meanwhile free their quota for them); 0: all in turn.
KQ_SYNC_PASS_MS = _int("KQ_SYNC_PASS_MS", 100, 0)
# Each cycle process keeps its trees' live workloads in memory (queueing/world.py) and
# rebuilds them from the database at least this often.
KQ_WORLD = _bool("KQ_WORLD", True)
KQ_WORLD_REBUILD_S = _float("KQ_WORLD_REBUILD_S", 60.0, 0.0)
# Positions and ETAs of a tree are forecast at most this often (woken cycles between
# only admit; queueing/state/annotate.py).
KQ_FORECAST_EVERY_S = _float("KQ_FORECAST_EVERY_S", 1.0, 0.0)
# The forecast's time per forecasting run (the engine's eta_budget_s: its runtime draws,
# whose median is the p50, stop when it is spent). A cycle that forecasts itself holds
# its admissions meanwhile; the forecaster holds nothing, and within its quarter of the
# time (state.forecast_due) a larger budget makes its forecasts rarer, not its CPU more.
KQ_ETA_BUDGET_S = _float("KQ_ETA_BUDGET_S", 0.25, 0.01)
KQ_FORECASTER_ETA_BUDGET_S = _float("KQ_FORECASTER_ETA_BUDGET_S", 1.0, 0.01)
# While a forecaster consumes this queue (manage.py run_all's "forecaster"), cycles ask it
# for those forecasts and only admit (queueing/forecaster.py); empty: always in the cycle.
KQ_FORECAST_QUEUE = env.str("KQ_FORECAST_QUEUE", default="forecast")
# What cycles learn from finished work (runtime quantiles and ratios per queue) is read
# again at most this often per process (queueing/forecasting.py); it moves slowly.
KQ_HISTORY_TTL_S = _float("KQ_HISTORY_TTL_S", 30.0, 0.0)
# Live stream: a connection merges what arrives for this long, then sends one frame.
KQ_WS_DEBOUNCE_MS = _int("KQ_WS_DEBOUNCE_MS", 100, 0)
# Client frames: at most this many bytes each, this many a second (bursts of twice that).
KQ_WS_MAX_FRAME_BYTES = _int("KQ_WS_MAX_FRAME_BYTES", 65536, 1024)
KQ_WS_FRAME_RATE = _float("KQ_WS_FRAME_RATE", 20.0, 1.0)

if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # redis-py 8 times reads out after 5 s by default, which breaks the layer's
                # blocking BZPOPMIN: every idle consumer would crash and reconnect every
                # 5 s (django/channels_redis#422). The layer bounds its own waits.
                "hosts": [{"address": REDIS_URL, "socket_timeout": None}],
                "capacity": 1500,
                "expiry": 30,
            },
        }
    }
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
        }
    }
else:
    # Only for single-process use (tests on SQLite); `make run` always provides Redis.
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# --- Cluster ----------------------------------------------------------------------------
KQ_CLUSTER = _choice("KQ_CLUSTER", "simulated", ("simulated", "kubernetes"))
KQ_NAMESPACES = env.list("KQ_NAMESPACES", default=[])
KQ_KUBECONFIG = env.str("KUBECONFIG", default="")
KQ_MIRROR_QUEUEUNITS = _bool("KQ_MIRROR_QUEUEUNITS", False)
# Kubernetes Events on managed jobs (queued, admitted, preempted, why pending).
KQ_KUBE_EVENTS = _bool("KQ_KUBE_EVENTS", True)
# Runtime quota written back to ElasticQuotas at most this often per quota.
KQ_QUOTA_WRITEBACK_S = _float("KQ_QUOTA_WRITEBACK_S", 10.0, 0.0)
# ElasticQuotas, Queues and ResourceQuotas as live configuration (docs/kube-queue-compat.md).
KQ_KUBE_LIVE_CONFIG = _bool("KQ_KUBE_LIVE_CONFIG", False)
KQ_KUBE_CONFIG_SYNC_S = _float("KQ_KUBE_CONFIG_SYNC_S", 5.0, 0.0)
KQ_KUBE_ROOT = env.str("KQ_KUBE_ROOT", default="")  # the root to import under, when several
# Quotas managed here written as ElasticQuotas (queueing/kubequotas.py), in this namespace,
# so that Koordinator's scheduler enforces the same tree. On with live configuration.
KQ_KUBE_WRITE_QUOTAS = _bool("KQ_KUBE_WRITE_QUOTAS", KQ_KUBE_LIVE_CONFIG)
KQ_KUBE_QUOTA_NAMESPACE = env.str("KQ_KUBE_QUOTA_NAMESPACE", default="koord-queue")
# Whose QueueUnit phase names the mirror writes (docs/kube-queue-compat.md).
KQ_QUEUEUNIT_PHASES = _choice("KQ_QUEUEUNIT_PHASES", "kube-queue", ("kube-queue", "koord-queue"))
KQ_SIM_FAILURE_RATE = _float("KQ_SIM_FAILURE_RATE", 0.05, 0.0)
if KQ_SIM_FAILURE_RATE > 1:
    raise ImproperlyConfigured(
        f"KQ_SIM_FAILURE_RATE must be between 0 and 1, not {KQ_SIM_FAILURE_RATE}."
    )
KQ_FAIR_SHARE_MODE = _choice("KQ_FAIR_SHARE_MODE", "blended", ("instant", "historical", "blended"))
KQ_USAGE_HALF_LIFE_S = _float("KQ_USAGE_HALF_LIFE_S", 7 * 24 * 3600.0, 1.0)
KQ_CYCLE_LEASE_S = _float("KQ_CYCLE_LEASE_S", 30.0, 1.0)
KQ_DEMO_TRICKLE = _bool("KQ_DEMO_TRICKLE", False)
KQ_METRICS_TOKEN = env.str("KQ_METRICS_TOKEN", default="")
KQ_POOL_LABEL = env.str("KQ_POOL_LABEL", default="koord-queue/pool")
# Backfill into the room drains hold for aged gangs (docs/eta.md); off only on purpose.
KQ_BACKFILL = _bool("KQ_BACKFILL", True)
# Kinds the Kubernetes adapter manages; a kind whose CRD is not installed is skipped.
KQ_KINDS_ALL = ("Job", "JobSet", "RayJob", "PyTorchJob", "TFJob", "MPIJob", "TrainJob")
KQ_KINDS = env.list("KQ_KINDS", default=list(KQ_KINDS_ALL))
_unknown_kinds = sorted(set(KQ_KINDS) - set(KQ_KINDS_ALL))
if _unknown_kinds:
    raise ImproperlyConfigured(
        f"KQ_KINDS may name {', '.join(KQ_KINDS_ALL)}; {', '.join(_unknown_kinds)} is not one."
    )
# The container that runs a Job submitted with pod sets only (no manifest).
KQ_JOB_IMAGE = env.str("KQ_JOB_IMAGE", default="busybox:1.36")
# Kubernetes API calls: per-request timeout and the total time one call may spend retrying.
# Workers read the cluster from informers (list once, then watch) instead of listing it
# every tick; and send a cycle's admissions and preemptions this many at a time.
KQ_KUBE_WATCH_CACHE = _bool("KQ_KUBE_WATCH_CACHE", False)
# The watcher (`manage.py watch_cluster`) follows jobs, nodes and bound pods to wake the
# cycle worker. Off where every cycle worker keeps a watch cache of its own
# (KQ_KUBE_WATCH_CACHE), whose informers wake it for the same changes: the watcher then
# only tells (queueing.teller) and follows the configuration objects (KQ_KUBE_LIVE_CONFIG).
KQ_WATCH_WAKES = _bool("KQ_WATCH_WAKES", True)
KQ_KUBE_WRITE_CONCURRENCY = _int("KQ_KUBE_WRITE_CONCURRENCY", 8, 1)
# With the watch cache, syncs between full ones look only at the jobs that changed.
KQ_FULL_SYNC_S = _float("KQ_FULL_SYNC_S", 30.0, 0.0)
KQ_KUBE_TIMEOUT_S = _float("KQ_KUBE_TIMEOUT_S", 10.0, 0.5)
KQ_KUBE_RETRY_S = _float("KQ_KUBE_RETRY_S", 10.0, 0.0)
if KQ_KUBE_TIMEOUT_S + KQ_KUBE_RETRY_S >= KQ_CYCLE_LEASE_S:
    # A cluster write must end while the lease that ordered it is held (queueing/lease.py).
    raise ImproperlyConfigured(
        f"KQ_KUBE_TIMEOUT_S + KQ_KUBE_RETRY_S ({KQ_KUBE_TIMEOUT_S + KQ_KUBE_RETRY_S:g}) must "
        f"be less than KQ_CYCLE_LEASE_S ({KQ_CYCLE_LEASE_S:g})."
    )

# --- Auth, API --------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# Requests per token (or per signed-in user) and per anonymous address; "" = unlimited.
KQ_API_RATES = {
    "token": env.str("KQ_API_RATE", default="1200/min"),
    "anon": env.str("KQ_API_ANON_RATE", default="60/min"),
}
# Wrong keys that share one token's prefix, from any address ("" = unlimited).
KQ_API_AUTH_FAIL_RATE = env.str("KQ_API_AUTH_FAIL_RATE", default="20/min")
for _scope, _rate in {**KQ_API_RATES, "failed authentication": KQ_API_AUTH_FAIL_RATE}.items():
    if _rate:
        _count, _, _period = _rate.partition("/")
        if not _count.isdigit() or _period not in ("s", "sec", "m", "min", "h", "hour", "d", "day"):
            raise ImproperlyConfigured(
                f"The API rate for {_scope} must look like 600/min, not {_rate!r}."
            )

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "portal.api.schema.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.api.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_THROTTLE_CLASSES": ["portal.api.throttling.TokenRateThrottle"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "portal.api.pagination.Pagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "portal.api.errors.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Koord-Queue API",
    "DESCRIPTION": (
        "Job queueing and fair-share admission for Kubernetes batch and AI workloads. "
        "Authenticate with `Authorization: Token <key>` (create one with "
        "`python manage.py create_token <user>` or POST /api/v1/tokens/). Errors share one "
        "shape: `{status, code, detail, fields}`."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "PhaseEnum": "queueing.choices.Phase",
        "RoleEnum": "queueing.choices.Role",
        "PolicyEnum": "portal.api.serializers.POLICY_CHOICES",
    },
}

# --- Static files, i18n, logging --------------------------------------------------------
STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise warns about a missing root
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "filters": {"client_errors_in_one_line": {"()": "portal.logfilters.ClientErrorsInOneLine"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "filters": ["client_errors_in_one_line"],
        }
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # One line per task every few seconds is noise; our cycle logs what matters.
        "celery.app.trace": {"level": "WARNING"},
        # django-axes narrates every login at INFO; lockouts are audited (portal.security).
        "axes": {"level": "WARNING"},
    },
}
