"""Shared fixtures: real Redis, real `rqworker` processes, the demo's outside world (its facts
in the database, the demo service as a real gunicorn process) and its story run. Helpers live
in tests/support.

Tests that start workers use `transactional_db`: the worker processes read what the test
wrote, so it has to be committed. Their teardown flushes the tables, which the append-only
triggers refuse; the flush runs inside runs.maintenance.maintenance() for this connection only.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import django_rq
import pytest
from django.conf import settings
from django.test import TransactionTestCase

from demo import faults
from demo_service.process import ServiceProcess
from runs.ledger.maintenance import maintenance
from runs.models import Run
from tests.support.processes import Workers, wait_for
from tests.support.state import run_status

_original_teardown = TransactionTestCase._fixture_teardown


def _teardown_in_maintenance(self: TransactionTestCase) -> None:
    with maintenance():
        _original_teardown(self)


TransactionTestCase._fixture_teardown = _teardown_in_maintenance


@pytest.fixture
def redis_conn():
    """The real Redis the tests' queue uses, emptied before the test."""
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
def story_run(workers) -> Run:
    """The protocol's story: research, facts, draft and two images done; the worker dies
    uploading the cover. Returns the run once the sweeper has marked it interrupted and a
    worker has stored the plan the stop asked for (what an operator then reads)."""
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
    return run


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
