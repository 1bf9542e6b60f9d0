"""WSGI entry point: the application, once Resumer's start-up checks passed (the checks every
management command and worker runs; runs/checks.py). gunicorn imports this in each worker,
so a deployment that would be refused by `manage.py check` does not serve either."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resumer.settings")
application = get_wsgi_application()

from runs.checks import refuse_to_serve_unchecked  # noqa: E402  (the apps are loaded now)

refuse_to_serve_unchecked()
