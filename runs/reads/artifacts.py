"""Artifacts as the pages show them: the run page's list, each checked against its
checkpoint's manifest, and one artifact's own page."""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from operator import or_

from django.db.models import Q

from runs.ledger import artifacts as artifact_store
from runs.models import Artifact, Checkpoint

TEXT_PREVIEW_BYTES = 200_000


@dataclass
class ArtifactRow:
    stage: str
    checkpoint: str
    name: str
    uri: str
    sha256: str
    size: int
    content_type: str
    artifact: Artifact | None
    ok: bool
    reason: str = ""


def artifact_rows(checkpoints: list[Checkpoint]) -> list[ArtifactRow]:
    entries = [(cp, entry) for cp in checkpoints for entry in cp.artifacts]
    wanted = []
    for _, entry in entries:
        try:
            wanted.append(artifact_store.parse_uri(entry.get("uri", "")))
        except artifact_store.ArtifactMissing:
            continue
    found: dict[tuple[str, int], Artifact] = {}
    if wanted:
        query = reduce(or_, (Q(name=name, version=version) for name, version in wanted))
        found = {(a.name, a.version): a for a in Artifact.objects.filter(query)}
    rows = []
    for cp, entry in entries:
        uri = entry.get("uri", "")
        try:
            artifact = found.get(artifact_store.parse_uri(uri))
        except artifact_store.ArtifactMissing:
            artifact = None
        # The one verification (artifacts.check), on the rows loaded above in one query.
        check = artifact_store.check(uri, entry.get("sha256", ""), artifact)
        rows.append(
            ArtifactRow(
                stage=cp.stage,
                checkpoint=cp.id,
                name=entry.get("name", ""),
                uri=uri,
                sha256=entry.get("sha256", ""),
                size=entry.get("size", 0),
                content_type=entry.get("content_type", ""),
                artifact=artifact,
                ok=check.ok,
                reason=check.reason,
            )
        )
    return rows


def get_artifact(pk: int) -> Artifact | None:
    return Artifact.objects.select_related("run").filter(pk=pk).first()


@dataclass
class ArtifactView:
    artifact: Artifact
    check: artifact_store.Check
    text: str | None
    truncated: bool


def artifact_view(artifact: Artifact) -> ArtifactView:
    check = artifact_store.verify(artifact.uri, artifact.sha256)
    text, truncated = None, False
    if artifact.is_text and check.ok:
        data = artifact_store.read(artifact.uri)
        truncated = len(data) > TEXT_PREVIEW_BYTES
        text = data[:TEXT_PREVIEW_BYTES].decode("utf-8", errors="replace")
    return ArtifactView(artifact, check, text, truncated)
