"""The demo content pipeline, written against Resumer's pipeline API like any user's would be:

    research → draft → visual → prefill → publish

research searches the (versioned) fact source; draft writes the article; visual renders a
cover and two body images and uploads them; prefill fills the platform's publish form;
publish publishes (RECONCILE_FIRST) and pays a promotion fee (NEVER).

The renderer, the asset store, the platform and the card processor are the demo service
(demo_service/, `python -m demo_service`, at settings.DEMO_SERVICE_URL), reached only through
HTTP tools (runs/tools/http.py): the delivery key travels as Idempotency-Key (the platform
ignores it and stores the key sent in the body, which is why publish reconciles first), and a
request whose answer is lost is a real unknown outcome. The language model is the demo
service's OpenAI-compatible /v1/chat/completions, reached with the model tool
(runs/tools/model.py): research runs a short agent loop in which the model asks for the SAFE
search tool, and draft has the model write the article; the model is a pinned input (`model`,
settings.DEMO_MODEL when a run starts). The search source stays an in-process SAFE function
(demo/simulators.py): the facts are the run's pinned, versioned input, read when a run starts
and whenever a plan checks for drift, which must not wait on a network service.
"""

from __future__ import annotations

import hashlib
import json
import re
from decimal import Decimal
from typing import Annotated, Any

from django import forms
from django.conf import settings
from pydantic import AfterValidator, BaseModel, Field

from demo import simulators as sim
from runs.models import GateRole, ReplayPolicy
from runs.pipeline import (
    Call,
    CallRejected,
    Confirm,
    Context,
    Input,
    InvalidInput,
    KeyParts,
    Pipeline,
    Rule,
    Stage,
    StageOutput,
    Tool,
)
from runs.tools.http import Lookup, http_tool
from runs.tools.model import Price, model_tool

IMAGE_SLOTS = ("body-1", "body-2", "cover")
PROMOTION_FEE = Decimal("5.00")
# The most a supervisor may set the promotion charge to when they confirm it.
PROMOTION_CEILING = Decimal("100.00")
# What the demo service charges per call (demo_service/models.py PRICES): what plans price.
RENDER_PRICE = Decimal("0.0400")
UPLOAD_PRICE = Decimal("0.0010")
PUBLISH_PRICE = Decimal("0.0000")


# --- inputs --------------------------------------------------------------------------------


def _facts_current(pinned: dict[str, str]) -> str:
    topic = pinned.get("topic", "")
    latest = sim.latest_facts_version(topic)
    if latest == 0:
        raise InvalidInput(f"the search source has no facts for topic {topic!r}", input="topic")
    return f"v{latest}"


FACTS_VERSION_RE = re.compile(r"v[1-9][0-9]*")


def _facts_validate(value: str, pinned: dict[str, str]) -> None:
    topic = pinned.get("topic", "")
    # Exactly how the source names its versions: str.isdigit() also takes "²" (int() then
    # raises a bare ValueError) and "٣" or "03", which would pin a spelling of v3 that never
    # equals the current "v3" and shows as input drift forever.
    if not FACTS_VERSION_RE.fullmatch(value):
        raise InvalidInput(f"facts version {value!r} must look like v3")
    if not sim.facts_exist(topic, int(value[1:])):
        raise InvalidInput(f"facts {value} does not exist for topic {topic!r}")


def _constant(value: str):
    return lambda pinned: value


def _nonempty(name: str):
    def validate(value: str, pinned: dict[str, str]) -> None:
        if not value.strip() or len(value) > 64:
            raise InvalidInput(f"{name} must be 1 to 64 characters")

    return validate


def _on_off(value: str, pinned: dict[str, str]) -> None:
    if value not in ("on", "off"):
        raise InvalidInput(f"review must be on or off, not {value!r}")


INPUTS = (
    Input(
        "topic",
        _constant("resumable-agents"),
        _nonempty("topic"),
        versioned=False,
        help="what the article is about",
    ),
    Input(
        "facts",
        _facts_current,
        _facts_validate,
        help="version of the topic's fact sheet",
    ),
    Input("account", _constant("acct-42"), _nonempty("account"), versioned=False),
    Input("platform", _constant("devblog"), _nonempty("platform"), versioned=False),
    Input(
        "model",
        lambda pinned: settings.DEMO_MODEL,
        _nonempty("model"),
        help="the language model research and draft ask (pinned: a strict resume keeps it)",
    ),
    Input(
        "review",
        _constant("off"),
        _on_off,
        versioned=False,
        help="on: an operator reviews the article before it is published, and a supervisor "
        "confirms the promotion charge",
    ),
)


def _reviewed(ctx: Context, args: dict | None = None) -> bool:
    return ctx.run.inputs.get("review") == "on"


class ReviewForm(forms.Form):
    """The editorial review before publish: approve (the title and body as edited here are
    what is published), or request changes with notes."""

    decision = forms.ChoiceField(
        choices=[("approve", "Approve and publish"), ("request_changes", "Request changes")]
    )
    title = forms.CharField(max_length=100)
    body = forms.CharField(widget=forms.Textarea)
    notes = forms.CharField(required=False, widget=forms.Textarea, max_length=2000)

    def clean(self) -> dict:
        # Checked where the gate is answered (the page, the API, the command line), as the
        # form's own rule: the writer is sent back with the notes and nothing else.
        cleaned = super().clean()
        if cleaned.get("decision") == "request_changes" and not cleaned.get("notes", "").strip():
            self.add_error("notes", "Say what to change: the writer gets only these notes.")
        return cleaned


class ChangesRequested(Exception):
    """The reviewer sent the article back: the stage fails with their notes."""


# --- tools -----------------------------------------------------------------------------------


def _search(args: dict, key: str) -> dict:
    return {"facts": sim.search(args["topic"], int(args["version"][1:]))}


def _generate(args: dict, key: str) -> dict:
    return sim.generate_draft(args["topic"], args["facts"])


def _service_url() -> str:
    # Read at call time: a worker's settings decide where the outside world is.
    return settings.DEMO_SERVICE_URL


def content_hash(title: str, body: str) -> str:
    """The platform's hash of an article's content (what its lookup matches on)."""
    return hashlib.sha256(f"{title}\n{body}".encode()).hexdigest()


def _render_key(ctx: Context, args: dict) -> KeyParts:
    return KeyParts(
        ctx.run.inputs["account"],
        "renderer",
        f"{ctx.root_id}/{args['slot']}",
        hashlib.sha256(args["prompt"].encode()).hexdigest()[:16],
    )


def _upload_key(ctx: Context, args: dict) -> KeyParts:
    return KeyParts(
        ctx.run.inputs["account"],
        "assets",
        f"{ctx.root_id}/{args['name']}",
        args["sha256"][:16],
    )


def _publish_key(ctx: Context, args: dict) -> KeyParts:
    # delivery_key = sha256(account + platform + canonical draft id + revision)
    return KeyParts(args["account"], args["platform"], args["draft_id"], args["revision"])


def _article_body(args: dict, key: str) -> dict[str, Any]:
    # The platform honours no Idempotency-Key: the delivery key goes in the body, where the
    # platform keeps it with the article and its lookup finds it.
    return {
        "account": args["account"],
        "platform": args["platform"],
        "title": args["title"],
        "body": args["body"],
        "cover_url": args["cover_url"],
        "delivery_key": key,
    }


def _same_article(request: dict[str, Any], found: dict[str, Any]) -> bool:
    return found["content_hash"] == request["content_hash"] and found["title"] == request["title"]


def _model_url() -> str:
    return f"{settings.DEMO_SERVICE_URL}/v1"


# What the demo service bills per million tokens (demo_service/chat.py CHAT_PRICES), for
# every demo model ("demo-" is a prefix of their names).
MODEL_PRICES = {"demo-": Price("2.50", "10.00", cached="1.25")}
SEARCH_SCHEMA = {
    "description": "The topic's sourced fact sheet, at a version of the search source",
    "parameters": {
        "type": "object",
        "properties": {"topic": {"type": "string"}, "version": {"type": "string"}},
        "required": ["topic", "version"],
    },
}


# What the supervisor reads beside the charge they confirm (markdown).
PROMOTION_NOTE = f"""\
**The promotion fee** for the article just published: the card processor charges the account
once per article (the charge's delivery key is the article's id).

- *Approve* to promote the article; you may change the amount, up to ${PROMOTION_CEILING}.
- *Reject* with a reason to leave it published without promotion: the stage records why.
"""


def _charge_key(ctx: Context, args: dict) -> KeyParts:
    return KeyParts(args["account"], "card", f"{ctx.root_id}/promotion", args["article"])


CENT = Decimal("0.01")


class ChargeArgs(BaseModel):
    """What the card processor takes: a positive amount in dollars and cents, written as the
    processor reads it ("20" is sent as "20.00")."""

    account: str
    amount: Annotated[
        Decimal,
        Field(gt=0, max_digits=10, decimal_places=2),
        AfterValidator(lambda amount: amount.quantize(CENT)),
    ]
    article: str


TOOLS = (
    Tool("search", ReplayPolicy.SAFE, _search, cost=sim.PRICES["search"], meter="search"),
    # The simulated writer the draft used before it asked the model: no stage calls it now;
    # bench/engine_overhead.py's bare side still does.
    Tool(
        "generate_draft",
        ReplayPolicy.SAFE,
        _generate,
        cost=sim.PRICES["llm"],
        meter="llm",
    ),
    model_tool(
        "model",
        base_url=_model_url,
        api_key_env="DEMO_MODEL_API_KEY",
        prices=MODEL_PRICES,
        read_timeout=5,
        target="language model",
        account=lambda ctx: ctx.run.inputs["account"],
    ),
    http_tool(
        "render_image",
        ReplayPolicy.IDEMPOTENT,
        url="/v1/renders",
        base_url=_service_url,
        body=lambda args, key: {"prompt": args["prompt"]},
        key=_render_key,
        external_id="id",
        target="renderer",
        cost=RENDER_PRICE,
        meter="render",
    ),
    http_tool(
        "upload_asset",
        ReplayPolicy.IDEMPOTENT,
        url="/v1/assets",
        base_url=_service_url,
        body=lambda args, key: {"name": args["name"], "content": args["svg"]},
        key=_upload_key,
        external_id="id",
        target="asset store",
        cost=UPLOAD_PRICE,
        meter="upload",
    ),
    http_tool(
        "publish_article",
        ReplayPolicy.RECONCILE_FIRST,
        url="/v1/articles",
        base_url=_service_url,
        body=_article_body,
        idempotency_header=None,
        key=_publish_key,
        external_id="id",
        # By delivery key; else the same content published by hand, without any key.
        reconcile=Lookup(
            "/v1/articles/by-key/{key}?account={account}&platform={platform}"
            "&content_hash={content_hash}",
            matches=_same_article,
        ),
        target="platform",
        verb="publish",
        cost=PUBLISH_PRICE,
        meter="publish",
    ),
    http_tool(
        "charge_card",
        ReplayPolicy.NEVER,
        url="/v1/charges",
        base_url=_service_url,
        body=lambda args, key: {
            "account": args["account"],
            "amount": args["amount"],
            "reference": f"promotion of {args['article']}",
        },
        key=_charge_key,
        external_id="id",
        # Never asked by a resume (NEVER is never guessed about); what a supervisor looks
        # the charge up with before resolving the ledger.
        reconcile="/v1/charges/by-key/{key}",
        target="card processor",
        cost=PROMOTION_FEE,
        # The charge costs what it charges: an amount a supervisor edited is what the ledger,
        # the plan and the verdict count.
        price=lambda args: Decimal(args["amount"]),
        args=ChargeArgs,
        meter="charge",
        verb="charge",
        # Money: a supervisor confirms the charge (and may change the amount, up to the
        # ceiling) before it is made, on runs started with review=on.
        confirm=Confirm(
            when=_reviewed,
            role=GateRole.SUPERVISOR,
            editable=("amount",),
            description=PROMOTION_NOTE,
            limits={"amount": Field(le=PROMOTION_CEILING)},
        ),
    ),
)


# --- stages ----------------------------------------------------------------------------------


def research(ctx: Context) -> StageOutput:
    """A short agent loop: the model, given the pinned inputs first, asks for the search tool
    (SAFE) and summarises what it found. The facts are the tool's result (evidence); the
    model's summary is context."""
    loop = ctx.converse(
        model=ctx.inputs["model"],
        task=f"Research {ctx.inputs['topic']}: fetch its sourced facts with the search tool "
        "at the pinned version, then summarise them.",
        facts={"version": ctx.inputs["facts"]},
        tools={"search": SEARCH_SCHEMA},
        max_turns=4,
        params={"temperature": 0},
    )
    searches = [c for c in loop.tool_calls if c["tool"] == "search"]
    facts = searches[-1]["result"]["facts"] if searches else []
    return StageOutput(
        outputs={
            "fact_count": len(facts),
            "facts_version": ctx.inputs["facts"],
            "searched": searches[-1]["args"].get("version", "") if searches else "",
            "turns": loop.turns,
            "summary": loop.final[:500],
        },
        artifacts={"facts": (json.dumps(facts, indent=2).encode(), "application/json")},
    )


def draft_title(topic: str) -> str:
    return f"Resumable agents: what {topic} teaches us"


def draft(ctx: Context) -> StageOutput:
    """The model writes the article, from the facts first: the verified research output and
    the pinned inputs, then the request."""
    facts = json.loads(ctx.upstream_artifact("research", "facts"))
    topic = ctx.run.inputs["topic"]
    known = {"topic": topic, **ctx.upstream("research").outputs, "model": ctx.inputs["model"]}
    known.pop("summary", None)  # the research model's words: context, not a fact
    prompt = "\n".join(
        [
            f"Title: {draft_title(topic)}",
            "Facts:",
            *(f"{i}. {f['claim']} — {f['source']}" for i, f in enumerate(facts, start=1)),
            "Write the article. Cite each fact as [n] and list the sources.",
        ]
    )
    result = ctx.call(
        "generate",
        "model",
        model=ctx.inputs["model"],
        messages=[
            {"role": "system", "content": "Facts (verified): " + json.dumps(known, sort_keys=True)},
            {"role": "user", "content": prompt},
        ],
        temperature=0,
        max_tokens=1200,
    )
    body = result["content"]
    first = body.splitlines()[0] if body else ""
    title = first[2:].strip() if first.startswith("# ") else draft_title(topic)
    revision = "r-" + hashlib.sha256(f"{title}\n{body}".encode()).hexdigest()[:12]
    return StageOutput(
        outputs={
            "title": title,
            "revision": revision,
            "draft_id": f"{ctx.root_id}/draft",
            "fact_count": len(facts),
            "words": len(body.split()),
            "model": ctx.inputs["model"],
        },
        artifacts={"draft": (body.encode(), "text/markdown")},
    )


def visual(ctx: Context) -> StageOutput:
    title = ctx.upstream("draft").outputs["title"]
    images, assets = {}, {}
    for slot in IMAGE_SLOTS:
        image = ctx.call(f"render-{slot}", "render_image", slot=slot, prompt=f"{slot}: {title}")
        asset = ctx.call(
            f"upload-{slot}",
            "upload_asset",
            name=slot,
            sha256=image["sha256"],
            svg=image["svg"],
        )
        images[f"image-{slot}"] = (image["svg"].encode(), "image/svg+xml")
        assets[slot] = asset["url"]
    return StageOutput(outputs={"assets": assets}, artifacts=images)


def prefill(ctx: Context) -> StageOutput:
    draft_cp = ctx.upstream("draft").outputs
    assets = ctx.upstream("visual").outputs["assets"]
    form = {
        "title": draft_cp["title"],
        "summary": f"{draft_cp['fact_count']} facts on resumable agents",
        "tags": ["agents", "reliability"],
        "cover_url": assets.get("cover", ""),
        "images": [assets[s] for s in IMAGE_SLOTS if s != "cover" and s in assets],
    }
    return StageOutput(
        outputs={"form": form},
        artifacts={"form": (json.dumps(form, indent=2).encode(), "application/json")},
    )


def _review(ctx: Context, title: str, body: str) -> tuple[str, str]:
    """The reviewer's title and body (as they edited them), or ChangesRequested."""
    if not _reviewed(ctx):
        return title, body
    answer = ctx.ask(
        "review",
        "Publish this article? Edit the title or the body if needed.",
        form=ReviewForm,
        initial={"decision": "approve", "title": title, "body": body},
        role=GateRole.OPERATOR,
    )
    if answer["decision"] != "approve":
        raise ChangesRequested(f"the reviewer requested changes: {answer.get('notes') or '-'}")
    return answer["title"], answer["body"]


def publish(ctx: Context) -> StageOutput:
    form = ctx.upstream("prefill").outputs["form"]
    draft_cp = ctx.upstream("draft")
    title, body = _review(ctx, form["title"], ctx.upstream_artifact("draft", "draft").decode())
    inputs = ctx.run.inputs
    article = ctx.call(
        "publish",
        "publish_article",
        account=inputs["account"],
        platform=inputs["platform"],
        title=title,
        body=body,
        cover_url=form["cover_url"],
        draft_id=draft_cp.outputs["draft_id"],
        # What is published is the revision: the draft's, unless the reviewer edited it.
        revision="r-" + content_hash(title, body)[:12],
        content_hash=content_hash(title, body),
    )
    try:
        charge = ctx.call(
            "promote-charge",
            "charge_card",
            account=inputs["account"],
            amount=str(PROMOTION_FEE),
            article=article["external_id"],
        )
        declined = ""
    except CallRejected as exc:
        # The supervisor said no: the article stays published, without its promotion.
        charge, declined = None, exc.reason
    return StageOutput(
        outputs={
            "article_id": article["external_id"],
            "url": article["url"],
            "title": title,
            "charge_id": charge["external_id"] if charge else "",
            # A supervisor may abandon the promotion charge; ctx.call then returns None.
            "charge": "charged" if charge else ("declined" if declined else "abandoned"),
            **({"declined": declined} if declined else {}),
        }
    )


def _charge_settled(out: StageOutput) -> bool:
    if out.outputs["charge"] == "charged":
        return out.outputs["charge_id"].startswith("ch-")
    return out.outputs["charge"] in ("abandoned", "declined") and not out.outputs["charge_id"]


def _images(out: StageOutput) -> list[bytes]:
    return [data for name, (data, _) in out.artifacts.items() if name.startswith("image-")]


content_pipeline = Pipeline(
    name="content",
    # What it is for: the index lists its stages beside it (a chain here said them twice).
    description="A sourced article with its images, published and promoted with a paid charge",
    inputs=INPUTS,
    tools=TOOLS,
    stages=(
        Stage(
            "research",
            research,
            consumes=("topic", "facts", "model"),
            tools=("model", "search"),
            calls=(Call("turn-1", "model"), Call("search-1", "search"), Call("turn-2", "model")),
            rules=(
                Rule("facts.count >= 3", lambda o: o.outputs["fact_count"] >= 3),
                Rule(
                    "facts.version == pinned",
                    lambda o: o.outputs["searched"] == o.outputs["facts_version"],
                ),
                Rule(
                    "facts.all_sourced",
                    lambda o: all(f.get("source") for f in json.loads(o.artifacts["facts"][0])),
                ),
            ),
        ),
        Stage(
            "draft",
            draft,
            consumes=("model",),
            tools=("model",),
            calls=(Call("generate", "model"),),
            rules=(
                Rule("draft.has_title", lambda o: bool(o.outputs["title"].strip())),
                Rule("draft.words >= 40", lambda o: o.outputs["words"] >= 40),
                Rule(
                    "draft.cites_every_fact",
                    lambda o: all(
                        f"[{i}]" in o.artifacts["draft"][0].decode()
                        for i in range(1, o.outputs["fact_count"] + 1)
                    ),
                ),
            ),
        ),
        Stage(
            "visual",
            visual,
            tools=("render_image", "upload_asset"),
            calls=tuple(
                c
                for slot in IMAGE_SLOTS
                for c in (
                    Call(f"render-{slot}", "render_image"),
                    Call(f"upload-{slot}", "upload_asset"),
                )
            ),
            rules=(
                Rule("image.count == 3", lambda o: len(_images(o)) == 3),
                Rule(
                    "image.watermark == false",
                    lambda o: all(b"watermark" not in img for img in _images(o)),
                ),
                Rule("assets.uploaded == 3", lambda o: len(o.outputs["assets"]) == 3),
            ),
        ),
        Stage(
            "prefill",
            prefill,
            rules=(
                Rule(
                    "title.length <= 100",
                    lambda o: 0 < len(o.outputs["form"]["title"]) <= 100,
                ),
                Rule("cover.present", lambda o: bool(o.outputs["form"]["cover_url"])),
            ),
        ),
        Stage(
            "publish",
            publish,
            tools=("publish_article", "charge_card"),
            asks=("review",),
            calls=(
                Call("publish", "publish_article"),
                Call("promote-charge", "charge_card"),
            ),
            rules=(
                Rule("article.live", lambda o: o.outputs["article_id"].startswith("art-")),
                Rule("charge.settled", _charge_settled),
            ),
        ),
    ),
)
