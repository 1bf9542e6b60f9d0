"""Content-addressed artifacts behind versioned names (artifact://facts/v3).

Blobs live in Django's default storage under their sha256, so identical content is stored
once and an S3-compatible backend is a STORAGES setting, not code. The Artifact row names a
version of a logical name and records the hash the blob must still have.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import IntegrityError, transaction
from django.db.models import Max

from runs.models import Artifact, Run

URI_RE = re.compile(r"^artifact://(?P<name>[A-Za-z0-9_./-]+)/v(?P<version>\d+)$")


class ArtifactMissing(LookupError):
    pass


@dataclass(frozen=True)
class Check:
    uri: str
    ok: bool
    reason: str = ""


def blob_path(sha256: str) -> str:
    return f"blobs/{sha256[:2]}/{sha256}"


def parse_uri(uri: str) -> tuple[str, int]:
    match = URI_RE.match(uri or "")
    if not match:
        raise ArtifactMissing(f"not an artifact uri: {uri!r}")
    return match["name"], int(match["version"])


def _blob_holds(path: str, digest: str) -> bool:
    """Does the blob at `path` exist and still hash to `digest`?"""
    if not default_storage.exists(path):
        return False
    try:
        with default_storage.open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest() == digest
    except OSError:
        return False


def store(name: str, data: bytes, content_type: str, *, run: Run | None = None) -> Artifact:
    """Store `data` as the next version of `name`."""
    digest = hashlib.sha256(data).hexdigest()
    path = blob_path(digest)
    if not _blob_holds(path, digest):
        # Two writers racing on the same content may both save; storage then renames the
        # second copy, which is still the same bytes, so either name is a valid blob. A blob
        # that exists but was altered is left as the evidence its old rows point to, and this
        # row gets a fresh copy under a new name: a re-executed stage must not seal a
        # checkpoint on bytes that already fail verify().
        path = default_storage.save(path, ContentFile(data))
    for _ in range(5):
        try:
            with transaction.atomic():
                latest = Artifact.objects.filter(name=name).aggregate(v=Max("version"))["v"] or 0
                return Artifact.objects.create(
                    name=name,
                    version=latest + 1,
                    sha256=digest,
                    size=len(data),
                    content_type=content_type,
                    blob=path,
                    run=run,
                )
        except IntegrityError:
            continue  # another writer took this version number; take the next one
    raise IntegrityError(f"could not allocate a version for artifact {name!r}")


def get(uri: str) -> Artifact:
    name, version = parse_uri(uri)
    artifact = Artifact.objects.filter(name=name, version=version).first()
    if artifact is None:
        raise ArtifactMissing(f"{uri} is not in the artifact table")
    return artifact


def read(uri: str) -> bytes:
    return _read_blob(get(uri))


def _read_blob(artifact: Artifact) -> bytes:
    try:
        with default_storage.open(artifact.blob, "rb") as handle:
            return handle.read()
    except (FileNotFoundError, OSError) as exc:
        raise ArtifactMissing(f"{artifact.uri}: blob {artifact.blob} is gone ({exc})") from exc


def verify(uri: str, expected_sha256: str) -> Check:
    """Does the artifact still exist and hash to what the manifest recorded?"""
    try:
        artifact = get(uri)
        data = _read_blob(artifact)
    except ArtifactMissing as exc:
        return Check(uri, False, str(exc))
    actual = hashlib.sha256(data).hexdigest()
    if artifact.sha256 != expected_sha256:
        return Check(uri, False, f"{uri} is recorded with a different sha256 than the manifest")
    if actual != expected_sha256:
        return Check(
            uri,
            False,
            f"{uri} was altered: its blob hashes to {actual[:12]}…, "
            f"the manifest says {expected_sha256[:12]}…",
        )
    return Check(uri, True)
