"""What a load balancer or an orchestrator asks a web process: can it serve? It can when its
database answers a query and its Redis answers a ping (a run's stage is queued there: without
it a run started is interrupted a grace later). The workers RQ has registered are counted
and said, not judged: the web serves without them, and an alert on zero workers is the
operator's (docs/monitoring.md)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection
from rq.worker import Worker

from runs import enqueue


@dataclass(frozen=True)
class Health:
    database: str  # "ok", or the class of the error that reaching it raised
    redis: str
    workers: int | None  # registered on the queue; None where Redis did not answer

    @property
    def ok(self) -> bool:
        return self.database == "ok" and self.redis == "ok"

    def to_dict(self) -> dict[str, object]:
        said = "ok" if self.ok else "unavailable"
        return {
            "status": said,
            "database": self.database,
            "redis": self.redis,
            "workers": self.workers,
        }


def check() -> Health:
    """One query and two Redis commands; an error is said by its class, never its text (the
    answer is public, and an error's text can carry a host or a user)."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        database = "ok"
    except Exception as exc:  # whatever the driver raises, the answer is that it did not answer
        database = type(exc).__name__
    try:
        queue = enqueue.queue()
        queue.connection.ping()
        workers, redis = Worker.count(queue=queue), "ok"
    except Exception as exc:
        workers, redis = None, type(exc).__name__
    return Health(database, redis, workers)
