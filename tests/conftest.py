"""Shared fixtures: real Redis, real `rqworker` processes, the demo's outside world (its facts
in the database, the demo service as a real gunicorn process) and its story run. Helpers live
in tests/support.

Tests that start workers use `transactional_db`: the worker processes read what the test
wrote, so it has to be committed. Their teardown flushes the tables, which the append-only
triggers refuse; the flush runs inside runs.maintenance.maintenance() for this connection only.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

import django_rq
import pytest
from django.conf import settings
from django.db import connection
from django.test import TransactionTestCase

from demo import faults
from demo_service.process import ServiceProcess
from runs.ledger.maintenance import maintenance
from runs.models import Run
from tests.support import processes, worlds
from tests.support.isolation import ProcessResources, resources_root
from tests.support.processes import Workers, wait_for
from tests.support.state import run_status, wait_lease_free

_original_teardown = TransactionTestCase._fixture_teardown


def _teardown_in_maintenance(self: TransactionTestCase) -> None:
    with maintenance(), flush_by_delete():
        _original_teardown(self)


@contextlib.contextmanager
def flush_by_delete() -> Iterator[None]:
    """Empty the tables with DELETE on PostgreSQL. Django's flush TRUNCATEs every table,
    which gives each new files on the server: about 0.4 s after every transactional test,
    for tables that hold a few rows. DELETE empties them in the flush's own transaction (the
    foreign keys are deferred to its commit, when every table is empty). A flush that resets
    sequences keeps Django's TRUNCATE … RESTART IDENTITY."""
    ops = connection.ops
    if connection.vendor != "postgresql":
        yield
        return
    truncate = ops.sql_flush

    def sql_flush(style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences:
            return truncate(style, tables, reset_sequences=True, allow_cascade=allow_cascade)
        return [f"DELETE FROM {ops.quote_name(table)};" for table in tables]

    ops.sql_flush = sql_flush
    try:
        yield
    finally:
        del ops.sql_flush


TransactionTestCase._fixture_teardown = _teardown_in_maintenance


# The markers (pyproject.toml) a test gets from what it uses, so that a selection by marker
# (`make test-fast`, the PostgreSQL pass) never misses one: a test that starts worker
# processes through these fixtures is `workers`; one with no way into the database is `nodb`.
WORKER_FIXTURES = {"workers", "private_workers", "story_run", "reference"}
DATABASE_FIXTURES = {
    "db",
    "transactional_db",
    "django_db_reset_sequences",
    "django_db_serialized_rollback",
    "live_server",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & WORKER_FIXTURES:
            item.add_marker(pytest.mark.workers)
        if not (used & DATABASE_FIXTURES or item.get_closest_marker("django_db")):
            item.add_marker(pytest.mark.nodb)


def pytest_runtest_setup(item: pytest.Item) -> None:
    postgres = item.get_closest_marker("postgres")
    if postgres and connection.vendor != "postgresql":
        why = postgres.kwargs.get("reason", "it is about PostgreSQL")
        pytest.skip(f"needs PostgreSQL: {why} (the PostgreSQL pass runs it)")
    # A test that starts worker processes by hand must say so, or `make test-fast` would run it.
    processes.starting_workers_allowed = item.get_closest_marker("workers") is not None


@pytest.fixture(scope="session", autouse=True)
def process_resources(django_db_blocker) -> Iterator[ProcessResources]:
    """This test process's own Redis and media folder (tests/support/isolation.py); at the
    end, the worlds' database copies (tests/support/worlds.py) go too."""
    resources = ProcessResources(resources_root()).start()
    yield resources
    processes.stop_fork_server()
    with django_db_blocker.unblock():
        worlds.drop_all()
    resources.stop()


@pytest.fixture
def redis_conn():
    """This test process's own Redis, emptied before the test."""
    conn = django_rq.get_connection(settings.RESUMER_QUEUE)
    conn.ping()
    conn.flushdb()
    yield conn
    conn.flushdb()


@pytest.fixture
def facts(db, demo_service) -> None:
    """The demo's outside world, ready for a content run: the search source's default topic,
    v1..v3 (a transactional test's flush removes what the data migration created), and the
    demo service, running and empty."""
    from demo.simulators import ensure_topic

    ensure_topic()


@pytest.fixture
def workers(transactional_db, redis_conn, facts, tmp_path) -> Iterator[Workers]:
    pool = Workers(tmp_path / "logs")
    yield pool
    pool.stop_all()


@pytest.fixture
def story_run(workers, demo_service) -> Run:
    """The protocol's story: research, facts, draft and two images done; the worker dies
    uploading the cover. Returns the run once the sweeper has marked it interrupted and a
    worker has stored the plan the stop asked for (what an operator then reads), with a
    healthy worker running. Built once per test process (tests/support/worlds.py); request
    it before the fixtures that make users."""
    pk = worlds.once("story", lambda: crash_the_story(workers), demo_service)
    workers.start()
    return Run.objects.get(pk=pk)


def crash_the_story(workers: Workers) -> int:
    from runs.models import StoredPlan

    run = faults.start_run(
        "content", {}, actor="test", faults={"crash": "visual/upload-cover/before"}
    )
    doomed = workers.start()
    doomed.wait(timeout=120)
    assert doomed.returncode == -signal.SIGKILL
    workers.start()  # a healthy worker whose sweeper notices the dead one's lease
    wait_for(lambda: run_status(run) == Run.Status.INTERRUPTED, what="interrupted")
    run.refresh_from_db()
    wait_for(
        lambda: StoredPlan.objects.filter(run=run, run_version=run.version).exists(),
        what="the stored plan",
    )
    wait_lease_free(run)
    workers.stop_all()
    return run.pk


@pytest.fixture(scope="session")
def demo_service_process(tmp_path_factory) -> Iterator[ServiceProcess]:
    """One real demo service (gunicorn, its own SQLite file) for the whole session. The demo
    pipeline's tools find it through settings.DEMO_SERVICE_URL, here and in every worker the
    tests start (tests/support/processes.worker_env passes it on)."""
    folder = tmp_path_factory.mktemp("demo-service")
    service = ServiceProcess(database=folder / "service.sqlite3", log=folder / "service.log")
    service.start()
    settings.DEMO_SERVICE_URL = service.url
    yield service
    service.stop()


@pytest.fixture
def demo_service(demo_service_process) -> ServiceProcess:
    """The demo service, running and empty: no objects, stored responses, meter rows or
    faults. A test may stop() it (the target is down); the next test gets it started again."""
    demo_service_process.start()
    demo_service_process.reset()
    settings.DEMO_SERVICE_URL = demo_service_process.url
    return demo_service_process
