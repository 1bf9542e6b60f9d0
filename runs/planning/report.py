"""Plain-text rendering of a plan, for the CLI (the dashboard renders the same value)."""

from __future__ import annotations

from runs.planning.acts import plan_acts
from runs.planning.model_lines import tokens_text
from runs.planning.planner import Plan
from runs.quantities import money


def _calls(n: int) -> str:
    return f"{n} call{'s' if n != 1 else ''}"


def plan_as_text(plan: Plan, why: list[str] | None = None) -> str:
    """`why`: the sentences of why the run stopped (runs/reads/inbox.stop_facts), as the run
    page and the inbox say them."""
    out = [f"Plan for {plan.run} ({plan.pipeline}, {plan.status})"]
    out += [f"  why it stopped: {sentence}" for sentence in why or []]
    if not plan.resumable:
        out.append(f"  not resumable: {plan.not_resumable_reason}")
    out.append(f"  checkpoint: {plan.checkpoint or 'none'} — {plan.checkpoint_reason}")
    out += [f"  fallback: {f}" for f in plan.fallbacks]
    bad = [a for a in plan.artifacts if not a.ok]
    out.append(f"  artifacts checked: {len(plan.artifacts)}, failing: {len(bad)}")
    out.append(f"  events after the checkpoint: {plan.tail_events}")
    out.append(f"  skip: {', '.join(plan.stages_skipped) or '-'}")
    out.append(f"  re-execute: {', '.join(plan.stages_reexecuted) or '-'}")
    out.append("  effects:")
    for e in plan.effects:
        out.append(f"    {e.stage}/{e.call_id} [{e.policy}] {e.status} → {e.action}: {e.answer}")
    if plan.gates:
        out.append("  gates:")
        for g in plan.gates:
            out.append(f"    {g.stage}/{g.gate_id} → {g.action}: {g.said}")
    if plan.drift:
        out.append("  input drift:")
        out += [f"    {d.input}: pinned {d.pinned}, now {d.current}" for d in plan.drift]
    resume, fresh = plan.cost_resume, plan.cost_fresh
    out.append(
        f"  cost of this resume: {_calls(resume.tool_calls)}{tokens_text(resume)}, "
        f"{money(resume.money)}  (a fresh retry: {_calls(fresh.tool_calls)}"
        f"{tokens_text(fresh)}, {money(fresh.money)})"
    )
    if plan.blockers:
        out.append("  BLOCKED:")
        out += [f"    - {b}" for b in plan.blockers]
    words = plan_acts(plan)
    if plan.can_strict and words.strict.does:
        out.append(f"  a strict resume {words.strict.does}")
    up = plan.upgrade
    out.append(f"  upgrade: {'available' if up.available else 'not available'} — {up.reason}")
    if plan.can_upgrade and words.upgrade.does:
        out.append(f"    it {words.upgrade.confirm}")
    out += [f"    warning: {w}" for w in up.warnings]
    out += [f"    gate {g.stage}/{g.gate_id}: {g.said}" for g in up.gates]
    out.append(f"  fingerprint: {plan.fingerprint}")
    return "\n".join(out)
