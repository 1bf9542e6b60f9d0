"""Settings for Resumer, read from the environment.

Defaults are for development: a SQLite file under var/, Redis on localhost, DEBUG on.
`RESUMER_ENV=production` switches on everything `manage.py check --deploy` asks for. The
tests' defaults are in pyproject.toml (pytest's `env`); a value that makes no sense is
reported by the system checks (runs/checks.py), not by an exception here, and every process
runs them before it serves (the web server too: resumer/wsgi.py). The one exception is a
DATABASE_URL that names no database: there is nothing to start on, and ImproperlyConfigured
says so.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("RESUMER_VAR_DIR", BASE_DIR / "var"))
# Runtime state (the SQLite file, media, pid and log files) lives here; a fresh clone has none.
VAR_DIR.mkdir(parents=True, exist_ok=True)


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


# Numbers read from the environment that do not read as their kind: name -> (what was given,
# the default that stands meanwhile, the kind's name). A system check names them
# (runs.E011), as it names one out of its bounds.
RESUMER_UNREADABLE: dict[str, tuple[str, str, str]] = {}


def env_number(name: str, default: str, kind: type[int] | type[float] = float) -> int | float:
    raw = os.environ.get(name, default)
    try:
        return kind(raw.strip())
    except ValueError:
        RESUMER_UNREADABLE[name] = (raw, default, kind.__name__)
        return kind(default)


def env_list(name: str, default: str = "") -> list[str]:
    """A comma-separated variable as a list; blanks around and between items are dropped."""
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_ints(name: str, default: str = "") -> list[int | str]:
    """env_list of whole numbers. An item that is not one is kept as it was written, for a
    system check to name (runs/checks.py) instead of a traceback here."""
    items: list[int | str] = []
    for item in env_list(name, default):
        try:
            items.append(int(item))
        except ValueError:
            items.append(item)
    return items


PRODUCTION = os.environ.get("RESUMER_ENV", "development") == "production"

DEBUG = env_bool("DEBUG", not PRODUCTION)
# In production there is no default: an empty key makes Django refuse anything that signs
# (sessions, CSRF, password resets), and runs.E005 says what is missing at start-up.
SECRET_KEY = os.environ.get("SECRET_KEY", "") or (
    "" if PRODUCTION else "dev-only-insecure-key-resumer-0123456789-abcdefghijklmnopqrstuvwxyz"
)

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "" if PRODUCTION else "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

# The pipelines Resumer runs: dotted paths to runs.pipeline.Pipeline objects, checked at
# start-up (runs/checks.py). A module of your own only has to be importable (PYTHONPATH).
RESUMER_PIPELINES = env_list("RESUMER_PIPELINES", "demo.pipeline.content_pipeline")
USES_DEMO = any(path.split(".")[0] == "demo" for path in RESUMER_PIPELINES)
# Fault injection for any pipeline (manage.py start_run_with_faults): the demo's fault hooks
# around every call and the demo app, whose table keeps each run's faults. On with the demo
# pipeline; RESUMER_FAULTS=1 turns it on for your own (web, command line and every worker).
RESUMER_FAULTS = env_bool("RESUMER_FAULTS", USES_DEMO)
# Called around every tool call a worker makes (runs/execution/hooks.py); with fault injection,
# the demo's hooks, which act only on runs started with faults.
RESUMER_CALL_HOOKS = os.environ.get(
    "RESUMER_CALL_HOOKS", "demo.faults.FaultHooks" if RESUMER_FAULTS else ""
).strip()
USES_DEMO = USES_DEMO or RESUMER_CALL_HOOKS.split(".")[0] == "demo"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "django_rq",
    "axes",
    "runs",
]
# The JSON API's library (django-ninja) is not an installed app: an app is imported at every
# start, and ninja's package brings pydantic and its whole machinery, which a command line
# does not need (bench/cli_start.py; the web server imports it with the URLs). Its docs page's
# template and static files (Swagger UI from our own origin, no CDN, which the
# Content-Security-Policy allows) are found here instead (TEMPLATES, STATICFILES_DIRS), and
# runs/api/api.py renders that page. find_spec locates the package without importing it.
NINJA_DIR = Path(importlib.util.find_spec("ninja").origin).parent
# The demo app is the demo pipeline's in-process fact source (and its fault injection and
# seed_demo): its tables, admin pages and commands belong to a deployment only if it runs it.
if USES_DEMO:
    INSTALLED_APPS.append("demo")

MIDDLEWARE = [
    "runs.request_ids.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "runs.middleware.RejectNulMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "runs.middleware.ContentSecurityPolicyMiddleware",
    "runs.middleware.MethodNotAllowedPageMiddleware",
    # Last, so that a throttled login never reaches the view.
    "axes.middleware.AxesMiddleware",
]

AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]

ROOT_URLCONF = "resumer.urls"
WSGI_APPLICATION = "resumer.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates", NINJA_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# SQLite is the embedded default. WAL lets readers run beside the one writer, and IMMEDIATE
# transactions take the write lock at BEGIN, so concurrent writers queue on the busy timeout
# instead of failing with "database is locked" when a read lock cannot be upgraded.
DEFAULT_SQLITE = f"sqlite:///{VAR_DIR / 'resumer.sqlite3'}"
DATABASE_URL = os.environ.get("DATABASE_URL", DEFAULT_SQLITE)
try:
    DATABASES = {
        "default": dj_database_url.parse(DATABASE_URL, conn_max_age=0, conn_health_checks=True)
    }
except (ValueError, KeyError) as exc:  # dj-database-url's UnknownSchemeError is a ValueError
    raise ImproperlyConfigured(
        f"DATABASE_URL is {DATABASE_URL!r}, which names no database ({exc}): give "
        "postgres://user@host:5432/name, or sqlite:////absolute/path/resumer.sqlite3"
    ) from None
# How far a SQLite commit is on the disk when it returns (docs/deploy.md): NORMAL survives a
# crashed process, not a power loss or an OS crash (WAL's commits reach the disk at its
# checkpoints); FULL waits for the disk at every commit that must (RESUMER_DEFER_FLUSH says
# which need not) and survives both, at a price per commit. Any other value is named by a system check (runs.E010) and NORMAL used meanwhile.
SQLITE_SYNCHRONOUS_LEVELS = ("NORMAL", "FULL")
RESUMER_SQLITE_SYNCHRONOUS = os.environ.get("RESUMER_SQLITE_SYNCHRONOUS", "NORMAL").strip().upper()
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    synchronous = (
        RESUMER_SQLITE_SYNCHRONOUS
        if RESUMER_SQLITE_SYNCHRONOUS in SQLITE_SYNCHRONOUS_LEVELS
        else "NORMAL"
    )
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        # wal_autocheckpoint: the WAL is copied into the database file every 10,000 pages
        # (40 MB) instead of SQLite's 1,000. Each such checkpoint flushes the WAL and the
        # file to the disk, the only flushes NORMAL makes, and a tool call writes a dozen
        # pages: at 1,000 a worker stopped for two flushes every eighty calls (issue 49).
        "init_command": (
            f"PRAGMA journal_mode=WAL; PRAGMA synchronous={synchronous}; PRAGMA busy_timeout=30000; "
            "PRAGMA wal_autocheckpoint=10000;"
        ),
    }
    # Tests that start worker processes need a file both processes can open.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test-resumer.sqlite3")}
elif (
    DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
    and os.environ.get("RESUMER_PG_ANSWER_LATER", "1") == "1"
):
    # Django's backend, and a tool call's outcome sent without waiting for the server's
    # answer, read before the connection's next statement (resumer/postgresql/base.py).
    # RESUMER_PG_ANSWER_LATER=0: Django's own, and every write waits.
    DATABASES["default"]["ENGINE"] = "resumer.postgresql"
if DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3" and (
    os.environ.get("RESUMER_PG_PREPARED", "1") == "1"
):
    # Parameters bound by the server and a statement prepared once it ran five times on a
    # connection: the append path's statements are planned once per worker connection instead
    # of on every tool call (bench/tool_call.py: about a third of a call's time). Behind a
    # pooler that cannot keep prepared statements (PgBouncer in transaction mode before 1.21),
    # set RESUMER_PG_PREPARED=0.
    DATABASES["default"]["OPTIONS"] = {"server_side_binding": True, "prepare_threshold": 5}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
# A stage job RQ has not seen end after this many seconds is killed (its run is then
# interrupted and resumable).
RESUMER_JOB_TIMEOUT = env_number("RESUMER_JOB_TIMEOUT", "600", int)
RQ_QUEUES = {
    "default": {
        "URL": REDIS_URL,
        "DEFAULT_TIMEOUT": RESUMER_JOB_TIMEOUT,
    },
}
# django-rq would also mount its pages at /admin/django_rq/ for any staff user; they are
# mounted once, at /admin/rq/, behind the supervisor role (runs/dashboard/queue_admin.py).
RQ_SHOW_ADMIN_LINK = False

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
# The zone every page shows times in, and names beside them (e.g. Europe/Paris): the
# operators'. The database keeps UTC whatever it is.
TIME_ZONE = os.environ.get("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static", NINJA_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", VAR_DIR / "staticfiles"))
# A relative MEDIA_ROOT is taken inside VAR_DIR (the tests' is test-media, beside media).
MEDIA_ROOT = VAR_DIR / os.environ.get("MEDIA_ROOT", "media")
# DEBUG (and the tests, through this variable) serve static files from the app folders, as
# runserver does, instead of warning on every request that collectstatic has not filled
# STATIC_ROOT.
WHITENOISE_AUTOREFRESH = env_bool("WHITENOISE_AUTOREFRESH", DEBUG)
MEDIA_URL = "media/"
STORAGES = {
    # Artifacts go through the default storage: an S3-compatible backend is configuration.
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if PRODUCTION
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "runs:inbox"
LOGOUT_REDIRECT_URL = "login"

# Login throttling: five failures lock the username+address pair for 15 minutes.
AXES_FAILURE_LIMIT = env_number("AXES_FAILURE_LIMIT", "5", int)
AXES_COOLOFF_TIME = 0.25
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
# How many proxies in front of the web server append to X-Forwarded-For (docs/deploy.md): the
# lockout then keys on the client's address, not the proxy's (runs/proxies.py).
RESUMER_TRUSTED_PROXIES = env_number("RESUMER_TRUSTED_PROXIES", "0", int)
AXES_CLIENT_IP_CALLABLE = "runs.proxies.client_ip"
AXES_RESET_ON_SUCCESS = True
# A locked-out login gets a page in the dashboard's style (HTTP 429), not a bare string.
AXES_LOCKOUT_TEMPLATE = "registration/locked.html"
# Pages carry the CSRF token themselves (forms, and htmx's hx-headers on <body>); no script
# ever reads the cookie, so it need not be readable by one.
CSRF_COOKIE_HTTPONLY = True

# --- Resumer's own knobs -------------------------------------------------------------------
# A worker renews its lease every TTL/3; the sweeper runs every SWEEP_INTERVAL seconds inside
# each worker. A dead worker is seen as interrupted within TTL + SWEEP_INTERVAL (45 s here).
RESUMER_LEASE_TTL = env_number("RESUMER_LEASE_TTL", "30")
RESUMER_SWEEP_INTERVAL = env_number("RESUMER_SWEEP_INTERVAL", "15")
# A queued stage job that Redis no longer knows about counts as lost after this grace.
RESUMER_QUEUE_GRACE = env_number("RESUMER_QUEUE_GRACE", "10")
RESUMER_QUEUE = os.environ.get("RESUMER_QUEUE", "default")
# An Idempotency-Key's claim (runs/api/idempotency.py) still unanswered after this long was
# left by a web process that died mid-request: the next request with the key and body takes
# it over. Longer than any API request runs: gunicorn kills a worker silent for its
# --timeout (30 s by default), so the default leaves four times that.
RESUMER_IDEMPOTENCY_CLAIM_SECONDS = env_number("RESUMER_IDEMPOTENCY_CLAIM_SECONDS", "120")
# Keys are forgotten after this long (the worker's sweeper purges them).
RESUMER_IDEMPOTENCY_RETENTION_HOURS = env_number("RESUMER_IDEMPOTENCY_RETENTION_HOURS", "24")
# A group approval of more runs than this is carried out by a worker (the page follows its
# progress); up to this many are approved within the web request.
RESUMER_GROUP_INLINE = env_number("RESUMER_GROUP_INLINE", "20", int)
# On PostgreSQL, a write whose loss in a database crash the protocol recovers from (a SAFE
# call's events, a confirmed outcome, a re-use: runs/ledger/append.py) commits without waiting for
# the disk; an intent, a checkpoint, a stop or an approval always waits. Off (0), every commit
# waits. The same on SQLite at RESUMER_SQLITE_SYNCHRONOUS=FULL (such a write commits at
# NORMAL); at NORMAL no commit waits.
RESUMER_DEFER_FLUSH = env_bool("RESUMER_DEFER_FLUSH", True)
# Payloads above this size are stored as an artifact and referenced from the event.
RESUMER_INLINE_PAYLOAD_BYTES = 8 * 1024
RESUMER_MAX_PAYLOAD_BYTES = 5 * 1024 * 1024
# Key of the HMAC that anchors each run's head (runs/ledger/chain.py). It lives in the environment,
# never in the database: a database writer without it cannot forge a rewritten history. Unset,
# heads are not anchored and verify_chain says so; production refuses to start
# (runs/checks.py, runs.E009) unless RESUMER_ALLOW_UNANCHORED=1 opts out knowingly.
RESUMER_CHAIN_KEY = os.environ.get("RESUMER_CHAIN_KEY", "")
RESUMER_ALLOW_UNANCHORED = env_bool("RESUMER_ALLOW_UNANCHORED", False)
# An HTTP tool's request or response body above this size is recorded as an artifact.
RESUMER_HTTP_INLINE_BODY_BYTES = 2 * 1024
# Where the demo pipeline's HTTP tools find the demo service (python -m demo_service; make
# run starts it there).
DEMO_SERVICE_URL = os.environ.get("DEMO_SERVICE_URL", "http://127.0.0.1:8001").rstrip("/")
# Model tools' prices (runs/tools/model.py), in dollars per million tokens, as JSON:
# {"gpt-4o-mini": {"prompt": "0.15", "completion": "0.60", "cached": "0.075"}}. A model
# without a price costs $0 in plans and usage (its tokens are still counted).
RESUMER_MODEL_PRICES = json.loads(os.environ.get("RESUMER_MODEL_PRICES", "") or "{}")
# The model the demo pipeline pins when a run starts (its `model` input): change it and the
# demo's runs show model drift.
DEMO_MODEL = os.environ.get("DEMO_MODEL", "demo-writer-1")

# --- Monitoring (docs/monitoring.md) --------------------------------------------------------
# /metrics answers `Authorization: Bearer <this>`; unset, only loopback and private-network
# clients (runs/observability/views.py).
RESUMER_METRICS_TOKEN = os.environ.get("RESUMER_METRICS_TOKEN", "")
# OpenTelemetry traces (runs/tracing.py): on when the OTEL_* environment names an exporter,
# unless this says otherwise.
RESUMER_TRACING = env_bool(
    "RESUMER_TRACING",
    bool(
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or os.environ.get("OTEL_TRACES_EXPORTER", "none").strip().lower() != "none"
    ),
)

# --- Notifications (runs/notify.py) -------------------------------------------------------
# Where links in messages point: the address people open the dashboard at.
RESUMER_PUBLIC_URL = os.environ.get("RESUMER_PUBLIC_URL", "http://127.0.0.1:8000").rstrip("/")
# Targets. None set: nothing is recorded or queued. A webhook needs its secret and an
# http(s) URL (runs.E006, runs.E007).
RESUMER_WEBHOOK_URL = os.environ.get("RESUMER_WEBHOOK_URL", "").strip()
RESUMER_WEBHOOK_SECRET = os.environ.get("RESUMER_WEBHOOK_SECRET", "")
RESUMER_NOTIFY_EMAILS = env_list("RESUMER_NOTIFY_EMAILS")
# Runs that stop within this many seconds of the first one share one message.
RESUMER_NOTIFY_WINDOW = env_number("RESUMER_NOTIFY_WINDOW", "30")
# Seconds to wait before each retry of a failed delivery (RQ Retry intervals); the number of
# values is the number of retries. Whole seconds >= 0 (runs.E008).
RESUMER_NOTIFY_BACKOFF = env_ints("RESUMER_NOTIFY_BACKOFF", "10,60,300,900")
RESUMER_WEBHOOK_TIMEOUT = env_number("RESUMER_WEBHOOK_TIMEOUT", "10")
# Django's email backend; SMTP settings as Django names them.
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = env_number("EMAIL_PORT", "25", int)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = 30
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "resumer@localhost")

if PRODUCTION:
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_number("SECURE_HSTS_SECONDS", "31536000", int)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_CONTENT_TYPE_NOSNIFF = True
    X_FRAME_OPTIONS = "DENY"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "runs.request_ids.RequestIdFilter"}},
    "formatters": {
        "plain": {"format": "%(levelname)s %(name)s [request %(request_id)s] %(message)s"}
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["request_id"],
            "formatter": "plain",
        }
    },
    "loggers": {
        "runs": {
            "handlers": ["console"],
            "level": os.environ.get("RESUMER_LOG_LEVEL", "INFO"),
        },
        # Every 500 (a page, the admin, the API), with its traceback, whatever DEBUG says:
        # Django's own handler for it prints only with DEBUG on.
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
    },
}
