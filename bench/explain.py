"""PostgreSQL's own account of one claim at the largest backlog: the plan of the
store's claim statement with actual row counts (EXPLAIN ANALYZE), run in a
transaction that is rolled back, so nothing is claimed."""

from __future__ import annotations

import psycopg


def claim_plan(url: str, queue: str, batch: int) -> str:
    from onceonly.postgres import STATEMENTS as SQL

    params = {"queue": queue, "owner": "bench-explain", "limit": batch, "lease": 60.0}
    try:
        with psycopg.connect(url) as conn:
            rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + SQL["claim"], params).fetchall()
            conn.rollback()
    except (KeyError, psycopg.Error) as exc:  # the store's statement changed shape: say so, measure on
        return f"(no plan: {exc})"
    return "\n".join(str(row[0]) for row in rows)
