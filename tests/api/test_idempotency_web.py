"""A web process killed in the middle of a POST with an Idempotency-Key (issue 47): its
claim, left unanswered, is taken over once older than RESUMER_IDEMPOTENCY_CLAIM_SECONDS, and
the same key then starts the run, exactly once. Real gunicorn processes on this test's
database; the run's first stage is queued on a Redis of the test's own."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from runs.access import roles
from runs.api import tokens
from runs.models import IdempotentRequest, Run
from tests.support.processes import ROOT, PrivateRedis, free_port, wait_for, worker_env

pytestmark = pytest.mark.django_db(transaction=True)

# A pipeline whose input is resolved, inside the POST's action, only once a file exists: the
# test holds the request there and kills its process.
HELD_PIPELINE = """
import os
import time
from pathlib import Path

from runs.pipeline import Input, Pipeline, Stage, StageOutput

HOLD = Path(os.environ["HELD_FOLDER"])


def current(inputs):
    (HOLD / "reached").touch()
    while not (HOLD / "release").exists():
        time.sleep(0.05)
    return "v1"


pipeline = Pipeline(
    name="held",
    tools=(),
    inputs=(Input("gate", current, versioned=False),),
    stages=(Stage("only", lambda ctx: StageOutput(outputs={"n": 1})),),
)
"""


class Web:
    """A gunicorn process (master and one worker, in a group of their own)."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "resumer.wsgi", "--workers", "1"]
                + ["--bind", f"127.0.0.1:{self.port}"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        wait_for(self.answers, what="gunicorn answering")

    def answers(self) -> bool:
        try:
            httpx.get(f"{self.url}/api/v1/me", timeout=1, trust_env=False)
        except httpx.TransportError:
            return False
        return True

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


@pytest.fixture
def held(tmp_path, settings) -> Iterator[dict[str, str]]:
    settings.MEDIA_ROOT = tmp_path / "media"
    module = f"held_{uuid.uuid4().hex[:8]}"
    site, hold = tmp_path / "site", tmp_path / "hold"
    site.mkdir()
    hold.mkdir()
    (site / f"{module}.py").write_text(textwrap.dedent(HELD_PIPELINE))
    redis = PrivateRedis(tmp_path / "redis").start()
    env = {
        **worker_env(redis.url()),
        "PYTHONPATH": str(site),
        "RESUMER_PIPELINES": f"{module}.pipeline",
        "RESUMER_IDEMPOTENCY_CLAIM_SECONDS": "2",
        "HELD_FOLDER": str(hold),
    }
    try:
        yield env
    finally:
        redis.stop()


def test_a_web_process_killed_mid_post_leaves_a_key_that_succeeds_once_afterwards(held, tmp_path):
    user, _ = roles.ensure_user("operator", "operator-test-pass", roles.OPERATOR)
    _, secret = tokens.issue(user, "killed web test")
    hold = Path(held["HELD_FOLDER"])

    def post(web: Web) -> httpx.Response:
        return httpx.post(
            f"{web.url}/api/v1/runs",
            json={"pipeline": "held", "inputs": {}},
            headers={"Authorization": f"Bearer {secret}", "Idempotency-Key": "deploy-88"},
            timeout=60,
            trust_env=False,
        )

    first = Web(held, tmp_path / "web-1.log")
    try:
        # The POST never answers: its process is killed while the action is held.
        sent = threading.Thread(target=_unanswered, args=(post, first), daemon=True)
        sent.start()
        wait_for(lambda: (hold / "reached").exists(), what="the POST inside its action")
    finally:
        first.kill()
    sent.join(timeout=30)
    claim = IdempotentRequest.objects.get(key="deploy-88")
    assert claim.status is None and Run.objects.count() == 0

    (hold / "release").touch()
    second = Web(held, tmp_path / "web-2.log")
    try:
        answered = wait_for(
            lambda: (r := post(second)).status_code != 409 and r,
            what="the key taken over",
        )
        again = post(second)
    finally:
        second.kill()

    assert answered.status_code == 201, answered.text
    assert again.status_code == 201 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == answered.json()["id"]
    assert Run.objects.count() == 1
    claim = IdempotentRequest.objects.get(key="deploy-88")
    assert (claim.status, claim.attempt) == (201, 2)


def _unanswered(post, web: Web) -> None:
    with contextlib.suppress(httpx.TransportError):
        post(web)
