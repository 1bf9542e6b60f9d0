"""Fixtures of the fault matrix: a private Redis a test may restart or flush, workers on it,
and the reference artifacts. Workers on the shared test Redis are tests/conftest.py's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults import matrix
from tests.support import worlds
from tests.support.processes import PrivateRedis, Workers


@pytest.fixture
def reference(workers: Workers, demo_service) -> dict[str, str]:
    """A database in which the pipeline has finished a run without a crash, and that run's
    artifacts; built once per test process (tests/support/worlds.py)."""
    return worlds.once("reference", lambda: matrix.reference_artifacts(workers), demo_service)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path / "redis").start()
    yield server
    server.stop()


@pytest.fixture
def private_workers(
    transactional_db, facts, private_redis: PrivateRedis, settings, tmp_path: Path
) -> Iterator[Workers]:
    """Workers and this test process both on a Redis of the test's own: django_rq reads
    RQ_QUEUES at call time, so enqueue.queue() follows the override."""
    settings.REDIS_URL = private_redis.url()
    settings.RQ_QUEUES = {
        name: {**config, "URL": private_redis.url()} for name, config in settings.RQ_QUEUES.items()
    }
    pool = Workers(tmp_path / "private-logs", redis_url=private_redis.url())
    yield pool
    pool.stop_all()
