"""The tests' PostgreSQL databases: one a test is done with is handed to the next as the template
left it (``PostgresDatabases.reuse``), or dropped when it cannot be."""

from __future__ import annotations

import psycopg
import pytest

from tests.conftest import PostgresDatabases, serve

pytestmark = pytest.mark.postgres


def _databases(found: PostgresDatabases | None) -> PostgresDatabases:
    if found is None:
        pytest.skip("PostgreSQL is not available")
    return found


def test_a_reused_database_is_as_the_template_left_it(
    postgres_databases: PostgresDatabases | None,
) -> None:
    databases = _databases(postgres_databases)
    url = databases.new()
    with serve(url) as api:
        first_keys = api.keys
        made = api.post("/flags", json={"key": "left-behind"})
        assert made.status_code == 201, made.text
    holder = psycopg.connect(url)  # a connection a test left open, in a transaction
    holder.execute("SELECT 1")
    databases.reuse(url)
    again = databases.new()
    assert again == url  # the same database, emptied
    assert databases._read_state(again) == databases._state
    with serve(again) as api:
        assert api.keys
        assert api.keys != first_keys  # a first start: its own first keys
        assert api.get("/flags").json()["flags"] == []
    with pytest.raises(psycopg.OperationalError):  # ended, so it could not hold a lock
        holder.execute("SELECT 1")
    databases.reuse(again)


def test_a_database_whose_schema_a_test_changed_is_dropped(
    postgres_databases: PostgresDatabases | None,
) -> None:
    databases = _databases(postgres_databases)
    url = databases.new()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER TABLE flags ADD COLUMN added_by_a_test integer")
    databases.reuse(url)
    again = databases.new()
    assert again != url
    with psycopg.connect(databases.admin_url, autocommit=True) as conn:
        name = url.rpartition("/")[2]
        assert (
            conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None
        )
    databases.reuse(again)
