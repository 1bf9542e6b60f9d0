"""What an upgrade branch would make again: the effects its parent already made in the stages
the branch re-runs, on tools that are never guessed about (the upgrade's warnings)."""

from __future__ import annotations

from runs.models import Effect, Run
from runs.pipeline import registry
from runs.planning.plan import EffectLine, MadeAgain
from runs.planning.replay import GUARDED_POLICIES, Action


def _verb_of(run: Run, tool: str) -> str:
    try:
        return registry.get(run.pipeline).tool(tool).verb
    except KeyError:  # a tool the pipeline no longer declares
        return "call"


def warnings(
    run: Run, effects: dict[tuple[str, str], Effect], strict_lines: list[EffectLine]
) -> list[MadeAgain]:
    """Effects the parent already made in stages the branch re-runs (`effects`: the run's own
    in those stages) would happen again under a new key whenever the branch's request
    differs (new facts → new draft → new revision): said for the tools that are never guessed
    about."""
    said = []
    # An effect the ledger never confirmed may still have happened: what this plan's reconcile
    # query found on the target counts as made (the approval records it on this run).
    found = {
        (line.stage, line.call_id): line.external_id
        for line in strict_lines
        if line.action == Action.RECORD_FOUND
    }
    for (stage, call_id), effect in sorted(effects.items()):
        made_as = effect.external_id
        if effect.status != Effect.Status.CONFIRMED:
            made_as = found.get((stage, call_id), "")
            if not made_as:
                continue
        if effect.policy in GUARDED_POLICIES:
            said.append(
                MadeAgain(
                    run=run.public_id,
                    tool=effect.tool,
                    call_id=call_id,
                    made_as=made_as,
                    stage=stage,
                    verb=_verb_of(run, effect.tool),
                )
            )
    return said
