"""Content-addressed artifacts behind versioned uris, and verify() that re-hashes them."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from django.db import transaction

from runs.ledger import artifacts
from runs.ledger.sql import boundary_for
from runs.models import Artifact, ImmutableRowError


@pytest.fixture
def media(db, settings, tmp_path) -> Path:
    # A private storage root: these tests alter and delete blobs, and blobs are shared by
    # identical content, so they must never touch another test's files.
    settings.MEDIA_ROOT = tmp_path
    return tmp_path


def blob_file(media: Path, artifact: Artifact) -> Path:
    return media / artifact.blob


def test_store_gives_the_next_version_of_a_name(media):
    first = artifacts.store("facts", b"one", "application/json")
    second = artifacts.store("facts", b"two", "application/json")
    assert (first.uri, second.uri) == ("artifact://facts/v1", "artifact://facts/v2")
    assert artifacts.read("artifact://facts/v1") == b"one"
    assert artifacts.read("artifact://facts/v2") == b"two"


def test_a_stored_artifact_is_the_row_the_database_holds(media):
    stored = artifacts.store("facts", b"one", "application/json")
    row = Artifact.objects.get(pk=stored.pk)
    assert (row.name, row.version, row.sha256, row.size, row.blob, row.created_at) == (
        stored.name,
        stored.version,
        stored.sha256,
        stored.size,
        stored.blob,
        stored.created_at,
    )


def test_a_version_taken_in_the_same_transaction_writes_nothing_and_the_next_one_is_used(media):
    with transaction.atomic():
        first = artifacts.store("facts", b"one", "application/json")
        # The insert's own conflict (a duplicate delivery storing the same name at once):
        # nothing written, and the transaction still takes statements, with no savepoint.
        clash = Artifact(
            name="facts", sha256=first.sha256, size=3, content_type="x", blob=first.blob
        )
        db = transaction.get_connection()
        with db.cursor() as cursor:
            sql = boundary_for(db)
            taken = sql.run_sql.first_row(
                cursor,
                sql.next_version.replace("COALESCE(MAX", "0 * COALESCE(MAX"),
                ["facts", first.sha256, 3, "x", first.blob, None, "facts"],
            )
        assert taken is None
        second = artifacts.store("facts", b"two", "application/json")
    assert clash.pk is None
    assert [a.version for a in Artifact.objects.filter(name="facts").order_by("version")] == [1, 2]
    assert second.version == 2


def test_identical_content_is_stored_as_one_blob(media):
    a = artifacts.store("image/a", b"same bytes", "image/svg+xml")
    b = artifacts.store("image/b", b"same bytes", "image/svg+xml")
    assert a.blob == b.blob == artifacts.blob_path(hashlib.sha256(b"same bytes").hexdigest())
    assert len([p for p in media.rglob("*") if p.is_file()]) == 1


def test_verify_accepts_an_untouched_artifact(media):
    artifact = artifacts.store("draft", b"# title", "text/markdown")
    assert artifacts.verify(artifact.uri, artifact.sha256).ok


def test_verify_reports_a_blob_altered_on_disk(media):
    artifact = artifacts.store("draft", b"# title", "text/markdown")
    blob_file(media, artifact).write_bytes(b"# tampered")
    check = artifacts.verify(artifact.uri, artifact.sha256)
    assert check.ok is False
    assert "was altered" in check.reason


def test_verify_reports_a_missing_blob(media):
    artifact = artifacts.store("draft", b"# title", "text/markdown")
    blob_file(media, artifact).unlink()
    check = artifacts.verify(artifact.uri, artifact.sha256)
    assert check.ok is False
    assert "is gone" in check.reason


def test_verify_reports_a_manifest_hash_that_differs_from_the_record(media):
    artifact = artifacts.store("draft", b"# title", "text/markdown")
    check = artifacts.verify(artifact.uri, hashlib.sha256(b"other").hexdigest())
    assert check.ok is False
    assert "different sha256" in check.reason


def test_verify_reports_an_unknown_uri(media):
    check = artifacts.verify("artifact://draft/v9", "0" * 64)
    assert check.ok is False
    assert "not in the artifact table" in check.reason


@pytest.mark.parametrize(
    "uri", ["facts/v3", "artifact://facts", "artifact://facts/3", "artifact://fa cts/v1", ""]
)
def test_parse_uri_rejects_what_is_not_an_artifact_uri(uri):
    with pytest.raises(artifacts.ArtifactMissing, match="not an artifact uri"):
        artifacts.parse_uri(uri)


def test_storing_identical_content_again_repairs_a_tampered_blob(media):
    original = artifacts.store("image/cover", b"<svg>cover</svg>", "image/svg+xml")
    blob_file(media, original).write_bytes(b"<svg>tampered</svg>")
    again = artifacts.store("image/cover", b"<svg>cover</svg>", "image/svg+xml")
    assert artifacts.read(again.uri) == b"<svg>cover</svg>"
    assert artifacts.verify(again.uri, again.sha256).ok
    # The altered blob stays what the old row points to: the evidence is not rewritten.
    assert not artifacts.verify(original.uri, original.sha256).ok


def test_an_artifact_row_is_append_only_in_the_orm(media):
    artifact = artifacts.store("facts", b"[]", "application/json")
    artifact.sha256 = "0" * 64
    with pytest.raises(ImmutableRowError):
        artifact.save()
    with pytest.raises(ImmutableRowError):
        Artifact.objects.filter(pk=artifact.pk).update(size=0)
    assert Artifact.objects.get(pk=artifact.pk).sha256 == hashlib.sha256(b"[]").hexdigest()
