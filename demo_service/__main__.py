"""python -m demo_service [--host H] [--port P] [--database URL]: migrate the service's own
database, then serve it with gunicorn (one process, threaded: a delayed answer must not hold
up the other requests)."""

from __future__ import annotations

import argparse
import os
from typing import Any


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m demo_service", description=__doc__)
    parser.add_argument("--host", default=os.environ.get("DEMO_SERVICE_HOST", "127.0.0.1"))
    parser.add_argument(
        "--port", type=int, default=int(os.environ.get("DEMO_SERVICE_PORT", "8001"))
    )
    parser.add_argument(
        "--database",
        default="",
        help="database URL (default: DEMO_SERVICE_DATABASE_URL, else var/demo-service.sqlite3)",
    )
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args(argv)
    if args.database:
        os.environ["DEMO_SERVICE_DATABASE_URL"] = args.database
    os.environ["DJANGO_SETTINGS_MODULE"] = "demo_service.settings"

    import django
    from django.core.management import call_command
    from django.db import connections

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    connections.close_all()  # gunicorn forks its worker after this

    from gunicorn.app.base import BaseApplication

    from demo_service.wsgi import application

    class Server(BaseApplication):
        def load_config(self) -> None:
            options: dict[str, Any] = {
                "bind": f"{args.host}:{args.port}",
                "workers": 1,
                "worker_class": "gthread",
                "threads": args.threads,
                # A DELAY fault sleeps inside a request; the worker heartbeats from another
                # thread, so only a hung worker is killed.
                "timeout": 120,
                "graceful_timeout": 5,
                "accesslog": "-",
                "proc_name": "demo_service",
                # Several services (tests, developers) run side by side on one machine;
                # gunicorn's control socket has one default path for all of them.
                "control_socket_disable": True,
            }
            for name, value in options.items():
                self.cfg.set(name, value)

        def load(self) -> Any:
            return application

    Server().run()


if __name__ == "__main__":
    main()
