"""What each way out of a stop does to the outside world, in the tools' own verbs and money, and
the drift that makes an upgrade an option (runs/planning/acts.py): the words every face shows,
read from the plan value alone."""

from __future__ import annotations

from runs.planning.acts import plan_acts
from runs.planning.plan import Cost, DriftLine, EffectLine, MadeAgain, Plan, Upgrade


def line(call: str, tool: str, policy: str, action: str, cost: str, **more) -> EffectLine:
    return EffectLine(
        stage=more.pop("stage", "publish"),
        call_id=call,
        tool=tool,
        policy=policy,
        status=more.pop("status", "none"),
        delivery_key="",
        external_id="",
        answer="",
        action=action,
        cost=cost,
        **more,
    )


UPLOAD = line("upload-cover", "upload_asset", "IDEMPOTENT", "call", "0.0010", stage="visual")
PUBLISH = line("publish-article", "publish_article", "RECONCILE_FIRST", "call", "0", verb="publish")
CHARGE = line("promote-charge", "charge_card", "NEVER", "call", "5.00", verb="charge")
SEARCH = line("search", "search", "SAFE", "re-run", "0", stage="research")


def plan(effects, *, drift=(), upgrade: Upgrade | None = None) -> Plan:
    return Plan(
        run="run-7", run_pk=7, pipeline="content", status="interrupted", resumable=True,
        not_resumable_reason="", run_version=9, last_seq=9, checkpoint=None,
        checkpoint_stage="", checkpoint_reason="", fallbacks=[], next_stage="visual",
        tail_events=0, tail_summary=[], artifacts=[], stages_skipped=[],
        stages_reexecuted=["visual", "publish"], effects=list(effects), blockers=[],
        drift=list(drift), cost_resume=Cost(), cost_fresh=Cost(),
        upgrade=upgrade or Upgrade(False, "no input has changed"),
    )  # fmt: skip


def test_a_strict_resume_names_the_acts_a_person_weighs_in_the_tools_verbs_and_money():
    words = plan_acts(plan([SEARCH, UPLOAD, PUBLISH, CHARGE])).strict

    # The upload declares no act of its own and can be made again: it is in the count only.
    assert words.acts == ["publishes an article", "charges $5.00"]
    assert words.does == "publishes an article, charges $5.00"
    assert words.confirm == "publishes an article, charges $5.00"


def test_a_call_made_before_names_where_it_acts():
    made = line(
        "promote-charge", "charge_card", "NEVER", "retry-same-key", "5.00",
        verb="charge", target="acct-7@card",
    )  # fmt: skip
    assert plan_acts(plan([made])).strict.acts == ["charges $5.00 to acct-7 (card)"]


def test_reused_and_recorded_calls_are_no_acts():
    reused = line(
        "publish-article", "publish_article", "RECONCILE_FIRST", "reuse", "0", verb="publish"
    )
    found = line("promote-charge", "charge_card", "NEVER", "record-found", "0", verb="charge")
    assert plan_acts(plan([reused, found])).strict.acts == []


def test_a_drifted_strict_resume_says_what_it_keeps_and_the_drift_it_leaves_to_the_upgrade():
    drift = [DriftLine("facts", "v3", "v4")]
    words = plan_acts(plan([PUBLISH, CHARGE], drift=drift)).strict

    assert words.does == (
        "publishes an article, charges $5.00; keeps facts v3 (facts v3 → v4 is the upgrade's)"
    )
    assert words.confirm.endswith("; it keeps facts v3 (facts v3 → v4 is the upgrade's)")


def test_an_upgrade_names_its_drift_and_what_it_makes_a_second_time():
    published = MadeAgain(
        "run-7", "publish_article", "publish-article", "art-1", "publish", "publish"
    )
    charged = MadeAgain("run-7", "charge_card", "promote-charge", "ch-1", "publish", "charge")
    upgrade = Upgrade(
        True, "facts v3 → v4", stages_rerun=["draft", "publish"],
        warnings=[published, charged], effects=[PUBLISH, CHARGE],
    )  # fmt: skip
    words = plan_acts(plan([], drift=[DriftLine("facts", "v3", "v4")], upgrade=upgrade)).upgrade

    assert words.acts == [
        "publishes a second article (the first, art-1, stays)",
        "charges $5.00 again (the first, ch-1, stays)",
    ]
    assert words.does.startswith("facts v3 → v4: publishes a second article")
    assert words.confirm.startswith("takes facts v3 → v4 and publishes a second article")


def test_a_groups_words_leave_out_what_each_run_names_for_itself():
    made = line(
        "promote-charge", "charge_card", "NEVER", "retry-same-key", "5.00",
        verb="charge", target="acct-7@card",
    )  # fmt: skip
    assert plan_acts(plan([made]), where=False).strict.acts == ["charges $5.00"]


def test_a_plan_stored_before_lines_had_their_verb_names_only_what_cannot_be_made_again():
    data = plan([line("promote-charge", "charge_card", "NEVER", "call", "5.00")]).to_dict()
    for stored_line in data["effects"]:
        del stored_line["verb"], stored_line["target"]
    assert plan_acts(Plan.from_dict(data)).strict.acts == ["calls $5.00"]
