"""`manage.py plan RUN [--json]` and `manage.py resume RUN --strict|--upgrade --fingerprint F`.

A refusal is a CommandError (exit status 1 on the command line) and changes nothing.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command

from demo.simulators import publish_facts
from runs.models import Event, Run
from runs.planning.acts import plan_acts
from runs.planning.planner import compute_plan
from tests.support.plans import (
    TOPIC,
    checkpoint,
    ledger_state,
    run_in_process,
    run_one_stage_in_process,
    tampered,
)
from tests.support.processes import ROOT, worker_env


@pytest.fixture
def in_process(transactional_db, facts, redis_conn) -> None:
    """Committed rows for the engine's own threads, the demo facts, an empty queue."""


def manage(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def printed_fingerprint(text: str) -> str:
    return re.search(r"^  fingerprint: ([0-9a-f]{64})$", text, re.M).group(1)


# --- plan ------------------------------------------------------------------------------------


def test_plan_prints_a_readable_plan(in_process):
    run = run_in_process({"timeout": "visual/upload-cover/after"})

    text = manage("plan", run.public_id)

    assert text.startswith(f"Plan for {run.public_id} (content, failed)")
    assert f"checkpoint: {checkpoint(run, 'draft').id}" in text
    assert "skip: research, draft" in text
    assert "re-execute: visual, prefill, publish" in text
    assert "visual/render-body-1 [IDEMPOTENT] confirmed → reuse" in text
    assert "visual/upload-cover [IDEMPOTENT] unknown → retry-same-key" in text
    assert (
        "cost of this resume: 3 calls, $5.0010  (a fresh retry: 12 calls, 798 tokens, $5.1369)"
        in text
    )
    assert printed_fingerprint(text) == compute_plan(run).fingerprint


def test_plan_says_why_the_run_stopped_as_the_run_page_does(in_process):
    run = run_in_process({"timeout": "visual/upload-cover/after"})

    text = manage("plan", run.public_id)

    assert text.splitlines()[1] == (
        "  why it stopped: upload-cover timed out; the resume retries it with the same key"
    )


def test_plan_names_what_each_option_does_outside_as_the_pages_do(in_process):
    run = run_in_process({"timeout": "visual/upload-cover/after"})
    publish_facts(TOPIC)

    text = manage("plan", run.public_id)

    words = plan_acts(compute_plan(run))
    assert "  a strict resume publishes an article, charges $5.00; keeps facts v3" in text
    assert f"  a strict resume {words.strict.does}\n" in text
    assert f"    it {words.upgrade.confirm}\n" in text
    assert words.upgrade.confirm.startswith("takes facts v3 → v4 and publishes an article")


def test_plan_prints_blockers_and_drift(in_process):
    run = run_in_process({"timeout": "publish/promote-charge/after"})
    publish_facts(TOPIC)

    text = manage("plan", run.public_id)

    assert "BLOCKED:" in text
    assert "charge_card (promote-charge) is NEVER" in text
    assert "facts: pinned v3, now v4" in text


def test_plan_of_a_running_run_says_it_is_not_resumable(in_process):
    run = run_one_stage_in_process()

    text = manage("plan", run.public_id)

    assert f"not resumable: {run.public_id} is running: it is still active" in text


def test_plan_json_is_the_plan_value(in_process):
    run = run_in_process({"timeout": "publish/publish/after"})

    data = json.loads(manage("plan", run.public_id, "--json"))

    plan = compute_plan(run)
    assert data.pop("acts") == plan_acts(plan).to_dict()
    assert data == plan.to_dict()


def test_plan_of_an_unknown_run_is_a_command_error(db):
    with pytest.raises(CommandError, match="unknown run 'run-424242'"):
        manage("plan", "run-424242")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        pytest.param(["plan"], "name a run (e.g. run-9269), or pass --groups", id="plan"),
        pytest.param(["resume", "--strict"], "name a run, or pass --group", id="resume"),
        pytest.param(
            ["resume", "--runs", "run-2", "--strict"], "--runs selects runs of a --group", id="runs"
        ),
    ],
)
def test_a_command_given_no_run_says_what_to_give_not_both(db, args, said):
    with pytest.raises(CommandError) as refused:
        manage(*args)

    assert said in str(refused.value) and "not both" not in str(refused.value)


# --- resume ----------------------------------------------------------------------------------


def test_resume_strict_with_the_printed_fingerprint_resumes_the_run(in_process):
    run = run_in_process({"timeout": "visual/upload-cover/after"})
    fingerprint = printed_fingerprint(manage("plan", run.public_id))

    out = manage(
        "resume", run.public_id, "--strict", "--fingerprint", fingerprint, "--actor", "ann"
    )

    assert out.strip() == f"{run.public_id} resuming at visual"
    approved = Event.objects.get(run=run, type=Event.Type.PLAN_APPROVED)
    assert (approved.actor, approved.payload["fingerprint"]) == ("user:ann", fingerprint)
    run.refresh_from_db()
    assert (run.status, run.current_stage) == (Run.Status.RESUMING, "visual")


def test_resume_names_the_stage_of_the_fallback_checkpoint(in_process):
    # The run stopped in publish, but an altered image sends the resume back to visual.
    run = run_in_process({"timeout": "publish/publish/after"})
    cover = next(a for a in checkpoint(run, "visual").artifacts if a["name"] == "image-cover")
    with tampered(cover["uri"], "alter"):
        fingerprint = printed_fingerprint(manage("plan", run.public_id))
        out = manage("resume", run.public_id, "--strict", "--fingerprint", fingerprint)

    assert out.strip() == f"{run.public_id} resuming at visual"


def test_resume_upgrade_prints_the_new_branch(in_process):
    run = run_in_process({"timeout": "visual/upload-cover/after"})
    publish_facts(TOPIC)
    fingerprint = printed_fingerprint(manage("plan", run.public_id))

    out = manage("resume", run.public_id, "--upgrade", "--fingerprint", fingerprint)

    branch = Run.objects.get(parent=run)
    assert out.strip() == f"{run.public_id} superseded by branch {branch.public_id}"
    assert branch.inputs["facts"] == "v4"
    run.refresh_from_db()
    assert run.status == Run.Status.SUPERSEDED


def test_resume_of_a_plan_already_approved_says_so_and_does_nothing_more(in_process):
    run = run_in_process({"timeout": "visual/upload-cover/after"})
    fingerprint = compute_plan(run).fingerprint
    manage("resume", run.public_id, "--strict", "--fingerprint", fingerprint)
    after_first = ledger_state(run)

    out = manage("resume", run.public_id, "--strict", "--fingerprint", fingerprint)

    assert out.strip() == (
        f"{run.public_id}: This plan was already approved; nothing more was done."
    )
    assert ledger_state(run) == after_first
    assert Event.objects.filter(run=run, type=Event.Type.PLAN_APPROVED).count() == 1


def test_resume_with_another_action_on_an_approved_plan_is_refused(in_process):
    run = run_in_process({"timeout": "visual/upload-cover/after"})
    publish_facts(TOPIC)
    fingerprint = compute_plan(run).fingerprint
    manage("resume", run.public_id, "--strict", "--fingerprint", fingerprint)

    with pytest.raises(CommandError, match="is resuming: it is still active"):
        manage("resume", run.public_id, "--upgrade", "--fingerprint", fingerprint)

    assert not Run.objects.filter(parent=run).exists()


def test_resume_refused_for_another_reason_than_a_stale_plan_names_no_fingerprint(in_process):
    run = run_in_process({"timeout": "visual/upload-cover/after"})
    fingerprint = compute_plan(run).fingerprint

    with pytest.raises(CommandError) as refused:
        manage("resume", run.public_id, "--upgrade", "--fingerprint", fingerprint)

    assert "no upgrade is possible" in str(refused.value)
    assert "Fresh fingerprint" not in str(refused.value)


def test_resume_with_a_stale_fingerprint_is_refused_naming_the_fresh_one(in_process):
    run = run_in_process({"timeout": "visual/upload-cover/after"})
    stale = compute_plan(run).fingerprint
    publish_facts(TOPIC)
    fresh = compute_plan(run).fingerprint
    before = ledger_state(run)

    with pytest.raises(CommandError, match=f"plan changed.*Fresh fingerprint: {fresh}"):
        manage("resume", run.public_id, "--strict", "--fingerprint", stale)

    assert ledger_state(run) == before


def test_resume_of_a_blocked_plan_is_refused(in_process):
    run = run_in_process({"timeout": "publish/promote-charge/after"})
    fingerprint = compute_plan(run).fingerprint
    before = ledger_state(run)

    with pytest.raises(CommandError, match="the plan is blocked: charge_card") as refused:
        manage("resume", run.public_id, "--strict", "--fingerprint", fingerprint)

    assert ledger_state(run) == before
    assert ".." not in str(refused.value)


def test_resume_of_a_succeeded_run_is_refused(in_process):
    run = run_in_process()
    fingerprint = compute_plan(run).fingerprint
    before = ledger_state(run)

    with pytest.raises(CommandError, match="succeeded: there is nothing to resume"):
        manage("resume", run.public_id, "--strict", "--fingerprint", fingerprint)

    assert ledger_state(run) == before


def test_resume_of_an_unknown_run_is_refused(db):
    with pytest.raises(CommandError, match="unknown run"):
        manage("resume", "run-424242", "--strict", "--fingerprint", "0" * 64)


@pytest.mark.parametrize(
    "flags",
    [
        pytest.param([], id="neither-strict-nor-upgrade"),
        pytest.param(["--strict", "--upgrade"], id="both"),
        pytest.param(["--strict", "--no-fingerprint"], id="no-fingerprint"),
    ],
)
def test_resume_needs_one_action_and_a_fingerprint(in_process, flags):
    run = run_in_process({"timeout": "visual/upload-cover/after"})
    fingerprint = compute_plan(run).fingerprint
    args = [f for f in flags if f != "--no-fingerprint"]
    if "--no-fingerprint" not in flags:
        args += ["--fingerprint", fingerprint]
    before = ledger_state(run)

    with pytest.raises(CommandError):
        manage("resume", run.public_id, *args)

    assert ledger_state(run) == before


def test_refusal_on_the_command_line_exits_1_and_changes_nothing(in_process):
    run = run_in_process({"timeout": "visual/upload-cover/after"})
    before = ledger_state(run)

    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "resume", run.public_id, "--strict"]
        + ["--fingerprint", "f" * 64],
        cwd=ROOT,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 1
    assert "CommandError: the plan changed since it was shown" in done.stderr
    assert ledger_state(run) == before
