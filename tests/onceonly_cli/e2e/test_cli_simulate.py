"""`onceonly simulate` end to end on the embedded default stack: the real
handlers as replica processes, duplicates and SIGKILLs, and the report's
invariants; a deliberately broken store must make it fail; Ctrl-C must leave
nothing running; the HTML report must render in a real headless Chromium."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import psutil
import psycopg
import pytest
import redis

from onceonly_cli import simulate
from onceonly_cli.simulate import SimulationConfig
from onceonly_cli.simulate.recovery_load import FAILING_EVENTS, RECOVER_EVENTS
from onceonly_cli.simulate.webhook_checks import HOSTILE_RETRY_AFTER
from onceonly_cli.simulate.webhook_load import GONE_EVENTS, MISADDRESSED_EVENTS, TRICKLE_EVENTS
from tests.support.cli.cli_support import ONCEONLY, REPO_ROOT, isolated_env, run_cli
from tests.support.servers.redis_servers import private_redis

ARTIFACTS = REPO_ROOT / "test-artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SQS_BATCH_SIZE = 10  # template.yaml: the dispatcher's BatchSize (the retry worker claims fewer)
EVENTS = 60
ALL_EVENTS = 20  # per store: three runs
# Every run also feeds the scenarios' events: hostile Retry-After, trickled, misaddressed, held, aborted
# then recovered, held by an automatic disable.
SCENARIO_EVENTS = len(HOSTILE_RETRY_AFTER) + TRICKLE_EVENTS + MISADDRESSED_EVENTS + GONE_EVENTS + RECOVER_EVENTS \
    + FAILING_EVENTS
NOTICES = 1  # the endpoint.disabled delivery of the automatic disable
DOMAIN_INVARIANTS = {
    "no cross-tenant delivery", "hostile Retry-After clamped", "trickled attempts cut at the deadline and retried",
    "disabled subscription loses no event", "recover sends each failed event once more",
    "failing endpoint disabled with notice, no event lost",
    "payments credited to the right invoice and asset", "unmatched payments recorded, never credited",
    "multi-operation payments: each operation once", "no overdue before the due day ended",
    "paused periods not billed", "no overdue e-mail for a paid invoice", "sub-cent parts pay exactly",
    "zero invoice never overdue", "no dunning of an on-time payment seen late",
}

pytestmark = [pytest.mark.slow, pytest.mark.processes]


def processes_under(path: Path) -> list[psutil.Process]:
    """Processes whose command line mentions ``path`` (replicas log there; the
    embedded PostgreSQL keeps its data there): what a run may leave behind."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(str(path) in part for part in proc.info["cmdline"] or []):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def replicas_under(path: Path) -> list[psutil.Process]:
    replicas = []
    for proc in processes_under(path):
        try:
            if "onceonly_cli.simulate.replica" in proc.cmdline():
                replicas.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return replicas


@dataclass
class SimulateRun:
    returncode: int
    report: dict
    stderr: str
    html: Path
    tmp: Path


@pytest.fixture(scope="session")  # once per worker, whatever runs between its tests
def crash_run(tmp_path_factory: pytest.TempPathFactory) -> SimulateRun:
    tmp = tmp_path_factory.mktemp("simulate")
    html = tmp / "report.html"
    # Few events: the webhook paths, every cron job and the payment watcher's SQS
    # hop are all exercised, and crashes hit each of them at this rate anyway.
    result = run_cli("simulate", "--json", "--events", str(EVENTS), "--crash-rate", "0.2", "--seed", "7",
                     "--report", str(html), env=isolated_env(tmp), timeout=240)
    assert result.stdout.strip(), result.stderr[-3000:]
    return SimulateRun(result.returncode, json.loads(result.stdout), result.stderr, html, tmp)


def test_simulate_with_crashes_keeps_every_invariant(crash_run: SimulateRun) -> None:
    report = crash_run.report
    broken = [i for i in report["invariants"] if not i["ok"]]
    assert crash_run.returncode == 0, (broken, crash_run.stderr[-2000:])
    assert report["ok"] is True and not broken
    assert report["config"]["database"] == "embedded" and report["config"]["store"] == "postgresql"
    assert report["replicas"]["killed"] >= 1, "crashes were enabled but no replica was killed"
    assert 1 <= report["replicas"]["restarted"] <= report["replicas"]["killed"]  # none after the drain
    wh, paid = report["webhooks"], report["payments"]
    assert wh["events_in"] == EVENTS + SCENARIO_EVENTS
    assert wh["duplicate_messages"] > 0 and wh["messages_sent"] > wh["events_in"]
    assert wh["lost_deliveries"] == 0
    # One delivery per fed event, plus one per (subscription, invoice the watcher saw paid).
    assert paid["invoice_paid_deliveries"] > 0
    assert wh["deliveries"] == EVENTS + SCENARIO_EVENTS + NOTICES + paid["invoice_paid_deliveries"]
    assert wh["deliveries_made"] + wh["dead_letters"] == wh["deliveries"]
    assert paid["invoice_paid_received"] + paid["invoice_paid_dead"] == paid["invoice_paid_deliveries"]
    # A killed replica's repeats (same webhook-id) are the requests of its batch
    # whose outcomes were not recorded yet: the batch records them together.
    assert wh["duplicate_posts"] <= report["replicas"]["killed"] * SQS_BATCH_SIZE
    ticks = report["cron"]["ticks"]
    assert {t["job"] for t in ticks} == {"overdue-invoices", "recurring-billing", "notifications", "payment-watcher"}
    for tick in ticks:
        assert tick["ok"] and tick["completed"], tick
        assert tick["statuses"].get("ran", 0) <= 1, tick
        assert tick["deliveries"] >= 3, tick  # duplicates were delivered to several replicas
    assert all(e["ok"] for e in report["cron"]["effects"])
    assert [e for e in paid["effects"] if e["what"] == "payment operations recorded" and e["ok"] and e["actual"] > 0]
    assert all(e["ok"] for e in paid["effects"])
    held = {i["name"] for i in report["invariants"] if i["ok"]}
    assert {"each payment applied once", "invoice.paid: one delivery per subscription"} <= held
    assert held >= DOMAIN_INVARIANTS
    seeded = report["scenarios"]
    assert len(seeded["tenants"]) == 3 and len({t["time_zone"] for t in seeded["tenants"]}) == 3
    assert {"asset_not_accepted", "wrong_currency", "unknown_invoice", "skipped"} <= set(
        seeded["payments_not_credited"]) and seeded["multi_operation_transactions"] > 0
    cancelled = [e for e in report["cron"]["effects"] if e["what"] == "e-mails cancelled (paid first)"]
    assert cancelled and cancelled[0]["actual"] > 0  # paid before the e-mails went out: cancelled, not sent
    assert report["latency_ms"]["p50"] is not None and report["throughput_per_second"] > 0
    ordinary = report["ordinary_deliveries"]  # the --events ones alone: the scenario events are not counted
    assert 0 < ordinary["deliveries"] <= EVENTS and ordinary["per_second"] > 0
    assert not processes_under(crash_run.tmp), "simulate left processes running"


def test_ticks_are_todays_schedule_and_progress_totals_add_up(crash_run: SimulateRun) -> None:
    now = datetime.now(UTC)
    for tick in crash_run.report["cron"]["ticks"]:
        when = datetime.fromisoformat(tick["tick"].replace("Z", "+00:00"))
        assert now - timedelta(days=3) < when <= now, tick  # the last times the schedule fired
    bars = progress_bars(crash_run.stderr)
    fed = EVENTS + SCENARIO_EVENTS
    assert bars["events fed"] == (fed, fed)  # duplicates are not events
    paid = crash_run.report["payments"]["invoice_paid_deliveries"]
    assert bars["invoice.paid relayed"] == (paid, paid)
    assert bars["deliveries finished"] == (fed + paid + NOTICES, fed + paid + NOTICES)
    assert all(done <= total for done, total in bars.values()), bars


def progress_bars(stderr: str) -> dict[str, tuple[int, int]]:
    """The last state of each progress bar with a total: name -> (done, total)."""
    bars = {}
    for line in stderr.splitlines():
        found = re.match(r"^(\S.*?)\s{2,}\S*\s+(\d+)/(\d+)\s", line)
        if found:
            bars[found.group(1).strip()] = (int(found.group(2)), int(found.group(3)))
    return bars


def test_simulate_on_an_embedded_redis_cluster_holds_every_invariant(tmp_path: Path) -> None:
    """``--store redis-cluster``: six redis-server nodes (3 primaries, 3
    replicas) on loopback, the main job run on them, and nothing left after."""
    result = run_cli("simulate", "--json", "--store", "redis-cluster", "--events", "20", "--crash-rate", "0.2",
                     "--seed", "5", env=isolated_env(tmp_path), timeout=300)
    assert result.stdout.strip(), result.stderr[-3000:]
    report = json.loads(result.stdout)
    broken = [i["name"] for i in report["invariants"] if not i["ok"]]
    assert result.returncode == 0 and report["ok"], broken
    assert report["config"]["store"] == "redis-cluster" and "cluster=1" in report["config"]["store_url"]
    assert not processes_started_for(tmp_path), "a cluster node or a replica outlived the run"
    assert not list(tmp_path.glob("onceonly-*")), list(tmp_path.iterdir())


def test_a_non_atomic_store_makes_simulate_fail(tmp_path: Path) -> None:
    """The test-only hook wraps the store so grants are not atomic: the report
    must notice and the exit code must say so."""
    result = run_cli("simulate", "--json", "--events", "30", "--crash-rate", "0", "--time-limit", "60",
                     env=isolated_env(tmp_path, ONCEONLY_SIMULATE_BREAK_ATOMICITY="1"), timeout=240)
    assert result.returncode == 3, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["ok"] is False
    broken = {i["name"] for i in report["invariants"] if not i["ok"]}
    assert "each cron tick ran once" in broken
    assert not processes_under(tmp_path)


@contextmanager
def long_run_under_way(tmp_path: Path, *options: str) -> Iterator[subprocess.Popen[str]]:
    """A simulate run long enough to interrupt, once its four replicas are up;
    killed at the end if it is still running."""
    proc = subprocess.Popen([str(ONCEONLY), "simulate", "--events", "2000", "--crash-rate", "0", *options],
                            cwd=REPO_ROOT, env=isolated_env(tmp_path), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(replicas_under(tmp_path)) < 4 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert len(replicas_under(tmp_path)) == 4, "the replicas never came up"
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_ctrl_c_stops_every_replica_and_server(tmp_path: Path) -> None:
    with long_run_under_way(tmp_path) as proc:
        started = processes_under(tmp_path)
        assert len(started) > 4, "the embedded PostgreSQL is not running"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    psutil.wait_procs([p for p in started if p.is_running()], timeout=10)
    left = processes_under(tmp_path)
    assert not left, [p.cmdline() for p in left]
    assert "Traceback" not in (proc.stderr.read() if proc.stderr else "")


def processes_started_for(tmp: Path, root: int | None = None) -> list[psutil.Process]:
    """Every process a run started, however far down or re-parented (the
    postmaster pg_ctl daemonizes, the stand-ins' watcher): the descendants of
    ``root`` (the command) while it runs, and each process that inherited the
    run's TMPDIR (isolated_env) or names a folder in it on its command line.
    (redis-server writes its title over its arguments and environment.)"""
    found = {proc.pid: proc for proc in processes_under(tmp)}
    if root is not None:
        with contextlib.suppress(psutil.NoSuchProcess):
            found.update((child.pid, child) for child in psutil.Process(root).children(recursive=True))
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("TMPDIR") == str(tmp) and proc.pid != os.getpid():
                found[proc.pid] = proc
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return list(found.values())


@pytest.mark.parametrize(("signum", "store", "stand_in"), [
    (signal.SIGTERM, "redis", "redis-server"),
    (signal.SIGTERM, "redis-cluster", "[cluster]"),
    (signal.SIGHUP, "dynamodb", "dynalite_launcher.js"),
    (signal.SIGKILL, "dynamodb", "dynalite_launcher.js"),
], ids=["SIGTERM", "SIGTERM-redis-cluster", "SIGHUP", "SIGKILL"])
def test_a_signal_mid_run_leaves_no_process_behind(tmp_path: Path, signum: int, store: str, stand_in: str) -> None:
    """SIGTERM and SIGHUP clean up like Ctrl-C; after a SIGKILL, which no
    cleanup code survives, the stand-ins' watcher stops them."""
    with long_run_under_way(tmp_path, "--store", store) as proc:
        started = processes_started_for(tmp_path, root=proc.pid)
        commands = " ".join(" ".join(p.cmdline()) for p in started)
        assert "postgres" in commands and stand_in in commands and "onceonly_cli.testing.reaper" in commands, commands
        proc.send_signal(signum)
        code = proc.wait(timeout=60)
    assert code == (-signal.SIGKILL if signum == signal.SIGKILL else 128 + signum)
    psutil.wait_procs([p for p in started if p.is_running()], timeout=30)
    left = processes_started_for(tmp_path) + [p for p in started if p.is_running()]
    commands = [p.cmdline() for p in left]
    for orphan in left:  # never leave them running, even when the assertion below fails
        with contextlib.suppress(psutil.NoSuchProcess):
            orphan.kill()
    assert not left, commands
    assert not list(tmp_path.glob("onceonly-*")), list(tmp_path.iterdir())  # data folders, logs: removed too
    if signum != signal.SIGKILL:
        stderr = proc.stderr.read() if proc.stderr else ""
        assert "Traceback" not in stderr and f"stopped by {signal.Signals(signum).name}" in stderr, stderr[-2000:]


@pytest.mark.soak
@pytest.mark.parametrize("seed", [11, 12, 13])
def test_heavy_crash_runs_hold_every_invariant_on_every_store(tmp_path: Path, seed: int) -> None:
    """Half the invocations SIGKILLed, eight replicas, on every store: no false
    violation (a sender cut mid-body, a message parked in the dead-letter
    queue) and no real one. scripts/soak runs it; about 7 minutes a seed here."""
    result = run_cli("simulate", "--json", "--store", "all", "--replicas", "8", "--events", "600",
                     "--crash-rate", "0.5", "--seed", str(seed), env=isolated_env(tmp_path), timeout=1800)
    assert result.stdout.strip(), result.stderr[-3000:]
    comparison = json.loads(result.stdout)
    broken = [(r["config"]["store"], i["name"], i["detail"]) for r in comparison["reports"]
              for i in r["invariants"] if not i["ok"]]
    assert not broken and result.returncode == 0, broken
    assert {r["config"]["store"] for r in comparison["reports"]} == {"postgresql", "redis", "dynamodb"}
    assert all(r["replicas"]["killed"] > 0 for r in comparison["reports"])


def test_a_store_dying_mid_run_is_one_line_and_exit_1(tmp_path: Path) -> None:
    """The coordination store (a Redis of this test's own) is killed once the
    replicas run: simulate must stop everything and say so in one line, not
    print a traceback."""
    with private_redis() as redis_server, long_run_under_way(tmp_path, "--store", redis_server.url) as proc:
        redis_server.kill()
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stderr[-2000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("onceonly simulate: error: Redis store unreachable"), last
    assert not processes_under(tmp_path), "simulate left processes running"


def test_html_report_is_self_contained_and_holds_the_chart_data(crash_run: SimulateRun) -> None:
    html = crash_run.html.read_text(encoding="utf-8")
    for needle in ('id="throughput-chart"', 'id="replica-chart"', 'id="latency-chart"', 'id="report-data"',
                   "Domain scenarios seeded", "hostile Retry-After clamped"):
        assert needle in html
    start = html.index('<script type="application/json" id="report-data">') + len(
        '<script type="application/json" id="report-data">')
    data = json.loads(html[start:html.index("</script>", start)])
    assert data["timeline"]["total"] == crash_run.report["timeline"]["total"]
    assert len(data["timeline"]["per_replica"]) == 4
    assert sum(b["count"] for b in data["latency_ms"]["histogram"]) > 0
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in html and "src=" not in html


@pytest.fixture(scope="session")  # once per worker, whatever runs between its tests
def all_run(tmp_path_factory: pytest.TempPathFactory) -> SimulateRun:
    """The same small workload on each store, each on a fresh local stand-in."""
    tmp = tmp_path_factory.mktemp("simulate-all")
    html = tmp / "stores.html"
    # No crashes here: crash_run covers them, and dynalite 4.0.0 started without the
    # launcher (servers.dynalite on this branch) exits when a killed replica drops
    # its connection mid-request.
    result = run_cli("simulate", "--store", "all", "--json", "--events", str(ALL_EVENTS), "--seed", "11",
                     "--crash-rate", "0", "--report", str(html), env=isolated_env(tmp), timeout=400)
    assert result.stdout.strip(), result.stderr[-3000:]
    return SimulateRun(result.returncode, json.loads(result.stdout), result.stderr, html, tmp)


def test_store_all_runs_the_same_workload_on_every_store(all_run: SimulateRun) -> None:
    comparison = all_run.report
    assert all_run.returncode == 0, ([s["broken"] for s in comparison["stores"]], all_run.stderr[-2000:])
    assert [row["store"] for row in comparison["stores"]] == ["postgresql", "redis", "dynamodb"]
    assert comparison["ok"] is True and comparison["seed"] == 11
    for row, report in zip(comparison["stores"], comparison["reports"], strict=True):
        assert row["ok"] and row["invariants_held"] == row["invariants_total"] == len(report["invariants"])
        assert report["config"]["store"] == row["store"]
        assert report["webhooks"]["events_in"] == ALL_EVENTS + SCENARIO_EVENTS
        assert row["throughput_per_second"] > 0 and row["p99_ms"] is not None
    # Each keyword started its own stand-in on a free port, and it is gone now.
    redis_url = comparison["reports"][1]["config"]["store_url"]
    dynamodb_url = comparison["reports"][2]["config"]["store_url"]
    for url in (redis_url, dynamodb_url):
        port = int(re.search(r"127\.0\.0\.1:(\d+)", url).group(1))  # type: ignore[union-attr]
        assert port != 6379
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0, f"{url} still listening"
    assert "prefix=onceonly-sim-" in redis_url and "dynamodb://onceonly-sim-" in dynamodb_url
    assert not processes_under(all_run.tmp), "simulate left processes running"


def _simulate(config: SimulationConfig) -> dict[str, Any]:
    return simulate.run(config).data


def simulated_apart(config: SimulationConfig) -> dict[str, Any]:
    """``simulate.run(config)``'s report, run in a process of its own: the run
    starts an in-process moto server and sets dummy AWS credentials, and moto's
    state is global to a process, so in this one it would wipe the session's
    moto (its verified SES sender) under the tests that share this worker."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_simulate, (config,))


def test_two_runs_on_one_database_server_and_store_never_meet(
        postgres_url: str, redis_url: str, tmp_path: Path) -> None:
    """Ticks are today's: what keeps runs apart is a database and a key prefix of
    each run's own on the given servers, removed when the run ends. Through
    simulate's Python entry: nothing here is about the command line."""
    def sim_databases() -> set[str]:
        with psycopg.connect(postgres_url) as conn:
            return {r[0] for r in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'onceonly_sim_%'")}

    run_ids = []
    for seed in (3, 3):  # the same seed twice: the same ticks, events and payments
        report = simulated_apart(SimulationConfig(database=postgres_url, store=redis_url, events=10,
                                                  crash_rate=0, seed=seed, log_dir=tmp_path / f"logs-{seed}"))
        assert report["ok"], [i for i in report["invariants"] if not i["ok"]]
        assert report["config"]["database"] == "external" and report["config"]["store"] == "redis"
        assert all(t["statuses"].get("ran") == 1 for t in report["cron"]["ticks"])  # not skipped as done
        run_ids.append(report["config"]["run_id"])
    # other simulate runs may share this server: look only for these runs' databases
    assert len(set(run_ids)) == 2
    assert not {name for name in sim_databases() for run_id in run_ids if name.startswith(f"onceonly_sim_{run_id}")}
    client = redis.Redis.from_url(redis_url.split("?", 1)[0])
    prefix = dict(parse_qsl(urlsplit(redis_url).query))["prefix"]
    assert not client.keys(f"{prefix}-sim-*"), "a run left keys behind"
    client.close()


@pytest.fixture
def chromium() -> Iterator[str]:
    if not Path(CHROMIUM).exists():
        pytest.fail("headless Chromium is missing: apt-get install chromium", pytrace=False)
    yield CHROMIUM


def test_comparison_report_is_self_contained_and_holds_every_run(all_run: SimulateRun) -> None:
    html = all_run.html.read_text(encoding="utf-8")
    for store in ("postgresql", "redis", "dynamodb"):
        assert f'id="throughput-chart-{store}"' in html and f'id="run-{store}"' in html
    assert 'id="compare-throughput"' in html and 'id="compare-p99"' in html
    assert "https://" not in html and "src=" not in html  # the stores' 127.0.0.1 URLs are text, not fetches


@pytest.mark.parametrize(("run", "loaded"), [("crash_run", f"Data loaded: {EVENTS + SCENARIO_EVENTS} events"),
                                               ("all_run", "Data loaded: 3 stores, 3 throughput charts")])
def test_html_report_renders_in_headless_chromium(
        run: str, loaded: str, request: pytest.FixtureRequest, chromium: str, tmp_path: Path) -> None:
    report_run: SimulateRun = request.getfixturevalue(run)
    ARTIFACTS.mkdir(exist_ok=True)
    screenshot = ARTIFACTS / f"simulate-report-{run}.png"
    screenshot.unlink(missing_ok=True)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", "--enable-logging=stderr", "--v=0",
             # No network at all: any fetch would fail and log an error.
             "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>"]
    url = report_run.html.resolve().as_uri()

    def run(*extra: str, profile: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([chromium, *flags, f"--user-data-dir={tmp_path / profile}", *extra, url],
                              capture_output=True, text=True, timeout=120)

    dom = run("--dump-dom", profile="dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'data-rendered="ok"' in dom.stdout, "the inline script did not run or found a data mismatch"
    assert loaded in dom.stdout
    console_errors = [line for line in dom.stderr.splitlines()
                      if "CONSOLE" in line and ("Uncaught" in line or "Error" in line or "Refused" in line)]
    assert not console_errors, console_errors
    shot = run(f"--screenshot={screenshot}", "--window-size=1100,2400", profile="shot")
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert screenshot.exists() and screenshot.stat().st_size > 10_000
