"""A connection the server (or PgBouncer in front of it) refuses for good is
reported as StoreRefusedError, at once, on every call until a connect
succeeds: not as a pool timeout on the calls that arrive while the pool
waits out its backoff between background retries (6 of 15 calls were
refusals before). Once the cause is fixed, the next call works."""

from __future__ import annotations

import secrets
import time

import pytest

import onceonly
from onceonly_cli.local.scratch import create_database, drop_database
from tests.support.servers.pgbouncer import PgBouncer
from tests.support.stores.refusals import set_up_once_seen

TIMEOUT = 2.0  # the store's bound: a pool timeout would take TIMEOUT/2
FAST = TIMEOUT / 4  # a refusal comes back in milliseconds (a connect to 127.0.0.1)
CALLS = 15
FIXED_WITHIN = 25.0


@pytest.mark.parametrize("through_pgbouncer", [True, False], ids=["pgbouncer", "direct"])
def test_every_call_is_refused_at_once_until_the_database_exists(
        postgres_server_url: str, pgbouncer: PgBouncer, through_pgbouncer: bool) -> None:
    name = f"onceonly_late_{secrets.token_hex(4)}"
    url = f"{postgres_server_url.rsplit('/', 1)[0]}/{name}"
    url = pgbouncer.url(url, timeout=f"{TIMEOUT:g}") if through_pgbouncer else f"{url}?timeout={TIMEOUT:g}"
    store = onceonly.connect(url)
    outcomes: list[str] = []
    try:
        for n in range(CALLS):
            started = time.monotonic()
            try:
                store.acquire("never-granted", ttl=30)
                outcomes.append("granted")
            except onceonly.StoreRefusedError as exc:
                assert f'"{name}" does not exist' in str(exc) or name in str(exc)
                outcomes.append("refused" if time.monotonic() - started < FAST else "refused late")
            except onceonly.StoreUnavailableError as exc:
                outcomes.append(f"unavailable: {exc}")
            time.sleep((n % 4) * TIMEOUT / 8)  # calls spread over the pool's retry backoff
        assert outcomes == ["refused"] * CALLS
        create_database(postgres_server_url, name)
        # Seen once a background connect gets through: at once direct; through
        # PgBouncer after its server_login_retry (15 s by default) has passed.
        set_up_once_seen(store, within=FIXED_WITHIN, poll=0.1)
        assert store.acquire("granted", ttl=30) is not None
    finally:
        store.close()
        drop_database(postgres_server_url, name)
