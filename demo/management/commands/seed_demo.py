"""Demo data for `make run`: one user per role, and runs in every state an operator meets.

    manage.py seed_demo

Users (created once; an existing user keeps its password):
    viewer / viewer-demo-pass, operator / operator-demo-pass, supervisor / supervisor-demo-pass

Runs (only when the ledger has none yet):
    succeeded      a clean run, research → publish
    pending        queued with a delay per call, to watch live once the worker starts
    failed         the cover render timed out: outcome unknown, the plan retries with the same key
    interrupted    the protocol's story: the worker dies (SIGKILL) uploading the cover
    interrupted    inside research's agent loop, once the model asked for the search tool:
                   the plan reuses the recorded turn and calls only the one missing
    failed+blocked the promotion charge (NEVER) timed out: a supervisor must resolve it first
    failed+drift   publish timed out (the article is live); facts v4 appeared since the run
                   pinned v3, so the plan offers strict resume or an upgrade branch

No worker is needed: stages run in this process, as a worker would run them, and the crash
runs in a forked child that really is killed. Only the pending run is put on the queue. The
demo service (settings.DEMO_SERVICE_URL) must answer: the runs render, upload, publish and
charge there, over HTTP (`make run` starts it first).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
from collections.abc import Iterator
from unittest import mock

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from demo import faults, simulators
from demo_service.process import ServiceClient
from runs import enqueue
from runs.access import roles
from runs.execution import engine, sweeper
from runs.gates import answers
from runs.models import Gate, GateRole, Run

SEED_ACTOR = "seed_demo"
DRIFT_TOPIC = "other-topic"

USERS = (
    ("viewer", "viewer-demo-pass", roles.VIEWER),
    ("operator", "operator-demo-pass", roles.OPERATOR),
    ("supervisor", "supervisor-demo-pass", roles.SUPERVISOR),
)


@contextlib.contextmanager
def _no_queue() -> Iterator[None]:
    """Stages executed here must not also put their next stage on the RQ queue: this process
    runs the next stage itself. (A queued duplicate would be harmless, the ticket is consumed
    once, but it would be noise in the worker's log, or a warning without Redis.)"""
    with mock.patch.object(enqueue, "dispatch", lambda *args, **kwargs: True):
        yield


def run_inline(run_pk: int, *, holder: str | None = None) -> Run:
    """Execute a run's stages one after another in this process, until it stops: succeeded,
    failed, needs approval, or (in a child that a fault kills) never returns."""
    with _no_queue():
        while True:
            run = Run.objects.get(pk=run_pk)
            if not run.is_active or not run.ticket:
                return run
            engine.execute(
                run.pk, run.current_stage, run.ticket, holder=holder, hooks=faults.FaultHooks()
            )


def _child(run_pk: int) -> None:
    # A connection of its own (the parent closed its connections before forking).
    try:
        run_inline(run_pk, holder=engine.worker_identity())
    finally:
        connections.close_all()


def run_until_killed(run_pk: int, *, timeout: float = 120) -> int | None:
    """Run the stages in a forked child, the way a worker process would, and return its exit
    code: -SIGKILL when the run's crash fault fired."""
    connections.close_all()  # never share a database connection across a fork
    child = multiprocessing.get_context("fork").Process(
        target=_child, args=(run_pk,), name=f"seed-demo-run-{run_pk}"
    )
    child.start()
    child.join(timeout)
    if child.is_alive():
        child.kill()
        child.join()
    return child.exitcode


def interrupt_killed(run: Run, exitcode: int | None, what: str) -> Run:
    """We saw the worker die (we reaped it), so its lease can be taken over at once instead of
    waiting for it to run out, exactly as the sweeper would after the TTL."""
    sweeper.interrupt(
        sweeper.Finding(
            run.pk,
            f"the worker process was killed {what}",
            {"exitcode": exitcode, "seen_by": SEED_ACTOR},
        ),
        takeover=True,
    )
    run.refresh_from_db()
    return run


class Command(BaseCommand):
    help = "Create the demo users (one per role) and demo runs in every state."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--allow-production",
            action="store_true",
            help="seed even with RESUMER_ENV=production (the demo passwords are public)",
        )

    def handle(self, *args, **options) -> None:
        if getattr(settings, "PRODUCTION", False) and not options["allow_production"]:
            raise CommandError(
                "refusing to create users with published passwords in production "
                "(pass --allow-production if this really is a demo)"
            )
        self._users()
        existing = Run.objects.count()
        if existing:
            self.stdout.write(f"Runs: demo data already present ({existing} runs); none added.")
            return
        if not ServiceClient(settings.DEMO_SERVICE_URL).answers():
            raise CommandError(
                f"the demo service does not answer at {settings.DEMO_SERVICE_URL} (DEMO_SERVICE_URL):"
                " start it with `python -m demo_service` (make run does), then seed again"
            )
        self._runs()

    def _users(self) -> None:
        for username, password, role in USERS:
            _, created = roles.ensure_user(username, password, role)
            state = "created" if created else "already present"
            self.stdout.write(f"User {username} / {password} ({role}): {state}")

    def _say(self, run: Run, what: str) -> None:
        run.refresh_from_db()
        self.stdout.write(f"  {run.public_id:<8} {run.get_status_display():<16} {what}")

    def _runs(self) -> None:
        simulators.ensure_topic()
        simulators.ensure_topic(DRIFT_TOPIC)
        self.stdout.write("Runs:")

        clean = engine.start_run("content", {}, actor=SEED_ACTOR, enqueue=False)
        self._say(run_inline(clean.pk), "a clean run, research → publish")

        failed = faults.start_run(
            "content",
            {},
            actor=SEED_ACTOR,
            faults={"timeout": "visual/render-cover/after"},
            enqueue=False,
        )
        self._say(
            run_inline(failed.pk),
            "the cover render timed out: the plan retries it with the same delivery key",
        )

        story = faults.start_run(
            "content",
            {},
            actor=SEED_ACTOR,
            faults={"crash": "visual/upload-cover/before"},
            enqueue=False,
        )
        exitcode = run_until_killed(story.pk)
        if exitcode == -signal.SIGKILL:
            story = interrupt_killed(story, exitcode, "(SIGKILL) while uploading the cover")
        self._say(story, "the story: the worker died uploading the cover; read its plan")

        loop = faults.start_run(
            "content",
            {},
            actor=SEED_ACTOR,
            faults={"crash": "research/search-1/before"},
            enqueue=False,
        )
        exitcode = run_until_killed(loop.pk)
        if exitcode == -signal.SIGKILL:
            loop = interrupt_killed(loop, exitcode, "(SIGKILL) inside research's agent loop")
        self._say(
            loop,
            "killed inside research's loop: its plan reuses the model's recorded turn and "
            "calls the one turn missing",
        )

        charge = faults.start_run(
            "content",
            {},
            actor=SEED_ACTOR,
            faults={"timeout": "publish/promote-charge/after"},
            enqueue=False,
        )
        self._say(
            run_inline(charge.pk),
            "the promotion charge (NEVER) timed out: blocked until a supervisor edits the ledger",
        )

        drift = faults.start_run(
            "content",
            {"topic": DRIFT_TOPIC},
            actor=SEED_ACTOR,
            faults={"timeout": "publish/publish/after"},
            enqueue=False,
        )
        run_inline(drift.pk)
        # New facts appear at the source after the run pinned v3: its inputs have drifted.
        # A separate topic, so that runs of the default topic keep facts v3 as current.
        simulators.publish_facts(DRIFT_TOPIC)
        self._say(
            drift,
            f"publish timed out (the article is live); {DRIFT_TOPIC} facts v4 appeared since",
        )

        review = engine.start_run("content", {"review": "on"}, actor=SEED_ACTOR, enqueue=False)
        self._say(
            run_inline(review.pk),
            "waits for an operator's review before publish (edit the title, then approve)",
        )

        confirm = engine.start_run("content", {"review": "on"}, actor=SEED_ACTOR, enqueue=False)
        run_inline(confirm.pk)
        reviewed = Gate.objects.get(run=confirm, gate_id="review")
        with _no_queue():  # run_inline runs the stage the answer queues
            answers.answer(
                reviewed.pk, dict(reviewed.initial), actor="operator", roles={GateRole.OPERATOR}
            )
        self._say(
            run_inline(confirm.pk),
            "reviewed and published; its $5.00 promotion charge waits for a supervisor",
        )

        pending = faults.start_run(
            "content", {}, actor=SEED_ACTOR, faults={"delay": 2}, enqueue=False
        )
        queued = enqueue.dispatch(pending.pk, pending.current_stage, pending.ticket)
        self._say(
            pending,
            "queued, 2 s per call: watch its timeline once the worker runs"
            if queued
            else "could not be queued (Redis did not answer): the worker's sweeper will "
            "report the lost job and interrupt it",
        )
        self.stdout.write(f"Seeded {Run.objects.count()} runs.")
