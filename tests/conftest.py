"""Fixtures shared by every test: real databases, a real app over HTTP, services that must exist.

A missing PostgreSQL or Redis skips the tests that need it locally and fails them under CI=true.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sqlite3
import uuid
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from _pytest.nodeid import coerce_node_id
from litestar import Litestar
from litestar.testing import TestClient
from psycopg import OperationalError

from control_plane.app import create_app, rebind
from control_plane.db import migrate
from control_plane.entry.bootstrap import IssuedKey
from control_plane.settings import Settings
from tests import processes

POSTGRES_URL = os.environ.get("VANE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("VANE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
REPO = Path(__file__).resolve().parents[1]


def unavailable(what: str) -> None:
    """Skip locally, fail under CI: a missing service must never pass silently there."""
    if IN_CI:
        pytest.fail(f"{what} is required under CI=true", pytrace=False)
    pytest.skip(f"{what} is not available")


def require_redis() -> None:
    """Redis at ``REDIS_URL`` answers, or the test is skipped locally and fails under CI."""
    try:
        import redis

        redis.Redis.from_url(REDIS_URL).ping()
    except Exception:
        unavailable(f"Redis at {REDIS_URL}")


class PostgresDatabases:
    """Migrated databases for tests, each as the template left it (CREATE DATABASE … TEMPLATE …).

    A database a test is done with is emptied and handed to the next test of this worker
    (``reuse``) instead of dropped and cloned again: emptying is milliseconds, a clone and a drop
    a quarter of a second. Emptied means as the template was: every other connection to it
    ended, every table's rows deleted and the template's own (``alembic_version``, the
    deployment, the first ingest generation) copied back, every sequence where the template's
    stood. A database whose schema a test changed (a migration test) is dropped instead."""

    def __init__(self, admin_url: str) -> None:
        import psycopg
        from psycopg.rows import TupleRow

        self.admin_url = admin_url
        self._connect: Callable[[], psycopg.Connection[TupleRow]] = lambda: psycopg.connect(
            admin_url, autocommit=True, connect_timeout=3
        )
        self._connect().close()  # psycopg.OperationalError: the server is not there
        self.prefix = f"vane_t{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self.template = f"{self.prefix}_tpl"
        self._counter = itertools.count()
        self._created: list[str] = []
        self._free: list[str] = []
        with self._connect() as conn:
            conn.execute(f'CREATE DATABASE "{self.template}"')
        self._created.append(self.template)
        migrate.upgrade(self.url_of(self.template))
        self._state = self._read_state(self.url_of(self.template))

    def url_of(self, name: str) -> str:
        base, _, _ = self.admin_url.rpartition("/")
        return f"{base}/{name}"

    @staticmethod
    def _read_state(url: str) -> tuple[str, list[str], dict[str, list[tuple[Any, ...]]], list[str]]:
        """The template's schema (a digest), tables, rows of the tables that have any, and the
        statements that put its sequences back."""
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            schema = PostgresDatabases._schema(conn)
            tables = [
                str(row[0])
                for row in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
                )
            ]
            rows = {
                table: found
                for table in tables
                if (found := conn.execute(f'SELECT * FROM "{table}"').fetchall())
            }
            sequences = []
            for (name,) in conn.execute(
                "SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'"
            ).fetchall():
                last, called = conn.execute(
                    f'SELECT last_value, is_called FROM "{name}"'
                ).fetchone() or (1, False)
                sequences.append(f"SELECT setval('\"{name}\"', {last}, {called})")
        return schema, tables, rows, sequences

    @staticmethod
    def _schema(conn: Any) -> str:
        row = conn.execute(
            """SELECT md5(coalesce(string_agg(x, ',' ORDER BY x), '')) FROM (
                 SELECT table_name || '.' || column_name || ':' || data_type AS x
                   FROM information_schema.columns WHERE table_schema = 'public'
                 UNION ALL SELECT indexname FROM pg_indexes WHERE schemaname = 'public'
                 UNION ALL SELECT 'v' || version_num FROM alembic_version) AS parts"""
        ).fetchone()
        return str(row[0])

    def new(self) -> str:
        if self._free:
            return self.url_of(self._free.pop())
        name = f"{self.prefix}_{next(self._counter)}"
        with self._connect() as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        self._created.append(name)
        return self.url_of(name)

    def reuse(self, url: str) -> None:
        """Empty the database at ``url`` for the next test, or drop it if it cannot be."""
        name = url.rpartition("/")[2]
        try:
            self._empty(name)
        except Exception:
            self.drop(url)
            return
        self._free.append(name)

    def _empty(self, name: str) -> None:
        import psycopg

        schema, tables, rows, sequences = self._state
        with self._connect() as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
        with psycopg.connect(self.url_of(name)) as conn:
            conn.execute("SET lock_timeout = '5s'")
            if self._schema(conn) != schema:
                raise RuntimeError(f"{name}: the test changed its schema")
            conn.execute("SET session_replication_role = replica")  # no triggers, no FK checks
            for table in tables:
                conn.execute(f'DELETE FROM "{table}"')
            with conn.cursor() as cursor:
                for table, found in rows.items():
                    marks = ", ".join(["%s"] * len(found[0]))
                    cursor.executemany(f'INSERT INTO "{table}" VALUES ({marks})', found)
            for statement in sequences:
                conn.execute(statement)

    def drop(self, url: str) -> None:
        name = url.rpartition("/")[2]
        with self._connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self._created.remove(name)

    def close(self) -> None:
        with self._connect() as conn:
            for name in reversed(self._created):
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


ALONE = ("chaos",)
"""Marks whose tests run one at a time on one pytest-xdist worker (``make test`` runs
``--dist loadgroup``): the chaos tests each load a cluster of real processes and measure it."""


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(defs and defs[-1].scope == "module" for defs in info.name2fixturedefs.values())


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Groups for ``--dist loadgroup``: the chaos tests in one; the tests of a module that share a
    module-scoped fixture (a site of real processes, a browser's pages, a crowded project) in one
    per module, so that the fixture is set up once, not once on each worker.

    pytest-xdist 3.8 names a test's group by rewriting ``item._nodeid``, which pytest 9 no longer
    reads (a node's id is ``item._id``), so its groups never formed: the id is suffixed here."""
    grouping = bool(getattr(config.option, "loadgroup", False))  # set on pytest-xdist workers
    for item in items:
        group = next((name for name in ALONE if item.get_closest_marker(name)), None)
        if group is None and _shares_a_module_fixture(item):
            group = "module-" + item.nodeid.split("::")[0].replace("/", "-")
        if group is None:
            continue
        item.add_marker(pytest.mark.xdist_group(group))
        if grouping and hasattr(item, "_id"):
            item._id = coerce_node_id(f"{item.nodeid}@{group}")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Processes still running (a module's) stay listed; those of earlier tests are forgotten."""
    processes.STARTED[:] = [p for p in processes.STARTED if p.popen.poll() is None]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test's report ends with what its processes printed last (a CI failure then says
    what the control planes and relays saw, not only what the test did)."""
    report = yield
    if report.failed:
        for process in processes.STARTED:
            argv = " ".join(process.argv[3:])[:120]
            report.sections.append((f"last output of {argv}", "\n".join(process.lines[-60:])))
    return report


@pytest.fixture(scope="session")
def postgres_databases() -> Iterator[PostgresDatabases | None]:
    try:
        databases = PostgresDatabases(POSTGRES_URL)
    except OperationalError:  # not reachable; a failing migration is an error, not a skip
        yield None
        return
    yield databases
    databases.close()


@contextmanager
def fresh_postgres(databases: PostgresDatabases | None) -> Iterator[str]:
    """A migrated PostgreSQL database as the template left it, emptied for the next test
    afterwards (skip, or fail under CI, without)."""
    if databases is None:
        unavailable(f"PostgreSQL at {POSTGRES_URL}")
    assert databases is not None
    url = databases.new()
    try:
        yield url
    finally:
        databases.reuse(url)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated SQLite file per test session, copied for each test (as PostgreSQL clones a
    template database): the migrations run once, not once per test."""
    path = tmp_path_factory.mktemp("sqlite-template") / "vane.db"
    migrate.upgrade(f"sqlite:///{path}")
    with sqlite3.connect(path) as connection:  # everything in the main file before copying it
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    postgres_databases: PostgresDatabases | None,
    sqlite_template: Path,
) -> Iterator[str]:
    """A new, empty, migrated database: a SQLite file, or a PostgreSQL database of its own."""
    if request.param == "sqlite":
        shutil.copyfile(sqlite_template, tmp_path / "vane.db")
        yield f"sqlite:///{tmp_path / 'vane.db'}"
        return
    with fresh_postgres(postgres_databases) as url:
        yield url


@pytest.fixture
def postgres_url(postgres_databases: PostgresDatabases | None) -> Iterator[str]:
    """A new migrated PostgreSQL database only (for tests that need several processes on it)."""
    with fresh_postgres(postgres_databases) as url:
        yield url


@dataclass
class Api:
    """An HTTP client for the control plane holding the first keys of each kind."""

    client: TestClient[Any]
    keys: dict[str, str]
    database_url: str
    key: str = field(init=False)

    def __post_init__(self) -> None:
        self.key = self.keys["management"]

    def headers(self, key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"} if key else {}

    def request(self, method: str, path: str, *, key: str | None = "", **kwargs: Any) -> Any:
        use = self.key if key == "" else key
        headers = {**self.headers(use), **kwargs.pop("headers", {})}
        return self.client.request(method, "/api/v1" + path, headers=headers, **kwargs)

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, json: Any = None, **kwargs: Any) -> Any:
        return self.request("POST", path, json=json, **kwargs)

    def put(self, path: str, json: Any = None, **kwargs: Any) -> Any:
        return self.request("PUT", path, json=json, **kwargs)

    def patch(self, path: str, json: Any = None, **kwargs: Any) -> Any:
        return self.request("PATCH", path, json=json, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Any:
        return self.request("DELETE", path, **kwargs)


@contextmanager
def serve(database_url: str, app: Litestar | None = None) -> Iterator[Api]:
    """A control plane on ``database_url``, started, with a client holding its first keys:
    ``app`` rebound to it (``control_plane.app.rebind``), or a new app."""
    settings = Settings(database_url=database_url)
    if app is None:
        app = create_app(settings)
    else:
        rebind(app, settings)
    with TestClient(app, raise_server_exceptions=False) as client:
        issued: list[IssuedKey] = app.state.issued_keys
        keys = {key.kind.value: key.token for key in issued}
        yield Api(client=client, keys=keys, database_url=database_url)


_SHARED: list[Litestar] = []
"""This process's one app for the ``api`` fixture, built once (its construction was most of a
test's start: about 0.2 s of 0.3 on SQLite) and rebound to each test's own new database, so
every test still starts its own control plane on its own database."""


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    if not _SHARED:
        _SHARED.append(create_app(Settings(database_url=database_url)))
    app = _SHARED.pop()  # taken while in use: a test holding two at once builds another
    try:
        with serve(database_url, app) as api:
            yield api
    finally:
        _SHARED.append(app)


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def module_database_url(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    postgres_databases: PostgresDatabases | None,
    sqlite_template: Path,
) -> Iterator[str]:
    """As ``database_url``, one for a whole test module (see ``refusing_api``)."""
    if request.param == "sqlite":
        path = tmp_path_factory.mktemp("module-db") / "vane.db"
        shutil.copyfile(sqlite_template, path)
        yield f"sqlite:///{path}"
        return
    with fresh_postgres(postgres_databases) as url:
        yield url


@pytest.fixture(scope="module")
def refusing_api(module_database_url: str) -> Iterator[Api]:
    """One control plane for a module's validation tests, on SQLite and on PostgreSQL.

    Only for tests whose every request is one the API refuses (or a read): they neither need a
    fresh database nor leave anything in it, so they can share one; each still asserts that
    nothing was stored. A test that writes successfully takes ``api``, an app of its own."""
    with serve(module_database_url) as api:
        yield api
