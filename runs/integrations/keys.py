"""The delivery key of an adapted agent's tool that declares no key of its own: the pipeline,
the SDK and the tool, the run's root and stage, and the arguments' digest. The same request in
the same stage of the same run (its resumes and branches included) is the same delivery."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runs.ledger.chain import digest
from runs.pipeline import Context, KeyParts


def default_key(sdk: str, name: str) -> Callable[[Context, dict[str, Any]], KeyParts]:
    def key(ctx: Context, args: dict[str, Any]) -> KeyParts:
        return KeyParts(
            ctx.pipeline.name, f"{sdk}:{name}", f"{ctx.root_id}/{ctx.stage}", digest(args)[:32]
        )

    return key
