"""What each test process owns alone, so that test processes run side by side (pytest-xdist's
`-n`) and no test flushes or tampers with what another process sees: a redis-server of its
own on a free port, and a media folder of its own. The database is already per process:
pytest-django names each xdist worker's test database after it (`…_gw0`, `…_gw1`).

Worker processes a test starts inherit both through tests/support/processes.worker_env(),
which reads the settings this module changes.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from django.conf import settings
from django.test.utils import override_settings

from tests.support.processes import PrivateRedis


def process_name() -> str:
    """This test process's name: xdist's worker id (gw0, gw1, …), or `main` without xdist."""
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


class ProcessResources:
    """The Redis and media folder of one test process, under `root` (emptied first: what a
    crashed earlier session left there belongs to nobody now)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)
        self.redis = PrivateRedis(self.root / "redis")
        self.media = self.root / "media"

    def start(self) -> ProcessResources:
        self.redis.start()
        self.media.mkdir()
        url = self.redis.url()
        # django_rq reads RQ_QUEUES at call time, and runs/enqueue.py keys its connections by
        # URL, so every queue of this process follows; the storage forgets its old folder on
        # the setting_changed signal that override_settings sends.
        self.overrides = override_settings(
            REDIS_URL=url,
            RQ_QUEUES={name: {**config, "URL": url} for name, config in settings.RQ_QUEUES.items()},
            MEDIA_ROOT=self.media,
        )
        self.overrides.enable()
        return self

    def stop(self) -> None:
        self.overrides.disable()
        self.redis.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def resources_root() -> Path:
    """Inside the var folder (RESUMER_VAR_DIR), so two checkouts, or CI's two passes side by
    side with a var folder each, never share one."""
    return Path(settings.VAR_DIR) / "test-processes" / process_name()
