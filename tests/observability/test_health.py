"""GET /healthz, a load balancer's probe: 200 while the database and Redis answer, 503 naming
the one that does not (by its error's class, never its text), the workers RQ registered
counted; no sign-in, HEAD too, never cached."""

from __future__ import annotations

from django.test import Client


def test_a_process_whose_database_and_redis_answer_is_healthy(db, redis_conn):
    response = Client().get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "redis": "ok", "workers": 0}
    assert "no-cache" in response["Cache-Control"]
    assert Client().head("/healthz").status_code == 200


def test_a_redis_that_does_not_answer_is_a_503_naming_it(db, settings):
    queues = {name: dict(conf) for name, conf in settings.RQ_QUEUES.items()}
    queues[settings.RESUMER_QUEUE]["URL"] = "redis://127.0.0.1:1/0"  # nothing listens on 1
    settings.RQ_QUEUES = queues

    response = Client().get("/healthz")

    assert response.status_code == 503
    body = response.json()
    assert (body["status"], body["database"], body["workers"]) == ("unavailable", "ok", None)
    assert body["redis"] == "ConnectionError"


def test_only_get_and_head_are_served(db):
    assert Client().post("/healthz").status_code == 405
