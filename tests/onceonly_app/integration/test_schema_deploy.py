"""Schema on deploy: CloudFormation's request sequences
replayed against the real SchemaMigrationFunction on the layer `sam build`
made, in a subprocess, answering a local ResponseURL, on a real PostgreSQL:
create, update with no change, update with new migrations, a failed update
and its rollback (old properties, new code), delete, code that cannot load,
a timeout; each ends in the state CloudFormation needs. Then the migration on
a live database (lock_timeout), `onceonly migrate`, and a real function
meeting a missing schema: one log line naming the fix."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import onceonly
from onceonly_app.db import migrate
from onceonly_app.schema_step import apply_schema
from tests.support.cli.cli_support import one_line_error, run_cli
from tests.support.deploy.built_schema_function import (
    BuiltFunction,
    build,
    finished,
    finished_at,
    source_custom_resource,
)
from tests.support.deploy.cfn_response import ResponseUrl
from tests.support.servers.scratch import delete_table, scratch_database

pytestmark = pytest.mark.sam_build

EVENT = {"StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/s/1",
         "LogicalResourceId": "SchemaMigration", "ResourceType": "Custom::OnceOnlySchema"}
DATABASE_SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:onceonly-db-AbCdEf"
SHIPPED = sorted(path.name for path in migrate.MIGRATIONS_DIR.glob("*.sql"))
ANSWER_MARGIN = 10.0  # custom_resource.ANSWER_MARGIN_SECONDS: the watchdog answers this long before the timeout


def layer(version: int) -> str:
    return f"arn:aws:lambda:us-east-1:123456789012:layer:onceonly:{version}"


def properties(version: int, **changed: str) -> dict[str, str]:
    """SchemaMigration's properties as the template gives them (postgresql store, a URL secret)."""
    return {"ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:schema", "ServiceTimeout": "600",
            "LayerVersion": layer(version), "StoreKind": "postgresql", "DatabaseUrlSecretArn": DATABASE_SECRET,
            "DatabaseHost": "", "DatabaseName": "", "DatabaseProxyEndpoint": "", "StoreUrlSecretArn": "",
            "SchemaRunId": "", "NetworkPath": "", **changed}


def request(kind: str, cfn: ResponseUrl, props: dict[str, str], old: dict[str, str] | None = None) -> dict[str, Any]:
    event = {**EVENT, "RequestType": kind, "ResponseURL": cfn.url, "RequestId": str(uuid.uuid4()),
             "ResourceProperties": props}
    if kind != "Create":
        event["PhysicalResourceId"] = "onceonly-schema"
    if kind == "Update":
        event["OldResourceProperties"] = old or props
    return event


@pytest.fixture(scope="session")  # one build per worker, whatever runs between its tests
def built(tmp_path_factory: pytest.TempPathFactory) -> BuiltFunction:
    return build(tmp_path_factory.mktemp("sam"))


@pytest.fixture
def response_url() -> Iterator[ResponseUrl]:
    with ResponseUrl() as server:
        yield server


@pytest.fixture
def fresh_db(postgres_server_url: str) -> Iterator[str]:
    with scratch_database(postgres_server_url, "onceonly_schema") as url:
        yield url


def code_env(database: str, version: int) -> dict[str, str]:
    """The function's variables as the template sets them for layer ``version``
    (the URLs come directly: settings prefer them to the secrets)."""
    return {"DATABASE_URL": database, "ONCEONLY_STORE_URL": database, "DATABASE_URL_SECRET": DATABASE_SECRET,
            "ONCEONLY_LAYER_VERSION": layer(version)}


def migrations(tmp_path: Path, name: str, extra: dict[str, str]) -> Path:
    """The migrations a newer layer ships: the current ones plus ``extra``."""
    directory = tmp_path / name
    directory.mkdir()
    for path in migrate.MIGRATIONS_DIR.glob("*.sql"):
        (directory / path.name).write_text(path.read_text())
    for file_name, sql in extra.items():
        (directory / file_name).write_text(sql)
    return directory


def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {row[0] for row in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}


def _applied(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [row[0] for row in conn.execute("SELECT name FROM schema_migrations ORDER BY name")]


UPGRADE = {"9999_upgrade.sql": "CREATE TABLE upgrade_marker (id int PRIMARY KEY);"}
BAD = {"9999z_bad.sql": "CREATE TABLE bad_marker (id int PRIMARY KEY); SELECT 1/0;"}


def test_create_updates_a_failed_upgrade_its_rollback_and_delete(
        built: BuiltFunction, fresh_db: str, response_url: ResponseUrl, tmp_path: Path) -> None:
    v2 = migrations(tmp_path, "v2", UPGRADE)
    v3 = migrations(tmp_path, "v3", {**UPGRADE, **BAD})

    created = finished(built.invoke(request("Create", response_url, properties(1)), code_env(fresh_db, 1)))
    assert created["Status"] == "SUCCESS", created
    assert created["Data"]["MigrationsApplied"] == ",".join(SHIPPED) and _applied(fresh_db) == SHIPPED
    assert {"webhook_deliveries", "job_ticks", "onceonly_leases"} <= _tables(fresh_db)  # store setup() too

    # A deploy that changes SchemaRunId only (same layer): the step runs, nothing is new.
    unchanged = finished(built.invoke(request("Update", response_url, properties(1, SchemaRunId="again"),
                                              properties(1)), code_env(fresh_db, 1)))
    assert unchanged["Status"] == "SUCCESS" and unchanged["Data"]["MigrationsApplied"] == "none", unchanged

    # Layer 2 ships one more migration: only that one runs.
    upgraded = finished(built.invoke(request("Update", response_url, properties(2), properties(1)),
                                     code_env(fresh_db, 2), migrations=v2))
    assert upgraded["Status"] == "SUCCESS" and upgraded["Data"]["MigrationsApplied"] == "9999_upgrade.sql"
    assert upgraded["Data"]["SchemaVersion"] == "9999_upgrade.sql"

    # Layer 3's migration fails: FAILED with the reason, nothing of it stays.
    failed = finished(built.invoke(request("Update", response_url, properties(3), properties(2)),
                                   code_env(fresh_db, 3), migrations=v3))
    assert failed["Status"] == "FAILED" and "division by zero" in failed["Reason"], failed
    assert "bad_marker" not in _tables(fresh_db) and _applied(fresh_db) == [*SHIPPED, "9999_upgrade.sql"]

    # CloudFormation's rollback: layer 2's properties, while the function still runs layer 3.
    rollback = finished(built.invoke(request("Update", response_url, properties(2), properties(3)),
                                     code_env(fresh_db, 3), migrations=v3))
    assert rollback["Status"] == "SUCCESS" and "rollback" in rollback["Reason"], rollback
    assert rollback["Data"]["MigrationsApplied"] == "none"
    assert "bad_marker" not in _tables(fresh_db) and _applied(fresh_db) == [*SHIPPED, "9999_upgrade.sql"]

    deleted = finished(built.invoke(request("Delete", response_url, properties(2)), code_env(fresh_db, 2),
                                    migrations=v2))
    assert deleted["Status"] == "SUCCESS"
    assert {"upgrade_marker", "invoices"} <= _tables(fresh_db)  # deleting the stack keeps the data

    assert response_url.answers == [created, unchanged, upgraded, failed, rollback, deleted]  # one answer each
    assert {a["PhysicalResourceId"] for a in response_url.answers} == {"onceonly-schema"}  # never a replacement


def test_a_new_target_reruns_the_step_and_its_rollback_does_not(
        built: BuiltFunction, fresh_db: str, response_url: ResponseUrl) -> None:
    """DatabaseName changed: the function already has the new value, so the
    step runs; the rollback to the old value (function not yet reverted) does not."""
    env = {**code_env(fresh_db, 1), "DATABASE_NAME": "billing"}
    moved = finished(built.invoke(request("Update", response_url, properties(1, DatabaseName="billing"),
                                          properties(1)), env))
    assert moved["Status"] == "SUCCESS" and moved["Data"]["MigrationsApplied"] == ",".join(SHIPPED), moved
    back = finished(built.invoke(request("Update", response_url, properties(1),
                                         properties(1, DatabaseName="billing")), env))
    assert back["Status"] == "SUCCESS" and "DatabaseName" in back["Reason"], back


@pytest.mark.parametrize("broken", ["psycopg", "aws_lambda_powertools", "onceonly_app"])
def test_code_that_cannot_load_answers_every_request(
        built: BuiltFunction, fresh_db: str, response_url: ResponseUrl, broken: str) -> None:
    env = code_env(fresh_db, 2)
    create = finished(built.invoke(request("Create", response_url, properties(2)), env, broken=(broken,)))
    assert create["Status"] == "FAILED" and "did not load" in create["Reason"] and broken in create["Reason"]
    # CloudFormation deletes what failed to create: nothing was, nothing to do.
    delete = finished(built.invoke(request("Delete", response_url, properties(2)), env, broken=(broken,)))
    assert delete["Status"] == "SUCCESS"
    update = finished(built.invoke(request("Update", response_url, properties(2), properties(1)), env,
                                   broken=(broken,)))
    assert update["Status"] == "FAILED" and "did not load" in update["Reason"]
    rollback = finished(built.invoke(request("Update", response_url, properties(1), properties(2)), env,
                                     broken=(broken,)))
    assert rollback["Status"] == "SUCCESS" and "rollback" in rollback["Reason"]
    assert response_url.answers == [create, delete, update, rollback]
    assert _tables(fresh_db) == set()  # nothing ran


def test_an_unreachable_database_answers_failed_with_its_reason(
        built: BuiltFunction, fresh_db: str, response_url: ResponseUrl) -> None:
    unreachable = "postgresql://postgres@127.0.0.1:1/nothing?connect_timeout=2"
    env = {**code_env(unreachable, 1), "ONCEONLY_STORE_URL": fresh_db}
    answer = finished(built.invoke(request("Create", response_url, properties(1)), env))
    assert answer["Status"] == "FAILED" and response_url.answers == [answer]
    assert answer["Reason"].startswith("schema step failed: ") and "127.0.0.1" in answer["Reason"]
    assert "\n" not in answer["Reason"]


def _slow_update(built: BuiltFunction, database: str, cfn: ResponseUrl, slow: Path,
                 watchdog_after: float) -> subprocess.Popen[str]:
    """Create, then an Update that ships the ``slow`` migrations with a function
    timeout that has the watchdog answer ``watchdog_after`` s in; returns once
    the Update is answered (or its run ended)."""
    env = code_env(database, 1)
    assert finished(built.invoke(request("Create", cfn, properties(1)), env))["Status"] == "SUCCESS"
    running = built.invoke(request("Update", cfn, properties(1, SchemaRunId="x")), env,
                           timeout=ANSWER_MARGIN + watchdog_after, migrations=slow)
    while not cfn.answers[1:] and running.poll() is None:
        threading.Event().wait(0.05)
    return running


def test_a_run_answered_failed_at_its_timeout_never_commits(
        built: BuiltFunction, fresh_db: str, response_url: ResponseUrl, tmp_path: Path) -> None:
    """Each statement is shorter than the statement timeout, together they
    outlast the watchdog: it answers FAILED while the run goes on, and the run
    must then roll back instead of committing."""
    running = _slow_update(built, fresh_db, response_url, migrations(tmp_path, "slow", {
        "9999_slow.sql": "SELECT pg_sleep(0.7); " * 8 + "CREATE TABLE slow_marker (id int PRIMARY KEY);"}), 4.0)
    assert running.poll() is None, "the run ended before the watchdog answered: not a timeout"
    answer = finished(running)
    assert answer["Status"] == "FAILED" and "did not finish" in answer["Reason"], answer
    assert response_url.answers[1:] == [answer]  # the late run sent nothing else
    assert "slow_marker" not in _tables(fresh_db) and "9999_slow.sql" not in _applied(fresh_db)


SLOW_COMMIT = """
CREATE TABLE commit_marker (id int PRIMARY KEY);
CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(3); RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON commit_marker DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION slow_commit();
SELECT pg_sleep(1); SELECT pg_sleep(1); SELECT pg_sleep(1);
INSERT INTO commit_marker VALUES (1);
"""


def test_a_timeout_during_the_commit_waits_for_its_outcome(
        built: BuiltFunction, fresh_db: str, response_url: ResponseUrl, tmp_path: Path) -> None:
    """The run claims its commit before the watchdog's time, and its COMMIT
    (a deferred trigger sleeps in it) is still running when that time comes:
    the watchdog must wait for the COMMIT's outcome, not answer FAILED for a
    run that then commits."""
    # The watchdog answers 5 s after the start: the statements get 4-5 s each (statement_timeout), the
    # sleeps before the claim 3 s, the COMMIT 3 s more, so the COMMIT is running at the watchdog's time.
    running = _slow_update(built, fresh_db, response_url,
                           migrations(tmp_path, "slow_commit", {"9999_slow_commit.sql": SLOW_COMMIT}), 5.0)
    answered_at = time.time()
    answer, timeout_at = finished_at(running)
    assert answered_at > timeout_at - ANSWER_MARGIN, "answered before the watchdog's time: not the case tested"
    assert response_url.answers[1:] == [answer]
    assert answer["Status"] == "SUCCESS", answer  # the COMMIT returned within the grace: its own answer
    assert "commit_marker" in _tables(fresh_db) and "9999_slow_commit.sql" in _applied(fresh_db)


# -- the migration on a live database ------------------------------------------------------------------------

def test_a_migration_waiting_for_a_lock_does_not_stall_readers(
        fresh_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long transaction holds a lock on invoices; the ALTER queued behind it
    would make every later SELECT on invoices wait too. With lock_timeout the
    ALTER gives up, the readers go on, and the migration fails with a clear
    reason, applying nothing; once the blocker ends it applies."""
    apply_schema(fresh_db, fresh_db)
    monkeypatch.setattr(migrate, "MIGRATIONS_DIR", migrations(tmp_path, "alter", {
        "9999_alter.sql": "ALTER TABLE invoices ADD COLUMN reminder_note text;"}))
    errors: list[BaseException] = []

    def run_migration() -> None:
        try:
            migrate.migrate(fresh_db, lock_timeout=1.0, attempts=2)
        except BaseException as exc:
            errors.append(exc)

    with psycopg.connect(fresh_db) as blocker, psycopg.connect(fresh_db, autocommit=True) as reader:
        blocker.execute("SELECT count(*) FROM invoices")  # an open transaction's lock on invoices
        migration = threading.Thread(target=run_migration)
        migration.start()
        while not reader.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                 "AND query LIKE 'ALTER TABLE invoices%'").fetchone()[0]:
            assert migration.is_alive(), errors
            threading.Event().wait(0.05)
        # The ALTER is queued: a reader behind it must get through once it gave up (well before 8 s).
        reader.execute("SET statement_timeout = '8s'")
        assert reader.execute("SELECT count(*) FROM invoices").fetchone() == (0,)
        migration.join(30)
        assert len(errors) == 1 and isinstance(errors[0], psycopg.errors.LockNotAvailable), errors
        assert "2 times" in str(errors[0]) and "nothing was applied" in str(errors[0])
        blocker.rollback()
    assert "9999_alter.sql" not in _applied(fresh_db)
    assert migrate.migrate(fresh_db) == ["9999_alter.sql"]


def test_onceonly_migrate_applies_the_schema_once_and_is_idempotent(fresh_db: str, redis_url: str) -> None:
    first = run_cli("migrate", "--database", fresh_db, "--store", redis_url)
    assert first.returncode == 0, first.stderr
    assert "0001_webhooks.sql" in first.stdout and "redis set up" in first.stdout
    second = run_cli("migrate", "--database", fresh_db)
    assert second.returncode == 0, second.stderr
    assert "none (already up to date)" in second.stdout and "postgresql set up" in second.stdout
    assert "onceonly_leases" in _tables(fresh_db)


def test_onceonly_migrate_fails_in_one_line(fresh_db: str) -> None:
    line = one_line_error(run_cli("migrate", "--database", "postgresql://postgres@127.0.0.1:1/x"))
    assert "unreachable" in line
    line = one_line_error(run_cli("migrate", "--database", fresh_db, "--store", "nosuch://x"))
    assert "unknown store scheme" in line


@pytest.mark.parametrize(("function", "event"), [
    ("OverdueInvoicesFunction", "events/overdue_invoices.json"),
    ("WebhookDispatchFunction", "events/webhook_dispatch.json"),
])
def test_a_function_on_a_missing_schema_fails_with_one_line_naming_the_fix(
        fresh_db: str, redis_url: str, function: str, event: str) -> None:
    result = run_cli("invoke", function, "--event", event, "--no-setup", "--database", fresh_db,
                     "--store", redis_url, timeout=180)
    assert result.returncode == 1
    assert json.loads(result.stdout)["errorType"] == "SchemaMissingError"
    logged = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    naming_the_fix = [entry for entry in logged if "onceonly migrate" in entry.get("message", "")]
    assert len(naming_the_fix) == 1, logged
    assert naming_the_fix[0]["level"] == "ERROR" and naming_the_fix[0]["message"].startswith("schema missing (")


def test_apply_schema_sets_up_the_store_it_is_given(fresh_db: str, dynalite_endpoint: str, unique: str) -> None:
    dynamodb_url = f"dynamodb://onceonly-schema-{unique}?region=us-east-1&endpoint_url={dynalite_endpoint}"
    store = onceonly.connect(dynamodb_url)
    try:
        with pytest.raises(onceonly.StoreNotReadyError):
            store.inspect("before")
        report = apply_schema(fresh_db, dynamodb_url)
        assert report.store_kind == "dynamodb"
        assert store.inspect("after") is None
    finally:
        store.close()
        delete_table(dynamodb_url)  # the session's dynalite must end with no test's tables


def test_a_store_switch_is_repaired_and_reported_and_another_stack_refused(
        built: BuiltFunction, fresh_db: str, redis_url: str, response_url: ResponseUrl) -> None:
    """StoreUrlSecretArn changed (redis -> the database's own PostgreSQL): the
    step notices the new store, repairs, and says so in its answer and its log;
    a second stack's Create on the same database is refused with the reason."""
    on_redis = {**code_env(fresh_db, 1), "ONCEONLY_STORE_URL": redis_url}
    created = finished(built.invoke(request("Create", response_url, properties(1)), on_redis))
    assert created["Status"] == "SUCCESS" and created["Data"]["StoreSwitch"] == "first-record", created
    process = built.invoke(request("Update", response_url, properties(1, SchemaRunId="switch"), properties(1)),
                           code_env(fresh_db, 1))
    stdout, stderr = process.communicate(timeout=120)
    switched = json.loads(stdout.strip().splitlines()[-1])
    assert switched["Status"] == "SUCCESS", switched
    assert switched["Data"]["StoreSwitch"] == "switched" and switched["Data"]["StoreKind"] == "postgresql"
    assert switched["Data"]["DeliveriesRequeued"] == "0" and switched["Data"]["FencesReset"] == "0"
    logged = [json.loads(line) for line in stdout.splitlines() if line.startswith('{"level"')]
    assert any(entry["message"].startswith("store switched: now postgresql") for entry in logged), logged

    other = {**EVENT, "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/other/2"}
    refused = finished(built.invoke({**request("Create", response_url, properties(1)), **other},
                                    code_env(fresh_db, 1)))
    assert refused["Status"] == "FAILED" and "another stack" in refused["Reason"], refused
    assert "onceonly migrate" in refused["Reason"] and "stack/s)" in refused["Reason"]


def test_the_reason_fits_cloudformations_limit_in_bytes(response_url: ResponseUrl) -> None:
    custom_resource = source_custom_resource()
    event = request("Create", response_url, properties(1))
    responder = custom_resource.Responder(event)
    responder.send("FAILED", "schema step failed: " + "é€😀" * 3000, {"MigrationsApplied": "none"})
    (answer,) = response_url.answers
    sent = json.dumps(answer).encode()
    assert len(sent) <= custom_resource.MAX_RESPONSE_BYTES
    assert len(json.dumps(answer["Reason"])) - 2 <= custom_resource.MAX_REASON_BYTES
    assert answer["Reason"].startswith("schema step failed: é€😀")
    assert custom_resource.capped("abc", 2) == "ab" and custom_resource.capped("😀", 11) == ""


def test_the_timeout_reason_names_the_timeout_and_the_way_out() -> None:
    reason = source_custom_resource().timeout_reason(290.0)
    assert "within 290 s" in reason and "onceonly migrate" in reason and "before `sam deploy`" in reason
