"""Expensive worlds built once per test process and put back for every test that starts from
them: Resumer's database, the media folder and the demo service's own state, as they were
when the world was built. A world that real workers took tens of seconds to make (the story's
crash, the fault matrix's reference run) then costs a copy.

The database is copied the way each vendor copies one cheaply, one class per vendor behind
one interface (as the ledger's SQL is): SQLite's online backup into a file beside the test
database, PostgreSQL's template database. Nothing here knows what a world holds: a fixture
hands `once()` a function that builds it and returns a JSON-able value (say, a run's primary
key), and gets that value back after each restore.

A world is built and restored only in a database that holds no user yet, so that what a test
set up before it (users, tokens) is never silently wiped by a restore, nor silently kept by a
build: request the world's fixture before the fixtures that write.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.db import connection, connections

from runs.ledger import heads


class DatabaseCopy(Protocol):
    def save(self) -> None: ...

    def restore(self) -> None: ...

    def drop(self) -> None: ...


class SQLiteCopy:
    """The test database's file, copied through SQLite's online backup (consistent with its
    write-ahead log, whatever is still in it) into a file of the world's, and back."""

    def __init__(self, name: str) -> None:
        self.live = Path(connection.settings_dict["NAME"])
        self.copy = self.live.with_name(f"{self.live.name}.world-{name}")

    def save(self) -> None:
        self._copy(self.live, self.copy)

    def restore(self) -> None:
        self._copy(self.copy, self.live)

    def drop(self) -> None:
        self.copy.unlink(missing_ok=True)

    @staticmethod
    def _copy(source: Path, target: Path) -> None:
        connections.close_all()
        src, dst = sqlite3.connect(source), sqlite3.connect(target)
        try:
            src.backup(dst)
        finally:
            src.close()
            dst.close()


class PostgreSQLTemplate:
    """The test database kept as a template database of the world's; a restore drops the test
    database and creates it again from the template (a file copy on the server)."""

    def __init__(self, name: str) -> None:
        self.live = connection.settings_dict["NAME"]
        self.template = f"{self.live}_world_{name}"

    def save(self) -> None:
        self._create(self.template, source=self.live)

    def restore(self) -> None:
        self._create(self.live, source=self.template)

    def drop(self) -> None:
        with connection._nodb_cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {connection.ops.quote_name(self.template)}")

    def _create(self, database: str, *, source: str) -> None:
        connections.close_all()
        quote = connection.ops.quote_name
        with connection._nodb_cursor() as cursor:
            # A killed worker's backend can outlive its process for a moment; a template
            # must have no session at all.
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname IN (%s, %s) AND pid <> pg_backend_pid()",
                [database, source],
            )
            cursor.execute(f"DROP DATABASE IF EXISTS {quote(database)} WITH (FORCE)")
            cursor.execute(f"CREATE DATABASE {quote(database)} TEMPLATE {quote(source)}")


def database_copy(name: str) -> DatabaseCopy:
    if connection.vendor == "postgresql":
        return PostgreSQLTemplate(name)
    return SQLiteCopy(name)


@dataclass
class Snapshot:
    database: DatabaseCopy
    media: Path
    service_state: bytes
    value: Any


_SNAPSHOTS: dict[str, Snapshot] = {}


def once(name: str, build: Callable[[], Any], service) -> Any:
    """The world `name`: built by `build()` the first time this process asks for it and
    snapshotted, put back from the snapshot every later time. Returns build()'s value. The
    caller stops every worker process before, and starts the ones its tests need after."""
    _check_no_user(name)
    snapshot = _SNAPSHOTS.get(name)
    if snapshot is None:
        value = build()
        _check_no_user(name)
        snapshot = _SNAPSHOTS[name] = _take(name, service, value)
    else:
        _restore(snapshot, service)
    return snapshot.value


def drop_all() -> None:
    """Drop every world's copy of the database, at the end of the session (the media copies
    go with this process's folder)."""
    while _SNAPSHOTS:
        _SNAPSHOTS.popitem()[1].database.drop()


def _take(name: str, service, value: Any) -> Snapshot:
    # Beside this process's media folder (tests/support/isolation.py), so it is this
    # process's alone.
    media = Path(settings.MEDIA_ROOT).parent / f"world-{name}-media"
    shutil.rmtree(media, ignore_errors=True)
    shutil.copytree(settings.MEDIA_ROOT, media)
    database = database_copy(name)
    database.save()
    return Snapshot(database, media, service.state(), value)


def _restore(snapshot: Snapshot, service) -> None:
    snapshot.database.restore()
    shutil.rmtree(settings.MEDIA_ROOT, ignore_errors=True)
    shutil.copytree(snapshot.media, settings.MEDIA_ROOT)
    service.put_state(snapshot.service_state)
    # What this process cached from the database it had before: content types are made
    # again by every flush between tests, with other ids than the world's; the run heads it
    # wrote are gone, and the world's sequences hand their run ids out again.
    ContentType.objects.clear_cache()
    heads.forget()


def _check_no_user(name: str) -> None:
    if get_user_model().objects.exists():
        raise AssertionError(
            f"the world {name!r} is built and restored in a database without users: request "
            "its fixture before the fixtures that make users"
        )
