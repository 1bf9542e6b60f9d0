"""An agent that lives outside Resumer, made resumable: it announces a software release.

    gather      SAFE             GET  /v1/articles?account=..  what the account published before
    illustrate  IDEMPOTENT       POST /v1/renders               a banner (Idempotency-Key: retried
                                                                with the same key, billed once)
    announce    RECONCILE_FIRST  POST /v1/articles              the announcement (the platform
                                                                honours no key: a lookup by the
                                                                delivery key decides a re-run)
                NEVER            POST /v1/charges               a paid boost (never re-run blindly:
                                                                a human resolves an unknown one)

Nothing in Resumer knows this module. It is registered by the environment of the web server
and of every worker, and talks to its API over HTTP (here the demo service; any JSON API with
the same shape would do):

    python -m demo_service --port 8001 &
    export PYTHONPATH=examples RESUMER_PIPELINES=announcer.pipeline
    export ANNOUNCER_API_URL=http://127.0.0.1:8001
    python manage.py check                                   # runs.E001-E003 if it is wrong
    python manage.py start_run announcer --input version=2.4.0
    python manage.py work

docs/pipelines.md walks through it; tests/test_examples.py runs it on a real worker.
"""

from __future__ import annotations

import hashlib
import os
import re
from decimal import Decimal
from typing import Any

from runs.models import ReplayPolicy
from runs.pipeline import (
    Call,
    Input,
    InvalidInput,
    KeyParts,
    Pipeline,
    Rule,
    Stage,
    StageOutput,
)
from runs.tools.http import Lookup, Retry, http_tool

PLATFORM = "devblog"
BOOST = "1.00"
VERSION_RE = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")


def api_url() -> str:
    """Read at call time, in the worker: where the API is can change without a new release
    of the agent."""
    return os.environ.get("ANNOUNCER_API_URL", "http://127.0.0.1:8001")


def api_headers() -> dict[str, str]:
    # Credentials come from the environment and are never recorded: an exchange keeps only
    # the headers that matter for replay (Idempotency-Key, Content-Type, ...).
    token = os.environ.get("ANNOUNCER_API_TOKEN", "")
    return {"Authorization": f"Bearer {token}"} if token else {}


def _version(value: str, pinned: dict[str, str]) -> None:
    if not VERSION_RE.fullmatch(value):
        raise InvalidInput(f"version {value!r} must look like 2.4.0")


def _account(value: str, pinned: dict[str, str]) -> None:
    if not value.strip() or len(value) > 64:
        raise InvalidInput("account must be 1 to 64 characters")


# --- tools: one HTTP tool per replay policy --------------------------------------------------

# SAFE: a read. Re-run freely; the checkpoint of its stage pins what it returned.
list_articles = http_tool(
    "list_articles",
    ReplayPolicy.SAFE,
    method="GET",
    url="/v1/articles",
    base_url=api_url,
    params=lambda args: {"account": args["account"], "platform": PLATFORM},
    headers=api_headers,
    target="platform",
)

# IDEMPOTENT: the API stores its answer under the Idempotency-Key (the delivery key), so a
# retry with the same key, in the call (Retry) or after a crash, gets the same banner.
render_banner = http_tool(
    "render_banner",
    ReplayPolicy.IDEMPOTENT,
    url="/v1/renders",
    base_url=api_url,
    body=lambda args, key: {"prompt": args["prompt"]},
    key=lambda ctx, args: KeyParts(
        ctx.run.inputs["account"],
        "renderer",
        f"release/{ctx.run.inputs['version']}/banner",
        hashlib.sha256(args["prompt"].encode()).hexdigest()[:16],
    ),
    external_id="id",
    headers=api_headers,
    retry=Retry(attempts=4, backoff=0.5, max_backoff=5),
    target="renderer",
    cost=Decimal("0.04"),
    meter="render",
)


def _same_announcement(request: dict[str, Any], found: dict[str, Any]) -> bool:
    return found["title"] == request["title"] and found["content_hash"] == request["content_hash"]


# RECONCILE_FIRST: the platform makes a second article for a second request, whatever the
# header says. The delivery key goes in the body, the platform keeps it with the article,
# and before any re-run Resumer asks it: found and the same → recorded, not published again.
publish_announcement = http_tool(
    "publish_announcement",
    ReplayPolicy.RECONCILE_FIRST,
    url="/v1/articles",
    base_url=api_url,
    body=lambda args, key: {
        "account": args["account"],
        "platform": PLATFORM,
        "title": args["title"],
        "body": args["body"],
        "delivery_key": key,
    },
    idempotency_header=None,
    key=lambda ctx, args: KeyParts(
        args["account"], PLATFORM, f"release/{args['version']}", args["content_hash"][:16]
    ),
    external_id="id",
    reconcile=Lookup(
        "/v1/articles/by-key/{key}?account={account}&platform=" + PLATFORM,
        matches=_same_announcement,
    ),
    headers=api_headers,
    read_timeout=10,
    target="platform",
    verb="publish",
)

# NEVER: money. A call whose outcome is unknown blocks the plan until a supervisor has looked
# it up (the Lookup below is what they would ask) and recorded the truth in the ledger.
boost_announcement = http_tool(
    "boost_announcement",
    ReplayPolicy.NEVER,
    url="/v1/charges",
    base_url=api_url,
    body=lambda args, key: {
        "account": args["account"],
        "amount": BOOST,
        "reference": f"boost of {args['article']}",
    },
    key=lambda ctx, args: KeyParts(
        args["account"], "card", f"release/{ctx.run.inputs['version']}/boost", args["article"]
    ),
    external_id="id",
    reconcile="/v1/charges/by-key/{key}",
    headers=api_headers,
    target="card processor",
    cost=Decimal(BOOST),
    meter="charge",
    verb="charge",
)


# --- stages --------------------------------------------------------------------------------


def gather(ctx) -> StageOutput:
    earlier = ctx.call("earlier", "list_articles", account=ctx.inputs["account"])
    titles = [a["title"] for a in earlier["data"]]
    return StageOutput(outputs={"earlier": titles[-5:]})


def illustrate(ctx) -> StageOutput:
    banner = ctx.call("banner", "render_banner", prompt=f"Release {ctx.inputs['version']}")
    return StageOutput(
        outputs={"banner_id": banner["external_id"], "banner_sha256": banner["sha256"]},
        artifacts={"banner": (banner["svg"].encode(), "image/svg+xml")},
    )


def announce(ctx) -> StageOutput:
    version, account = ctx.inputs["version"], ctx.inputs["account"]
    earlier = ctx.upstream("gather").outputs["earlier"]
    banner = ctx.upstream("illustrate").outputs["banner_id"]
    title = f"Release {version}"
    body = "\n".join(
        [f"# {title}", "", f"![banner]({banner})", "", "Earlier:", *[f"- {t}" for t in earlier]]
    )
    article = ctx.call(
        "publish",
        "publish_announcement",
        account=account,
        version=version,
        title=title,
        body=body,
        content_hash=hashlib.sha256(f"{title}\n{body}".encode()).hexdigest(),
    )
    boost = ctx.call("boost", "boost_announcement", account=account, article=article["external_id"])
    return StageOutput(
        outputs={
            "article_id": article["external_id"],
            # A supervisor may abandon the boost; ctx.call then returns None.
            "boost_id": boost["external_id"] if boost else "",
        }
    )


pipeline = Pipeline(
    name="announcer",
    description="gather → illustrate → announce: one HTTP tool per replay policy",
    inputs=(
        Input("account", lambda pinned: "acct-example", _account, versioned=False),
        Input("version", lambda pinned: "1.0.0", _version, versioned=False),
    ),
    tools=(list_articles, render_banner, publish_announcement, boost_announcement),
    stages=(
        Stage(
            "gather",
            gather,
            consumes=("account",),
            tools=("list_articles",),
            calls=(Call("earlier", "list_articles"),),
            rules=(Rule("earlier.listed", lambda out: isinstance(out.outputs["earlier"], list)),),
        ),
        Stage(
            "illustrate",
            illustrate,
            consumes=("version",),
            tools=("render_banner",),
            calls=(Call("banner", "render_banner"),),
            rules=(
                Rule("banner.is_svg", lambda out: out.artifacts["banner"][0].startswith(b"<svg")),
            ),
        ),
        Stage(
            "announce",
            announce,
            consumes=("account", "version"),
            tools=("publish_announcement", "boost_announcement"),
            calls=(Call("publish", "publish_announcement"), Call("boost", "boost_announcement")),
            rules=(
                Rule("article.live", lambda out: out.outputs["article_id"].startswith("art-")),
                Rule(
                    "boost.charged_or_abandoned",
                    lambda out: (
                        out.outputs["boost_id"] == "" or out.outputs["boost_id"].startswith("ch-")
                    ),
                ),
            ),
        ),
    ),
)
