"""The simulated external systems' APIs. Each call is metered in SimCall; state lives in the
demo tables only. Prices are per call, in dollars."""

from __future__ import annotations

import hashlib
from decimal import Decimal
from xml.sax.saxutils import escape

from django.db import transaction
from django.db.models import Max

from demo.models import Article, Asset, Charge, FactSheet, Render, SimCall

PRICES = {
    "search": Decimal("0.0100"),
    "llm": Decimal("0.0500"),
    "render": Decimal("0.0400"),
    "upload": Decimal("0.0010"),
    "publish": Decimal("0.0000"),
    "charge": Decimal("5.0000"),
}


def meter(system: str, operation: str, key: str = "", *, billed: bool = False) -> None:
    SimCall.objects.create(
        system=system,
        operation=operation,
        key=key,
        billed=billed,
        cost=PRICES.get(system, Decimal(0)) if billed else Decimal(0),
    )


# --- search source -------------------------------------------------------------------------


def latest_facts_version(topic: str) -> int:
    return FactSheet.objects.filter(topic=topic).aggregate(v=Max("version"))["v"] or 0


def facts_exist(topic: str, version: int) -> bool:
    return FactSheet.objects.filter(topic=topic, version=version).exists()


def default_facts(topic: str, version: int) -> list[dict]:
    base = [
        {
            "claim": f"{topic}: retry repeats paid work",
            "source": "https://example.org/retry",
        },
        {
            "claim": f"{topic}: checkpoints are accepted boundaries",
            "source": "https://example.org/cp",
        },
        {
            "claim": f"{topic}: publishes need delivery keys",
            "source": "https://example.org/keys",
        },
    ]
    if version >= 2:
        base.append(
            {
                "claim": f"{topic}: leases need fencing tokens",
                "source": "https://example.org/lease",
            }
        )
    if version >= 4:
        base.append(
            {
                "claim": f"{topic}: inputs must be pinned (v{version})",
                "source": "https://example.org/pin",
            }
        )
    return base


def publish_facts(topic: str, facts: list[dict] | None = None) -> FactSheet:
    """A new version of the facts appears at the source (what makes inputs drift)."""
    with transaction.atomic():
        version = latest_facts_version(topic) + 1
        return FactSheet.objects.create(
            topic=topic,
            version=version,
            facts=facts if facts is not None else default_facts(topic, version),
        )


DEFAULT_TOPIC = "resumable-agents"


def ensure_topic(topic: str = DEFAULT_TOPIC, versions: int = 3) -> None:
    """Make sure the source has facts v1..vN for the topic (demo setup and tests)."""
    for version in range(1, versions + 1):
        FactSheet.objects.get_or_create(
            topic=topic, version=version, defaults={"facts": default_facts(topic, version)}
        )


def search(topic: str, version: int) -> list[dict]:
    meter("search", "query", f"{topic}@v{version}", billed=True)
    sheet = FactSheet.objects.filter(topic=topic, version=version).first()
    if sheet is None:
        raise LookupError(f"the search source has no facts v{version} for {topic!r}")
    return list(sheet.facts)


# --- language model (SAFE: pure, deterministic) ---------------------------------------------


def generate_draft(topic: str, facts: list[dict]) -> dict:
    meter("llm", "generate", billed=True)
    title = f"Resumable agents: what {topic} teaches us"
    lines = [
        f"# {title}",
        "",
        "A run that dies halfway should not start over from step one.",
    ]
    for i, fact in enumerate(facts, start=1):
        lines.append(f"{i}. {fact['claim']} [{i}]")
    lines += ["", "Retry is not a recovery strategy; a verified plan is. " * 3, ""]
    lines += [f"[{i}] {fact['source']}" for i, fact in enumerate(facts, start=1)]
    body = "\n".join(lines)
    return {"title": title, "body": body}


# --- image renderer (IDEMPOTENT by key) -----------------------------------------------------


def render(key: str, prompt: str) -> dict:
    with transaction.atomic():
        existing = Render.objects.filter(key=key).first()
        if existing is None:
            svg = (
                '<svg xmlns="http://www.w3.org/2000/svg" width="320" height="180" viewBox="0 0 320 180">'
                f'<rect width="320" height="180" fill="#{hashlib.sha256(prompt.encode()).hexdigest()[:6]}"/>'
                f'<text x="16" y="96" font-size="14" fill="#fff">{escape(prompt[:60])}</text></svg>'
            )
            existing = Render.objects.create(
                key=key,
                prompt=prompt,
                svg=svg,
                sha256=hashlib.sha256(svg.encode()).hexdigest(),
                cost=PRICES["render"],
            )
            meter("render", "render", key, billed=True)
        else:
            meter("render", "render-dedup", key)
    return {
        "external_id": f"rnd-{existing.pk}",
        "svg": existing.svg,
        "sha256": existing.sha256,
    }


# --- asset store (IDEMPOTENT by key) --------------------------------------------------------


def upload(key: str, name: str, data: bytes) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    with transaction.atomic():
        asset, created = Asset.objects.get_or_create(
            key=key, defaults={"name": name, "sha256": digest, "size": len(data)}
        )
        meter("assets", "upload" if created else "upload-dedup", key, billed=created)
    return {"external_id": f"ast-{asset.pk}", "url": asset.url, "sha256": asset.sha256}


# --- publishing platform (no dedup: RECONCILE_FIRST) ------------------------------------------


def content_hash(title: str, body: str) -> str:
    return hashlib.sha256(f"{title}\n{body}".encode()).hexdigest()


def publish(account: str, platform: str, key: str, title: str, body: str, cover_url: str) -> dict:
    article = Article.objects.create(
        account=account,
        platform=platform,
        delivery_key=key,
        title=title,
        body=body,
        content_hash=content_hash(title, body),
        cover_url=cover_url,
    )
    meter("platform", "publish", key, billed=True)
    return {
        "external_id": article.external_id,
        "url": f"https://{platform}.example/a/{article.pk}",
        "content_hash": article.content_hash,
    }


def find_article(account: str, platform: str, key: str, chash: str) -> Article | None:
    """The platform's query API: by delivery key; else an article with the same content that
    carries no key at all (published by hand, outside any pipeline). An article with the same
    content under another key is another delivery (another run's), never this one."""
    meter("platform", "query", key)
    by_key = Article.objects.filter(account=account, platform=platform, delivery_key=key).first()
    if by_key is not None:
        return by_key
    return Article.objects.filter(
        account=account, platform=platform, content_hash=chash, delivery_key=""
    ).first()


# --- card processor (NEVER) ---------------------------------------------------------------


def charge(account: str, reference: str, amount: Decimal) -> dict:
    row = Charge.objects.create(account=account, reference=reference, amount=amount)
    meter("card", "charge", reference, billed=True)
    return {"external_id": row.external_id, "amount": str(row.amount)}
