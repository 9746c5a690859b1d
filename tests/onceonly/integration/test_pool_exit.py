"""A process that leaves the library's psycopg pools open still exits at once.
Since Python 3.13 an unclosed pool's ``__del__`` joins its worker threads
during interpreter shutdown and can hang there (https://github.com/psycopg/psycopg/issues/930); the pools
bounded_pool builds are closed by an atexit hook first. On the functions'
runtime (python3.13, which CI runs) this test hangs without that hook."""

from __future__ import annotations

import subprocess
import sys
import textwrap

EXIT_LIMIT = 20.0  # seconds; a process with its pools closed exits in well under one

CHILD = textwrap.dedent("""
    import sys
    import onceonly
    from onceonly.postgres import bounded_pool

    store = onceonly.connect(sys.argv[1])           # the coordination store's pool, as a handler builds it
    store.setup()                                    # round trips on its pool
    pool = bounded_pool(sys.argv[1], name="db", max_size=2, autocommit=False)  # the domain pool
    with pool.connection() as conn:
        conn.execute("SELECT 1")
    print("done", flush=True)                       # neither is closed: exit must still be prompt
""")


def test_a_process_that_never_closed_its_pools_exits_promptly(postgres_url: str) -> None:
    try:
        result = subprocess.run([sys.executable, "-c", CHILD, postgres_url], capture_output=True, text=True,
                                timeout=EXIT_LIMIT)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the process did not exit within {EXIT_LIMIT:g} s with its pools open "
                             f"(Python {sys.version_info.major}.{sys.version_info.minor})") from exc
    assert result.returncode == 0 and result.stdout.strip() == "done", result.stderr
