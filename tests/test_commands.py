"""The start_run and verify_chain commands: bad input is a CommandError and changes nothing."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import override_settings

from demo.models import RunFaults
from runs.events import RunCreated
from runs.ledger import leases
from runs.ledger.append import Writer, append, create_run
from runs.ledger.maintenance import maintenance
from runs.models import Event, Run
from tests.support.events import called


def command(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("start_run", ("no-such-pipeline",)),
        ("start_run", ("content", "--input", "facts=v99")),
        ("start_run", ("content", "--input", "facts")),
        ("start_run", ("content", "--input", "=v3")),
        ("start_run", ("content", "--input", "colour=blue")),
        ("start_run_with_faults", ("no-such-pipeline", "--delay", "1")),
        ("start_run_with_faults", ("content", "--crash-at", "dream/search/before")),
        ("start_run_with_faults", ("content", "--crash-at", "visual/no-such-call/before")),
        ("start_run_with_faults", ("content", "--timeout-at", "visual/render-cover/sometime")),
        ("start_run_with_faults", ("content", "--delay", "600")),
    ],
)
def test_start_run_commands_refuse_bad_input_and_create_no_run(facts, name, args):
    with pytest.raises(CommandError):
        command(name, *args, "--no-enqueue")
    assert not Run.objects.exists()
    assert not RunFaults.objects.exists()


def test_start_run_with_faults_records_the_runs_fault_points(facts):
    out = command(
        "start_run_with_faults",
        "content",
        "--crash-at",
        "visual/upload-cover/before",
        "--delay",
        "0.5",
        "--no-enqueue",
    )
    run = Run.objects.get()
    assert out.startswith(f"{run.public_id} pending")
    faults = RunFaults.objects.get(run=run)
    assert (faults.crash, faults.timeout, faults.delay) == ("visual/upload-cover/before", "", 0.5)


def test_start_run_command_creates_a_run_with_pinned_inputs(facts):
    out = command("start_run", "content", "--input", "facts=v2", "--no-enqueue")
    run = Run.objects.get()
    assert out.startswith(f"{run.public_id} pending")
    assert run.inputs["facts"] == "v2"
    assert Event.objects.get(run=run).type == Event.Type.RUN_CREATED


@pytest.mark.parametrize("run_id", ["run-999999", "999", "run-abc", "run-"])
def test_verify_chain_command_refuses_an_unknown_or_malformed_run_id(db, run_id):
    with pytest.raises(CommandError, match="unknown run"):
        command("verify_chain", run_id)


def make_run() -> Run:
    run = create_run(
        "content",
        RunCreated(input_versions={"topic": "resumable-agents", "facts": "v3"}),
        actor="test",
        first_stage="research",
    )
    writer = Writer(run.pk, leases.acquire(run.pk, "w"), "w")
    for n in range(3):
        append(writer, called(n, "research"))
    return run


def test_verify_chain_command_reports_an_intact_run(db):
    run = make_run()
    assert command("verify_chain", run.public_id).strip() == f"{run.public_id}: ok (4 events)"


def test_verify_chain_command_fails_on_an_altered_run_and_names_the_seq(db):
    intact, altered = make_run(), make_run()
    with maintenance(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_event SET actor = 'mallory' WHERE run_id = %s AND seq = 3", [altered.pk]
        )
    out = StringIO()
    with pytest.raises(CommandError, match="1 run"):
        call_command("verify_chain", stdout=out)
    lines = out.getvalue().splitlines()
    assert f"{intact.public_id}: ok (4 events)" in lines
    assert any(line.startswith(f"{altered.public_id}: BROKEN at seq 3") for line in lines)


def test_verify_chain_command_says_first_that_anchors_are_not_checked_without_a_key(db):
    run = make_run()
    with override_settings(RESUMER_CHAIN_KEY=""):
        lines = command("verify_chain", run.public_id).splitlines()
    assert lines == [
        "anchors not checked: RESUMER_CHAIN_KEY is not set",
        f"{run.public_id}: ok (4 events)",
    ]
