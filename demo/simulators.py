"""The demo's in-process systems: the versioned search source and the language model, the
two SAFE tools of the demo pipeline. Each call is metered in SimCall; the facts live in the
demo's FactSheet table. Prices are per call, in dollars. The renderer, the asset store, the
platform and the card processor are the demo service (demo_service/), reached over HTTP."""

from __future__ import annotations

from decimal import Decimal

from django.db import transaction
from django.db.models import Max

from demo.models import FactSheet, SimCall

PRICES = {
    "search": Decimal("0.0100"),
    "llm": Decimal("0.0500"),
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
