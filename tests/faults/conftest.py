"""Fixtures of the fault matrix: a Harness of real worker processes on the test database and
the test Redis, a private Redis a test may restart or flush, and the reference artifacts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults import matrix


@pytest.fixture
def harness(transactional_db, redis_conn, facts, tmp_path: Path) -> Iterator[matrix.Harness]:
    """Workers on the shared test Redis (flushed by redis_conn) and this test's database."""
    pool = matrix.Harness(tmp_path / "logs")
    yield pool
    pool.stop_all()


@pytest.fixture
def reference(harness: matrix.Harness) -> dict[str, str]:
    return matrix.reference_artifacts(harness)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[matrix.PrivateRedis]:
    server = matrix.PrivateRedis(tmp_path / "redis").start()
    yield server
    server.stop()


@pytest.fixture
def private_harness(
    transactional_db, facts, private_redis: matrix.PrivateRedis, settings, tmp_path: Path
) -> Iterator[matrix.Harness]:
    """Workers and this test process both on a Redis of the test's own: django_rq reads
    RQ_QUEUES at call time, so jobs.queue() follows the override."""
    settings.REDIS_URL = private_redis.url()
    settings.RQ_QUEUES = {
        name: {**config, "URL": private_redis.url()} for name, config in settings.RQ_QUEUES.items()
    }
    pool = matrix.Harness(tmp_path / "logs", redis_url=private_redis.url())
    yield pool
    pool.stop_all()
