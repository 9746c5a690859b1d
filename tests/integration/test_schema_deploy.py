"""Schema on deploy (issue 13, item 1): the custom resource's answers to
CloudFormation (SUCCESS, FAILED, Delete, the timeout watchdog) against a local
ResponseURL, idempotent upgrades on real PostgreSQL, `onceonly migrate`, and a
real function meeting a missing schema: one log line naming the fix."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import onceonly
from onceonly_app.appdb import custom_resource, migrate
from onceonly_app.appdb.schema import apply_schema
from tests.e2e.cli_support import one_line_error, run_cli
from tests.support.cfn_response import ResponseUrl
from tests.support.scratch import delete_table, scratch_database

EVENT = {"StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/s/1", "RequestId": "r-1",
         "LogicalResourceId": "SchemaMigration", "ResourceType": "Custom::OnceOnlySchema"}


class _Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def info(self, message: str, **kwargs: Any) -> None:
        self.lines.append(("info", message))

    def error(self, message: str, **kwargs: Any) -> None:
        self.lines.append(("error", message))


@pytest.fixture
def response_url() -> Iterator[ResponseUrl]:
    with ResponseUrl() as server:
        yield server


@pytest.fixture
def fresh_db(postgres_server_url: str) -> Iterator[str]:
    with scratch_database(postgres_server_url, "onceonly_schema") as url:
        yield url


def _event(request: str, response_url: ResponseUrl, **extra: Any) -> dict[str, Any]:
    return {**EVENT, "RequestType": request, "ResponseURL": response_url.url, **extra}


def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {row[0] for row in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}


def test_create_applies_everything_and_an_update_only_what_is_new(
        fresh_db: str, response_url: ResponseUrl, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def apply() -> dict[str, str]:
        report = apply_schema(fresh_db, fresh_db)
        return {"MigrationsApplied": ",".join(report.migrations_applied) or "none"}

    created = custom_resource.handle(_event("Create", response_url), lambda: 300.0, apply, _Log())
    assert created["Status"] == "SUCCESS"
    shipped = sorted(path.name for path in migrate.MIGRATIONS_DIR.glob("*.sql"))
    assert created["Data"]["MigrationsApplied"] == ",".join(shipped)
    assert {"schema_migrations", "webhook_deliveries", "job_ticks", "onceonly_leases"} <= _tables(fresh_db)

    # An upgrade ships one more migration: only that one runs.
    upgrade = tmp_path / "migrations"
    upgrade.mkdir()
    for path in migrate.MIGRATIONS_DIR.glob("*.sql"):
        (upgrade / path.name).write_text(path.read_text())
    (upgrade / "9999_upgrade.sql").write_text("CREATE TABLE upgrade_marker (id int PRIMARY KEY);")
    monkeypatch.setattr(migrate, "MIGRATIONS_DIR", upgrade)
    updated = custom_resource.handle(_event("Update", response_url, PhysicalResourceId="onceonly-schema"),
                                     lambda: 300.0, apply, _Log())
    assert updated["Data"]["MigrationsApplied"] == "9999_upgrade.sql"
    again = custom_resource.handle(_event("Update", response_url, PhysicalResourceId="onceonly-schema"),
                                   lambda: 300.0, apply, _Log())
    assert again["Data"]["MigrationsApplied"] == "none"
    assert [a["Status"] for a in response_url.answers] == ["SUCCESS"] * 3
    assert {a["PhysicalResourceId"] for a in response_url.answers} == {"onceonly-schema"}  # never a replacement


def test_a_failing_step_answers_failed_with_its_reason(response_url: ResponseUrl) -> None:
    log = _Log()
    unreachable = "postgresql://postgres@127.0.0.1:1/nothing?connect_timeout=2"
    answer = custom_resource.handle(_event("Create", response_url), lambda: 300.0,
                                    lambda: {"x": str(apply_schema(unreachable, unreachable))}, log)
    assert answer["Status"] == "FAILED" and response_url.answers == [answer]
    assert answer["Reason"].startswith("schema step failed: ") and "127.0.0.1" in answer["Reason"]
    assert "\n" not in answer["Reason"] and ("error", "schema step failed") in log.lines


def test_delete_keeps_the_data_and_touches_nothing(response_url: ResponseUrl) -> None:
    def must_not_run() -> dict[str, str]:
        raise AssertionError("Delete must not run the schema step")

    answer = custom_resource.handle(_event("Delete", response_url, PhysicalResourceId="onceonly-schema"),
                                    lambda: 300.0, must_not_run, _Log())
    assert answer["Status"] == "SUCCESS" and answer["PhysicalResourceId"] == "onceonly-schema"


def test_a_step_that_outlives_the_function_is_answered_failed_before_the_timeout(
        response_url: ResponseUrl) -> None:
    release = threading.Event()

    def hangs() -> dict[str, str]:
        assert release.wait(60), "the watchdog never answered"
        return {"MigrationsApplied": "late"}

    log = _Log()
    seconds_left = custom_resource.ANSWER_MARGIN_SECONDS + 0.2
    runner = threading.Thread(target=custom_resource.handle,
                              args=(_event("Create", response_url), lambda: seconds_left, hangs, log))
    runner.start()
    while not response_url.answers and runner.is_alive():
        runner.join(0.05)
    release.set()
    runner.join(30)
    assert [a["Status"] for a in response_url.answers] == ["FAILED"]  # the late success is not sent too
    assert "did not finish" in response_url.answers[0]["Reason"]


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
