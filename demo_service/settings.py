"""Settings of the demo service: a separate Django project with its own database.

It shares nothing with Resumer's settings on purpose: the service is the outside world, and
Resumer must not be able to read its tables except through its HTTP API.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("RESUMER_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = False
# The service holds no sessions or signed data; the key only satisfies Django.
SECRET_KEY = os.environ.get(
    "DEMO_SERVICE_SECRET_KEY", "demo-service-has-no-secrets-0123456789abcdef"
)
ALLOWED_HOSTS = [
    h.strip()
    for h in os.environ.get("DEMO_SERVICE_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]").split(",")
    if h.strip()
]

INSTALLED_APPS = ["demo_service"]
MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
ROOT_URLCONF = "demo_service.urls"
WSGI_APPLICATION = "demo_service.wsgi.application"
APPEND_SLASH = False

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get(
            "DEMO_SERVICE_DATABASE_URL", f"sqlite:///{VAR_DIR / 'demo-service.sqlite3'}"
        ),
        conn_max_age=0,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several gunicorn threads write at once: WAL lets reads run beside the writer, and
    # IMMEDIATE transactions make two requests with one idempotency key queue on the write
    # lock, so the second one sees the first one's stored response.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=30000;",
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"demo_service": {"handlers": ["console"], "level": "INFO"}},
}
