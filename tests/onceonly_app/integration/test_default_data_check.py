"""The session check that the tests leave the user's default database alone
(conftest.default_database_left_alone) notices a change: proved here on a
scratch database, never on the user's."""

from __future__ import annotations

import psycopg

from onceonly_app.db.migrate import migrate
from tests.support.servers.default_data import changes, fingerprint
from tests.support.servers.scratch import scratch_database


def test_the_fingerprint_sees_any_row_changed_added_or_removed(postgres_server_url: str) -> None:
    with scratch_database(postgres_server_url, "onceonly_fingerprint") as url:
        migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("INSERT INTO webhook_subscriptions (id, tenant_id, url, secret) "
                         "VALUES ('wh', 't', 'http://127.0.0.1:9/', 's')")
            before = fingerprint(url)
            assert before is not None and before["public.webhook_subscriptions"][0] == 1
            assert changes(before, fingerprint(url) or {}) == []  # reading changes nothing
            conn.execute("UPDATE webhook_subscriptions SET url = 'http://127.0.0.1:10/' WHERE id = 'wh'")
            assert changes(before, fingerprint(url) or {}) == [
                "public.webhook_subscriptions: 1 rows before, 1 after, contents changed"]
            conn.execute("DELETE FROM webhook_subscriptions")
            conn.execute("CREATE TABLE stray (x int)")
            assert changes(before, fingerprint(url) or {}) == [
                "public.stray: created (0 rows)",
                "public.webhook_subscriptions: 1 rows before, 0 after, contents changed"]


def test_no_database_no_fingerprint() -> None:
    assert fingerprint("postgresql://nobody@127.0.0.1:1/absent") is None
