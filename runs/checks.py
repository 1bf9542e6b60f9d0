"""System checks run at start-up (every manage.py command that checks, workers included):
each RESUMER_PIPELINES entry imports, is a Pipeline and has a name of its own, and
RESUMER_CALL_HOOKS names a CallHooks class; in production, SECRET_KEY and the chain key are
set; the notification settings make sense. A mistake stops the process with its id instead of
surfacing later, as an UnknownPipeline on the first job or a failed delivery.

Resumer's own commands (start_run, plan, resume, verify_chain, chain_digest) run
COMMAND_CHECKS before they act, not every check: see there."""

from __future__ import annotations

import io
import math
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.utils.module_loading import import_string

from runs.execution.hooks import CallHooks
from runs.pipeline import Pipeline

# The checks a Resumer command runs before it acts (its `requires_system_checks`): the models,
# Resumer's own ("resumer": the pipelines it loads, the call hooks, notifications, SQLite's
# durability) and the security ones (SECRET_KEY and the chain key in production). Not the web
# server's: checking the URLs imports the whole web stack with the API's library (half a
# second), and the admin's and templates' checks load every template library, for a command
# that uses none of them; a script starting runs one at a time paid that at each
# (bench/cli_start.py). `manage.py check` (and runserver) and every worker, as `rqworker`
# starts, check everything.
COMMAND_CHECKS = (Tags.models, "resumer", Tags.security)


def refuse_to_serve_unchecked() -> None:
    """What a process that serves without a management command (the WSGI application under
    gunicorn) runs first: COMMAND_CHECKS, as Resumer's commands do, so production without
    SECRET_KEY or the chain key, or with a number that makes no sense, refuses to start
    instead of answering 500 or writing heads nobody can verify. Raises SystemCheckError
    (with every error, as `manage.py check` prints them); warnings go to stderr, and "no
    issues" nowhere (each gunicorn worker would print it at every start)."""
    call_command("check", tags=list(COMMAND_CHECKS), fail_level="ERROR", stdout=io.StringIO())


def _load(path: str) -> tuple[Any, str]:
    """The object at `path`, or why it cannot be had (a module may fail with anything)."""
    try:
        return import_string(path), ""
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


def check_pipelines(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    paths = list(settings.RESUMER_PIPELINES)
    if not paths:
        messages.append(
            Warning(
                "RESUMER_PIPELINES is empty: no run can be started.",
                hint="Set RESUMER_PIPELINES to comma-separated dotted paths of Pipeline objects.",
                id="runs.W001",
            )
        )
    named: dict[str, str] = {}
    for path in paths:
        pipeline, problem = _load(path)
        if problem:
            messages.append(
                Error(
                    f"RESUMER_PIPELINES entry {path!r} does not import ({problem}).",
                    hint="Give module.attribute of a Pipeline, with its module on PYTHONPATH.",
                    obj=path,
                    id="runs.E001",
                )
            )
            continue
        if not isinstance(pipeline, Pipeline):
            messages.append(
                Error(
                    f"RESUMER_PIPELINES entry {path!r} is a {type(pipeline).__name__}, "
                    "not a runs.pipeline.Pipeline.",
                    obj=path,
                    id="runs.E002",
                )
            )
            continue
        if pipeline.name in named:
            messages.append(
                Error(
                    f"RESUMER_PIPELINES entries {named[pipeline.name]!r} and {path!r} are both "
                    f"named {pipeline.name!r}; runs find their pipeline by name.",
                    hint="Give each pipeline a name of its own, or list it once.",
                    obj=path,
                    id="runs.E003",
                )
            )
            continue
        named[pipeline.name] = path
    return messages


def check_call_hooks(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    path = settings.RESUMER_CALL_HOOKS
    if not path:
        return []
    hooks, problem = _load(path)
    if problem or not (isinstance(hooks, type) and issubclass(hooks, CallHooks)):
        why = problem or f"it is {hooks!r}"
        return [
            Error(
                f"RESUMER_CALL_HOOKS {path!r} is not a runs.execution.hooks.CallHooks subclass ({why}).",
                hint="Give module.Class of a CallHooks subclass, or leave it empty.",
                obj=path,
                id="runs.E004",
            )
        ]
    return []


def chain_key_check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """In production the run heads must be anchored: without the key, anyone who can write to
    the database can rewrite a run's history end to end and verify_chain still passes. So
    production refuses to start without it, unless RESUMER_ALLOW_UNANCHORED says that this
    deployment chose to go without (then it only warns)."""
    if not settings.PRODUCTION or settings.RESUMER_CHAIN_KEY:
        return []
    said = (
        "RESUMER_CHAIN_KEY is not set: run heads are not anchored, so a history rewritten "
        "in the database (every hash recomputed) passes verify_chain."
    )
    hint = (
        "Set RESUMER_CHAIN_KEY to a long random secret kept outside the database, the same on "
        "every web and worker process"
    )
    if settings.RESUMER_ALLOW_UNANCHORED:
        return [Warning(said, hint=hint + ".", id="runs.W002")]
    return [
        Error(
            said,
            hint=hint + " (or RESUMER_ALLOW_UNANCHORED=1 to run without it, knowingly).",
            id="runs.E009",
        )
    ]


def check_secret_key(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Production has no development key to fall back on: without SECRET_KEY, nothing that
    signs (sessions, CSRF, password resets) works, so say so before the first request."""
    if not settings.PRODUCTION:
        return []
    try:
        key = settings.SECRET_KEY
    except ImproperlyConfigured:  # Django's answer to reading an empty key
        key = ""
    if key:
        return []
    return [
        Error(
            "SECRET_KEY is not set, and RESUMER_ENV=production uses no development key.",
            hint="Set SECRET_KEY to a long random string, the same on every web process.",
            id="runs.E005",
        )
    ]


def check_notifications(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """A webhook is signed and spoken to over HTTP(S); retries wait whole seconds >= 0."""
    messages: list[CheckMessage] = []
    url = settings.RESUMER_WEBHOOK_URL
    if url and not settings.RESUMER_WEBHOOK_SECRET:
        # Receivers tell Resumer's messages from anyone else's by the signature: no unsigned mode.
        messages.append(
            Error(
                "RESUMER_WEBHOOK_URL is set but RESUMER_WEBHOOK_SECRET is not: webhook "
                "messages are always signed.",
                hint="Set RESUMER_WEBHOOK_SECRET to the key the receiver checks signatures with.",
                id="runs.E006",
            )
        )
    if url and not url.startswith(("https://", "http://")):
        messages.append(
            Error(
                f"RESUMER_WEBHOOK_URL {url!r} is not an http:// or https:// URL.",
                id="runs.E007",
            )
        )
    wrong = [
        v
        for v in settings.RESUMER_NOTIFY_BACKOFF
        if not isinstance(v, int) or isinstance(v, bool) or v < 0
    ]
    if wrong:
        messages.append(
            Error(
                "RESUMER_NOTIFY_BACKOFF takes whole seconds >= 0; "
                f"not {', '.join(repr(v) for v in wrong)}.",
                hint="Give comma-separated seconds, one per retry, e.g. 10,60,300.",
                id="runs.E008",
            )
        )
    return messages


# The numbers the settings read from the environment, and the least each may be: a lease that
# lives 0 s is lost before it is used, a sweeper every 0 s spins. (name, least, above it).
NUMBERS = (
    ("RESUMER_LEASE_TTL", 0, True),
    ("RESUMER_SWEEP_INTERVAL", 0, True),
    ("RESUMER_JOB_TIMEOUT", 0, True),
    ("RESUMER_QUEUE_GRACE", 0, False),
    ("RESUMER_IDEMPOTENCY_CLAIM_SECONDS", 0, True),
    ("RESUMER_IDEMPOTENCY_RETENTION_HOURS", 0, True),
    ("RESUMER_GROUP_INLINE", 0, False),
    ("RESUMER_NOTIFY_WINDOW", 0, False),
    ("RESUMER_WEBHOOK_TIMEOUT", 0, True),
    ("RESUMER_TRUSTED_PROXIES", 0, False),
    ("AXES_FAILURE_LIMIT", 1, False),
)


def check_numbers(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Each number the environment gives reads as one, finite and within its bounds."""
    messages: list[CheckMessage] = []
    unreadable = getattr(settings, "RESUMER_UNREADABLE", {})
    for name, (raw, default, kind) in sorted(unreadable.items()):
        what = "a whole number" if kind == "int" else "a number"
        messages.append(
            Error(
                f"{name} is {raw!r}, which is not {what}.",
                hint=f"Give {what}, or unset it for its default ({default}).",
                id="runs.E011",
            )
        )
    for name, least, above in NUMBERS:
        value = getattr(settings, name)
        if name in unreadable:
            continue
        if not math.isfinite(value) or value < least or (above and value == least):
            bound = f"greater than {least}" if above else f"{least} or more"
            messages.append(
                Error(f"{name} is {value!r}; it must be {bound}.", hint=_HINT, id="runs.E011")
            )
    return messages


_HINT = "docs/deploy.md's table of timings and limits says what each is and its default."


def check_sqlite_synchronous(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """RESUMER_SQLITE_SYNCHRONOUS names one of the levels the settings know."""
    value = settings.RESUMER_SQLITE_SYNCHRONOUS
    if value in settings.SQLITE_SYNCHRONOUS_LEVELS:
        return []
    return [
        Error(
            f"RESUMER_SQLITE_SYNCHRONOUS is {value!r}; it takes "
            f"{' or '.join(settings.SQLITE_SYNCHRONOUS_LEVELS)}.",
            hint="NORMAL survives a crashed process; FULL also a power loss (docs/deploy.md).",
            id="runs.E010",
        )
    ]
