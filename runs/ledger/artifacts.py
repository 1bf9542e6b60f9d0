"""Content-addressed artifacts behind versioned names (artifact://facts/v3).

Blobs live in Django's default storage under their sha256, so identical content is stored
once and an S3-compatible backend is a STORAGES setting, not code. The Artifact row names a
version of a logical name and records the hash the blob must still have.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connections

from runs.ledger.sql import boundary_for
from runs.models import ARTIFACT_URI, Artifact, Run


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
    match = ARTIFACT_URI.match(uri or "")
    if not match:
        raise ArtifactMissing(f"not an artifact uri: {uri!r}")
    return match["name"], int(match["version"])


def _digest_of(path: str) -> str:
    """The sha256 of the blob at `path`, read in chunks (OSError when it cannot be read)."""
    with default_storage.open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _blob_holds(path: str, digest: str) -> bool:
    """Does the blob at `path` exist and still hash to `digest`?"""
    if not default_storage.exists(path):
        return False
    try:
        return _digest_of(path) == digest
    except OSError:
        return False


def save_blob(data: bytes) -> tuple[str, str]:
    """Store `data` content-addressed: its sha256 and the blob's path in storage."""
    digest = hashlib.sha256(data).hexdigest()
    path = blob_path(digest)
    if not _blob_holds(path, digest):
        # Two writers racing on the same content may both save; storage then renames the
        # second copy, which is still the same bytes, so either name is a valid blob. A blob
        # that exists but was altered is left as the evidence its old rows point to, and this
        # row gets a fresh copy under a new name: a re-executed stage must not seal a
        # checkpoint on bytes that already fail verify().
        path = default_storage.save(path, ContentFile(data))
    return digest, path


def store(name: str, data: bytes, content_type: str, *, run: Run | None = None) -> Artifact:
    """Store `data` as the next version of `name`."""
    digest, path = save_blob(data)
    db = connections[DEFAULT_DB_ALIAS]
    for _ in range(5):
        artifact = Artifact(
            name=name,
            sha256=digest,
            size=len(data),
            content_type=content_type,
            blob=path,
            run=run,
        )
        with boundary_for(db).cursor(db) as cursor:
            if boundary_for(db).insert_next_version(cursor, db, artifact):
                return artifact
        # Another writer took this version number (nothing was written): take the next one.
    raise IntegrityError(f"could not allocate a version for artifact {name!r}")


def first_version(name: str, data: bytes, content_type: str, *, run: Run) -> Artifact:
    """`data` stored as version 1 of `name`, its row not written: the row rides with the
    checkpoint that names it (checkpoints.write_checkpoint(artifacts=…)), whose write fails
    with nothing written if the version was taken. For a name written once, such as a stage
    output of a run never resumed (the engine's)."""
    digest, path = save_blob(data)
    return Artifact(
        name=name,
        version=1,
        sha256=digest,
        size=len(data),
        content_type=content_type,
        blob=path,
        run=run,
    )


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
        return artifact.content()
    except OSError as exc:
        raise ArtifactMissing(f"{artifact.uri}: blob {artifact.blob} is gone ({exc})") from exc


# One verification of an artifact against the manifest that records it, for the engine (a
# stage reading its upstream), the planner (a checkpoint to build on) and the pages: the row
# exists, it records the manifest's hash, and its blob still hashes to it.


def _mismatch(uri: str, expected: str, artifact: Artifact, digest: str) -> str:
    if artifact.sha256 != expected:
        return f"{uri} is recorded with a different sha256 than the manifest"
    if digest != expected:
        return (
            f"{uri} was altered: its blob hashes to {digest[:12]}…, "
            f"the manifest says {expected[:12]}…"
        )
    return ""


def check(uri: str, expected_sha256: str, artifact: Artifact | None) -> Check:
    """The verification, on a row the caller has loaded (None: there is none), so a page
    listing many artifacts needs no query per artifact."""
    if artifact is None:
        return Check(uri, False, f"{uri} is not in the artifact table")
    try:
        digest = _digest_of(artifact.blob)
    except OSError as exc:
        return Check(uri, False, f"{uri}: blob {artifact.blob} is gone ({exc})")
    problem = _mismatch(uri, expected_sha256, artifact, digest)
    return Check(uri, not problem, problem)


def verify(uri: str, expected_sha256: str) -> Check:
    """Does the artifact still exist and hash to what the manifest recorded?"""
    try:
        name, version = parse_uri(uri)
    except ArtifactMissing as exc:
        return Check(uri, False, str(exc))
    return check(uri, expected_sha256, Artifact.objects.filter(name=name, version=version).first())


def read_verified(uri: str, expected_sha256: str) -> bytes:
    """The artifact's bytes, if they still are what the manifest recorded; ArtifactMissing
    saying what is wrong otherwise."""
    artifact = get(uri)
    data = _read_blob(artifact)
    problem = _mismatch(uri, expected_sha256, artifact, hashlib.sha256(data).hexdigest())
    if problem:
        raise ArtifactMissing(problem)
    return data
