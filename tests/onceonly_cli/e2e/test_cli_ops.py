"""`onceonly invoke` for every function of template.yaml with its sample event,
and `onceonly status` / `onceonly redrive` on a database of their own."""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

import onceonly
from onceonly_cli.local.template import find_function, function_ids, load_template
from onceonly_cli.testing.fake_payments import FakePayments
from onceonly_cli.testing.receiver import WebhookReceiver
from tests.support.cli.cli_support import REPO_ROOT, one_line_error, run_cli
from tests.support.deploy.cfn_response import ResponseUrl
from tests.support.servers.scratch import scratch_database

TEMPLATE = REPO_ROOT / "template.yaml"


@pytest.fixture(scope="module")
def fresh_database(postgres_url: str) -> Iterator[str]:
    """A database of its own on the test server, dropped afterwards."""
    name = f"onceonly_cli_{secrets.token_hex(4)}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = postgres_url.rsplit("/", 1)[0] + "/" + name
    from onceonly_app.db.migrate import migrate

    migrate(url)
    yield url
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def _functions() -> list[str]:
    return function_ids(load_template(TEMPLATE))


@pytest.mark.parametrize("logical_id", _functions())
def test_invoke_runs_every_template_function_with_its_sample_event(
    logical_id: str, fresh_database: str, moto_endpoint: str, tmp_path: Path
) -> None:
    import boto3

    spec = find_function(TEMPLATE, logical_id)
    event = REPO_ROOT / "events" / f"{spec.code_dir.name}.json"
    assert event.exists(), f"no sample event {event} for {logical_id}"
    sqs = boto3.client("sqs", endpoint_url=moto_endpoint, region_name="us-east-1")
    queue_url = sqs.create_queue(QueueName="webhook-events")["QueueUrl"]
    boto3.client("ses", endpoint_url=moto_endpoint, region_name="us-east-1").verify_email_identity(
        EmailAddress="billing@example.com")
    with FakePayments() as payments, WebhookReceiver() as receiver:
        for record in json.loads(event.read_text()).get("Records", []):
            webhook_id = json.loads(record["body"])["webhook_id"]
            secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
            with psycopg.connect(fresh_database, autocommit=True) as conn:
                conn.execute("INSERT INTO webhook_subscriptions (id, tenant_id, url, secret) VALUES (%s, %s, %s, %s) "
                             "ON CONFLICT (id) DO UPDATE SET url = EXCLUDED.url",
                             (webhook_id, json.loads(record["body"])["tenant_id"], receiver.endpoint("hook", secret),
                              secret))
        env_vars = tmp_path / "env.json"
        env_vars.write_text(json.dumps({"Parameters": {
            "AWS_ENDPOINT_URL_SES": moto_endpoint, "AWS_ENDPOINT_URL_SQS": moto_endpoint,
            "SES_FROM_ADDRESS": "billing@example.com", "WEBHOOK_QUEUE_URL": queue_url,
            "PAYMENTS_API_URL": payments.url, "WEBHOOK_ALLOW_HTTP_HOSTS": "127.0.0.1",
            "PAYMENTS_ACCEPTED_ASSETS": f"USD=USD:{payments.issuer}",
        }}))
        with ResponseUrl() as cloudformation:
            if logical_id == "SchemaMigrationFunction":  # its answer goes to CloudFormation's ResponseURL
                event = tmp_path / "schema_migration.json"
                event.write_text(json.dumps({**json.loads((REPO_ROOT / "events" / event.name).read_text()),
                                             "ResponseURL": cloudformation.url}))
            result = run_cli("invoke", logical_id, "--event", str(event), "--env-vars", str(env_vars),
                             "--database", fresh_database, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    if logical_id == "SchemaMigrationFunction":
        assert [a["Status"] for a in cloudformation.answers] == ["SUCCESS"], cloudformation.answers
    response = json.loads(result.stdout)
    assert isinstance(response, dict)
    if logical_id == "WebhookDispatchFunction":
        assert response == {"batchItemFailures": []}
        assert sum(receiver.successes().values()) >= 1  # a signed request reached the receiver


def test_a_failing_scheduled_run_emits_ticks_failed(postgres_server_url: str, redis_url: str) -> None:
    """Lambda retries the failed invocation; the metric shows each failed try
    (the alarm on exhausted retries sits on the on-failure destination)."""
    with scratch_database(postgres_server_url, "onceonly_unmigrated") as unmigrated:
        # no migrations: the job's first statement fails (job_ticks does not exist)
        result = run_cli("invoke", "OverdueInvoicesFunction", "--event", str(REPO_ROOT / "events" /
                         "overdue_invoices.json"), "--database", unmigrated, "--store", redis_url, "--no-setup",
                         timeout=120)
    assert result.returncode != 0 and "UndefinedTable" in result.stderr, result.stderr[-3000:]
    emitted = [json.loads(line) for line in result.stderr.splitlines() if line.startswith('{"_aws"')]
    counts = {name: blob[name] for blob in emitted for name in blob if name.startswith("ticks_")}
    assert counts == {"ticks_failed": [1.0]}, emitted


def _seed_dead_delivery_tick_and_poller(url: str) -> tuple[str, str, str]:
    delivery = f"msg_{secrets.token_hex(16)}"
    job = f"job-{secrets.token_hex(3)}"
    poller_job = f"watcher-{secrets.token_hex(3)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO webhook_subscriptions (id, tenant_id, url, secret) VALUES ('wh-ops', 't-ops', "
                     "'http://127.0.0.1:9/x', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw') ON CONFLICT DO NOTHING")
        conn.execute("INSERT INTO webhook_deliveries (id, webhook_id, event_id, event_type, payload, status, "
                     "attempts, last_error) VALUES (%s, 'wh-ops', %s, 'x.y', '{}', 'dead', 4, 'HTTP 500')",
                     (delivery, f"evt-{delivery}"))
        conn.execute("INSERT INTO job_ticks (job, scheduled_time, fence_token) VALUES (%s, %s, 1)",
                     (job, "2031-05-01T02:00:00Z"))
        conn.execute("INSERT INTO payment_cursors (poller, cursor, fence_token) VALUES (%s, 'c-77', 1)",
                     (poller_job,))
    store = onceonly.connect(url)
    store.setup()
    from datetime import UTC, datetime

    from onceonly.scheduled import tick_lock_name
    from onceonly_app.billing.payment_watcher import poller_lease_name

    lease = store.acquire(tick_lock_name(job, datetime(2031, 5, 1, 2, tzinfo=UTC)), ttl=300)
    poller = store.acquire(poller_lease_name(poller_job), ttl=300)
    assert lease is not None and poller is not None
    store.close()
    return delivery, lease.owner, poller.owner


def test_status_shows_queue_dead_letters_and_held_tick_leases(fresh_database: str) -> None:
    run_cli("invoke", "WebhookRetryFunction", "-e", "events/webhook_retry.json", "--database", fresh_database)
    delivery, owner, poller_owner = _seed_dead_delivery_tick_and_poller(fresh_database)
    result = run_cli("status", "--database", fresh_database, env={"COLUMNS": "250", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert "due queue 'webhook-retries'" in result.stdout
    assert delivery in result.stdout
    assert owner in result.stdout and "HELD until" in result.stdout
    assert "job-wide poller leases" in result.stdout and poller_owner in result.stdout and "c-77" in result.stdout

    redriven = run_cli("redrive", "--delivery", delivery, "--database", fresh_database,
                       env={"COLUMNS": "250", "PATH": "/usr/bin:/bin"})
    assert redriven.returncode == 0, redriven.stderr
    assert delivery in redriven.stdout
    with psycopg.connect(fresh_database) as conn:
        status, generation = conn.execute("SELECT status, generation FROM webhook_deliveries WHERE id = %s",
                                          (delivery,)).fetchone()
        queued = conn.execute("SELECT count(*) FROM onceonly_queue WHERE item_id = %s", (delivery,)).fetchone()
    assert (status, generation, queued[0]) == ("retrying", 1, 1)
    again = run_cli("redrive", "--delivery", delivery, "--database", fresh_database)
    assert again.returncode == 1 and "not dead-lettered" in again.stderr


def test_status_json_holds_what_the_tables_show(fresh_database: str) -> None:
    delivery, owner, poller_owner = _seed_dead_delivery_tick_and_poller(fresh_database)
    result = run_cli("status", "--json", "--database", fresh_database)
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert status["queue"]["name"] == "webhook-retries" and status["queue"]["total"] >= 0
    assert status["dead_letters"]["total"] >= 1
    assert delivery in {row["delivery"] for row in status["dead_letters"]["shown"]}
    held = [job["lease"] for job in status["jobs"] if job["lease"]["owner"] == owner]
    assert len(held) == 1 and held[0]["state"] == "held" and held[0]["token"] == 1
    (poller,) = [p for p in status["pollers"] if p["lease"]["owner"] == poller_owner]
    assert poller["cursor"] == "c-77" and poller["lease"]["state"] == "held"


def test_prune_deletes_expired_tick_records_and_keeps_the_rest(fresh_database: str) -> None:
    from tests.support.stores.expiry import raw_lease_record, wait_past_keep

    store = onceonly.connect(fresh_database)
    store.setup()
    run = secrets.token_hex(3)
    expiring = [f"tick:prune-{run}:{i}" for i in range(3)]
    for name in [*expiring, f"poller:prune-{run}", f"tick:prune-{run}:fresh"]:
        lease = store.acquire(name, ttl=30)
        assert lease is not None
        keep = 600 if name.endswith("fresh") else 0.3
        assert store.complete(lease, keep=keep, expire=not name.startswith("poller"))
    store.close()
    wait_past_keep(time.time() + 0.3)
    result = run_cli("prune", "--database", fresh_database, "--batch", "2")
    assert result.returncode == 0, result.stderr
    assert "pruned 3 expired tick records" in result.stdout
    assert [n for n in expiring if raw_lease_record(fresh_database, n) is not None] == []
    assert raw_lease_record(fresh_database, f"poller:prune-{run}") is not None  # long-lived: kept
    assert raw_lease_record(fresh_database, f"tick:prune-{run}:fresh") is not None  # within keep


def test_prune_on_a_self_expiring_store_says_so(fresh_database: str, redis_url: str) -> None:
    result = run_cli("prune", "--database", fresh_database, "--store", redis_url)
    assert result.returncode == 0, result.stderr
    assert "Redis expires completed tick records itself" in result.stdout


@pytest.mark.parametrize(("args", "expected"), [
    (["status", "--store", "dynamodb"], "a fresh DynamoDB stand-in holds nothing to read"),
    (["status", "--store", "all"], "--store all is for simulate only"),
    (["invoke", "WebhookRetryFunction", "-e", "events/webhook_retry.json", "--store", "all"],
     "--store all is for simulate only"),
])
def test_store_keywords_that_make_no_sense_are_one_line_errors(
        fresh_database: str, args: list[str], expected: str) -> None:
    line = one_line_error(run_cli(*args, "--database", fresh_database))
    assert expected in line


def test_invoke_on_a_dynamodb_standin_runs_and_stops_it(fresh_database: str) -> None:
    """--store dynamodb: a dynalite started for the invocation, gone afterwards."""
    result = run_cli("invoke", "WebhookRetryFunction", "-e", "events/webhook_retry.json", "--store", "dynamodb",
                     "--database", fresh_database, env={k: v for k, v in os.environ.items()
                                                         if not k.startswith("AWS_")})
    assert result.returncode == 0, result.stderr[-2000:]
    note = next(line for line in result.stderr.splitlines() if "throwaway local store" in line)
    endpoint = re.search(r"endpoint_url=http://127\.0\.0\.1:(\d+)", note)
    assert endpoint is not None, note
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", int(endpoint.group(1)))) != 0, "the stand-in is still listening"


def test_commands_without_database_never_reach_the_default_one() -> None:
    """The e2e harness points the fallback at a closed port: a test that forgets
    --database fails here instead of writing to the user's database."""
    line = one_line_error(run_cli("status"))
    assert "no-fallback-in-tests" in line and "unreachable" in line
