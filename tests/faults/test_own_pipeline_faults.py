"""Fault injection for a pipeline of a user's own (RESUMER_FAULTS=1), not the demo's: a
worker configured with that pipeline alone dies at the crash point, and the run is
interrupted with the call it died in; without the fault hooks the command refuses to record
faults no worker would act on."""

from __future__ import annotations

import json
import signal
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from demo.models import RunFaults
from runs.events import read
from runs.models import Event, Run
from tests.support import typed_pipeline
from tests.support.pipelines import registered
from tests.support.processes import wait_for
from tests.support.state import run_status

# A worker as a deployment of the mailer alone runs it: no demo pipeline, fault injection on.
OWN = {"RESUMER_PIPELINES": typed_pipeline.PATH, "RESUMER_FAULTS": "1"}


def start_with_faults(*args: str) -> Run:
    out = StringIO()
    email = f"email={json.dumps(typed_pipeline.EMAIL)}"
    call_command("start_run_with_faults", "mailer", "--input", email, *args, stdout=out)
    return Run.objects.get()


@pytest.mark.faults
def test_a_crash_point_kills_a_worker_of_a_pipeline_without_the_demo(workers, settings):
    with registered(settings, typed_pipeline.PATH):
        run = start_with_faults("--crash-at", "reply/note/before")

        doomed = workers.start(env=OWN)
        doomed.wait(timeout=120)
        assert doomed.returncode == -signal.SIGKILL
        workers.start(env=OWN)  # its sweeper finds the dead worker's lease
        wait_for(lambda: run_status(run) == Run.Status.INTERRUPTED, what="interrupted")

    stop = read(Event.objects.get(run=run, type=Event.Type.INTERRUPTED))
    assert (stop.stage, stop.call, stop.tool) == ("reply", "note", "note")


def test_without_the_fault_hooks_no_faults_are_recorded(db, settings):
    settings.RESUMER_CALL_HOOKS = ""
    with (
        registered(settings, typed_pipeline.PATH),
        pytest.raises(CommandError, match="set RESUMER_FAULTS=1"),
    ):
        start_with_faults("--crash-at", "reply/note/before")

    assert not Run.objects.exists() and not RunFaults.objects.exists()
