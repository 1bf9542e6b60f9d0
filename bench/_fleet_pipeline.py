"""The pipeline bench/fleet.py runs: three stages whose every tool call waits 50 ms, like a call
to a remote API, against a "target" that meters what it receives.

Registered like any user's pipeline, through the environment of the bench and of its worker
processes (nothing in Resumer names it):

    PYTHONPATH=bench RESUMER_PIPELINES=_fleet_pipeline.fleet

The target is a folder (FLEET_METER) that meters what it receives (bench/_target.py).

    gather   fetch ×2 (SAFE)
    compose  fetch (SAFE), render (IDEMPOTENT, $0.002), a small artifact
    post     post (RECONCILE_FIRST, $0.001; reconcile asks the target by key)
"""

from __future__ import annotations

import hashlib
import json
import time
from decimal import Decimal

import _target

from runs.models import ReplayPolicy
from runs.pipeline import Call, KeyParts, Pipeline, Reconciliation, Rule, Stage, StageOutput, Tool


def fetch(args: dict, key: str) -> dict:
    time.sleep(_target.WAIT)
    return {"items": [f"{args['source']}-{i}" for i in range(3)]}


def render(args: dict, key: str) -> dict:
    return {"external_id": _target.bill(key, "render"), "size": len(args["text"])}


def post(args: dict, key: str) -> dict:
    return {"external_id": _target.bill(key, "post")}


def find_post(effect) -> Reconciliation:
    time.sleep(_target.WAIT)  # asking the target is a remote call too
    if (_target.meter() / effect.delivery_key).exists():
        return Reconciliation(True, True, f"post-{effect.delivery_key[:12]}", detail="posted")
    return Reconciliation(False, detail="no such post")


def _key(kind: str):
    def key(ctx, args: dict) -> KeyParts:
        return KeyParts("fleet", kind, f"{ctx.root_id}/{kind}", "1")

    return key


def gather(ctx) -> StageOutput:
    first = ctx.call("fetch-a", "fetch", source="a")
    second = ctx.call("fetch-b", "fetch", source="b")
    return StageOutput(outputs={"items": first["items"] + second["items"]})


def compose(ctx) -> StageOutput:
    items = ctx.upstream("gather").outputs["items"]
    extra = ctx.call("fetch-c", "fetch", source="c")
    text = " ".join(items + extra["items"])
    image = ctx.call("render", "render", text=text)
    digest = hashlib.sha256(text.encode()).hexdigest()
    return StageOutput(
        outputs={"image": image["external_id"], "digest": digest},
        artifacts={"text": (json.dumps({"text": text}).encode(), "application/json")},
    )


def publish(ctx) -> StageOutput:
    image = ctx.upstream("compose").outputs["image"]
    posted = ctx.call("post", "post", image=image)
    return StageOutput(outputs={"post": posted["external_id"]})


fleet = Pipeline(
    name="fleet",
    description="gather → compose → post; every call waits 50 ms",
    tools=(
        Tool("fetch", ReplayPolicy.SAFE, fetch),
        Tool("render", ReplayPolicy.IDEMPOTENT, render, key=_key("render"), cost=Decimal("0.002")),
        Tool(
            "post",
            ReplayPolicy.RECONCILE_FIRST,
            post,
            key=_key("post"),
            reconcile=find_post,
            cost=Decimal("0.001"),
            verb="post",
        ),
    ),
    stages=(
        Stage(
            "gather",
            gather,
            tools=("fetch",),
            calls=(Call("fetch-a", "fetch"), Call("fetch-b", "fetch")),
            rules=(Rule("items == 6", lambda o: len(o.outputs["items"]) == 6),),
        ),
        Stage(
            "compose",
            compose,
            tools=("fetch", "render"),
            calls=(Call("fetch-c", "fetch"), Call("render", "render")),
            rules=(Rule("rendered", lambda o: o.outputs["image"].startswith("render-")),),
        ),
        Stage(
            "post",
            publish,
            tools=("post",),
            calls=(Call("post", "post"),),
            rules=(Rule("posted", lambda o: o.outputs["post"].startswith("post-")),),
        ),
    ),
)
