"""A group's page: each call of the shared plan with its tool's policy, from the registry."""

from __future__ import annotations

from dataclasses import dataclass

from runs.models import ReplayPolicy
from runs.pipeline import UnknownPipeline, registry


@dataclass(frozen=True)
class GroupCall:
    stage: str
    call: str
    tool: str
    action: str
    # The tool's policy (safe, reconcile first, never ...) and what it means; "" when this
    # process does not know the pipeline or the tool any more.
    policy: str
    policy_label: str


def calls(shape: dict) -> list[GroupCall]:
    """The shape's calls, each with its tool's policy as the pipeline declares it."""
    try:
        pipeline = registry.get(shape.get("pipeline", ""))
    except UnknownPipeline:
        pipeline = None
    found = []
    for stage, call, tool, action in shape.get("effects", []):
        policy = label = ""
        if pipeline is not None:
            try:
                declared = pipeline.tool(tool).policy
            except KeyError:
                declared = None
            if declared is not None:
                policy = str(declared)
                label = ReplayPolicy(policy).label if policy in ReplayPolicy.values else policy
        found.append(GroupCall(stage, call, tool, action, policy, label))
    return found
