"""One simulation (simulate.run): stack up, seed, start the replicas, drive them
until all work is finished, judge, report. Ctrl-C (or any error) stops every
replica and server it started before returning."""

from __future__ import annotations

import json
import os
import random
import secrets
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any

import psycopg
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import onceonly
from onceonly.scheduled import tick_lock_name
from onceonly_app.webhooks.config import WebhookConfig

from ..errors import CliError
from ..local.project import template_path
from ..local.stores import redact
from ..local.template import QueueSettings, TemplateError, schedule_expression, source_queue
from ..testing.servers import ServerSetupError, check_embedded_postgres
from ..testing.standins import ALL, DUMMY_AWS_CREDENTIALS, KEYWORDS, check_standin, store_keyword
from .billing_load import TICKS_PER_JOB, BillingLoad, verify_ses_sender
from .comparison import build_comparison
from .config import SimulationConfig
from .drain import DrainWatch
from .functions import CRON_JOBS, DISPATCH, RETRY, simulated_functions
from .loadgen import Driver
from .payments_load import PaymentsLoad
from .plan import RETRY_AFTER_CAP, RETRY_SCHEDULE, Plan, domain_invariants, scenarios
from .replicas import FunctionPools, ReplicaStartError
from .report import Report, build_report
from .schedule import recent_ticks
from .sqs_bridge import SqsBridge
from .stack import Stack, start_stack
from .tenants import run_tenants
from .webhook_load import WebhookLoad

# The jobs simulate seeds and checks. The payment watcher also needs moto (its
# SQS hop back to the dispatcher).
BILLING_JOBS = ("OverdueInvoicesFunction", "RecurringBillingFunction", "NotificationsFunction")
WATCHER = "PaymentWatcherFunction"

POLL_EVERY = 0.5  # seconds between database checks of what is still unfinished
CONNECT_TIMEOUT = 0.5
CLAIM_BATCH = 2


def webhook_settings(receiver_latency: float, queue_name: str) -> dict[str, str]:
    """WEBHOOK_* for the replicas: timeouts that fit the receiver's latency, and a
    lease the config accepts (it must exceed claim batch x (connect + read))."""
    read_timeout = max(1.0, receiver_latency * 4 + 0.5)
    lease = CLAIM_BATCH * (CONNECT_TIMEOUT + read_timeout) + 1.0
    return {
        "WEBHOOK_ALLOW_HTTP_HOSTS": "127.0.0.1",
        "WEBHOOK_CONNECT_TIMEOUT_SECONDS": str(CONNECT_TIMEOUT),
        "WEBHOOK_READ_TIMEOUT_SECONDS": str(read_timeout),
        "WEBHOOK_CLAIM_BATCH": str(CLAIM_BATCH),
        "WEBHOOK_ATTEMPT_LEASE_SECONDS": str(lease),
        "WEBHOOK_DEADLINE_MARGIN_SECONDS": "1",
        "WEBHOOK_RETRY_SCHEDULE_SECONDS": ",".join(map(str, RETRY_SCHEDULE)),
        "WEBHOOK_MAX_RETRY_AFTER_SECONDS": str(RETRY_AFTER_CAP),
        "WEBHOOK_QUEUE": queue_name,
    }


def replica_env(stack: Stack, specs: dict[str, Any], extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("AWS_PROFILE", None)
    for spec in specs.values():
        env.update(spec.environment)
    layers = sorted({str(path) for spec in specs.values() for path in spec.layers})
    env.update(
        DATABASE_URL=stack.database_url,
        ONCEONLY_STORE_URL=stack.store_url,
        # Never real AWS: dummy credentials, and moto's server for every AWS call.
        **DUMMY_AWS_CREDENTIALS, AWS_DEFAULT_REGION="us-east-1", AWS_REGION="us-east-1",
        POWERTOOLS_LOG_LEVEL="WARNING",  # logs go to files; INFO per record costs CPU on 2 cores
        POWERTOOLS_METRICS_NAMESPACE="onceonly-simulate",
        PYTHONPATH=os.pathsep.join([*layers, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]),
        ONCEONLY_SIMULATE_FUNCTIONS=json.dumps([
            {"logical_id": s.logical_id, "code_dir": str(s.code_dir), "handler": s.handler, "timeout": s.timeout}
            for s in specs.values()]),
    )
    # Only the services the jobs use; a dynamodb:// store keeps its own endpoint_url.
    env["AWS_ENDPOINT_URL_SES"] = env["AWS_ENDPOINT_URL_SQS"] = stack.aws_endpoint
    env.update(extra)
    return env


def run(sim: SimulationConfig) -> Report:
    """Run the simulation ``sim`` asks for (with ``store="all"``, one per store
    kind, compared) and judge it. CliError for what the user can fix (a missing
    server, an unreachable database), before any work where it can be told."""
    _refuse_aws(sim.store)
    # Never real AWS: this process sets up the store and reads it with dummy credentials too.
    os.environ.update(DUMMY_AWS_CREDENTIALS)
    os.environ.pop("AWS_PROFILE", None)
    seed = sim.seed if sim.seed is not None else secrets.randbits(32)
    console = Console(stderr=True)
    specs = {fid: spec for fid, spec in simulated_functions(template_path()).items()
             if fid in (DISPATCH, RETRY, WATCHER, *BILLING_JOBS)}
    queue = dispatch_queue()
    _check_preconditions(sim)
    if store_keyword(sim.store) == ALL:
        reports = []
        for kind in KEYWORDS:
            console.rule(f"store: {kind}")
            reports.append(run_simulation(sim, kind, seed, specs, queue, console))
        return Report(build_comparison(reports, seed), comparison=True)
    return Report(run_simulation(sim, sim.store, seed, specs, queue, console))


def _check_preconditions(sim: SimulationConfig) -> None:
    """Everything every run needs, checked before the first one starts: one
    line with its fix (CliError), not a failure after minutes of work."""
    keyword = store_keyword(sim.store)
    if sim.database is None:
        try:
            check_embedded_postgres()
        except ServerSetupError as exc:
            raise CliError(str(exc)) from None
    for kind in KEYWORDS if keyword == ALL else (keyword,) if keyword else ():
        check_standin(kind)


def dispatch_queue() -> QueueSettings:
    """The dispatcher's SQS queue as template.yaml declares it: the simulated
    SQS parks a message after the same maxReceiveCount."""
    try:
        return source_queue(template_path(), DISPATCH)
    except TemplateError as exc:
        raise CliError(str(exc)) from None


def run_simulation(sim: SimulationConfig, store: str | None, seed: int, specs: dict[str, Any],
                   queue: QueueSettings, console: Console) -> dict[str, Any]:
    """One run on ``store`` (a keyword, a URL or None), everything it started
    stopped and everything it wrote removed before it returns its report."""
    rng = random.Random(seed)
    run_id = secrets.token_hex(3)
    config = {"events": sim.events, "replicas": sim.replicas, "receiver_latency": sim.receiver_latency,
              "failure_rate": sim.failure_rate, "crash_rate": sim.crash_rate, "seed": seed, "run_id": run_id,
              "sqs_max_receives": queue.max_receives, "sqs_visibility_timeout": queue.visibility_timeout}
    with ExitStack() as cleanup:
        with console.status("starting the stack (PostgreSQL, the store, receiver, payments API, moto)…"):
            stack = start_stack(sim.database, store, run_id)
        cleanup.callback(stack.close)
        config.update(store=stack.store_kind, store_url=redact(stack.store_url),
                      database="embedded" if stack.embedded_database else "external")
        plan = _seed(sim, stack, rng, run_id, specs, cleanup)
        env = replica_env(stack, specs, webhook_settings(sim.receiver_latency, plan.retry_queue))
        env.update(plan.billing.env(), POWERTOOLS_LOG_LEVEL=sim.log_level)
        if plan.payments and plan.bridge:
            env.update(plan.payments.env(stack.payments.url, plan.bridge.queue_url))
        config["cron_jobs"] = [job.job for job in plan.cron_jobs]
        timeouts = {s.logical_id: s.timeout for s in specs.values()}
        return _drive(sim, console, stack, env, timeouts, plan, queue, rng, config, cleanup)


def _refuse_aws(store: str | None) -> None:
    """simulate runs on 127.0.0.1 only: a DynamoDB URL must name a local endpoint."""
    if store and store.lower().startswith("dynamodb://") and "endpoint_url=" not in store:
        raise CliError("simulate never talks to AWS: give the dynamodb:// URL an endpoint_url=http://127.0.0.1:PORT, "
                       "or use --store dynamodb for a local stand-in")


def cron_ticks(specs: dict[str, Any], now: datetime) -> dict[str, list[datetime]]:
    """Each cron job's ticks: the last times its template schedule fired."""
    template = template_path()
    return {job: recent_ticks(schedule_expression(template, fid) if fid in specs else None, now, TICKS_PER_JOB)
            for fid, job in CRON_JOBS.items()}


def _seed(sim: SimulationConfig, stack: Stack, rng: random.Random, run_id: str, specs: dict[str, Any],
          cleanup: ExitStack) -> Plan:
    tenants = run_tenants(run_id)
    ticks = cron_ticks(specs, datetime.now(UTC))
    billing = BillingLoad(rng, {fid: job for fid, job in CRON_JOBS.items() if fid in specs and fid in BILLING_JOBS},
                          ticks, tenants)
    billing.seed(stack.database_url)  # first: a subscription is only added for a tenant billing knows
    webhooks = WebhookLoad(run_id, rng, tenants)
    webhooks.seed(stack.database_url, stack.receiver, sim.receiver_latency, sim.failure_rate)
    messages = webhooks.messages(sim.events, stack.receiver)
    payments = bridge = None
    verify_ses_sender(stack.aws_endpoint)
    if WATCHER in specs:
        bridge = SqsBridge(stack.aws_endpoint, f"sim-{run_id}-webhook-events")
        cleanup.callback(bridge.close)
        payments = PaymentsLoad(tenants, rng, ticks[CRON_JOBS[WATCHER]])
        billing.expect_paid_after_overdue(payments.seed(stack.database_url, stack.payments, billing.invoices,
                                                        webhooks.subscriptions_by_tenant()))
        webhooks.expect(payments.expected_deliveries())
    last_overdue = (ticks[CRON_JOBS["OverdueInvoicesFunction"]] or [datetime.now(UTC)])[-1]
    cron_jobs = billing.cron_jobs(payments.cron_jobs(last_overdue) if payments else None)
    return Plan(tenants, webhooks, billing, payments, bridge, messages, f"sim-{run_id}-webhook-retries", cron_jobs)


def _drive(sim: SimulationConfig, console: Console, stack: Stack, env: dict[str, str],
           timeouts: dict[str, float], plan: Plan, queue: QueueSettings, rng: random.Random, config: dict[str, Any],
           cleanup: ExitStack) -> dict[str, Any]:
    load = plan.webhooks
    progress = Progress(TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=console, transient=False)
    cleanup.enter_context(progress)
    started_task = progress.add_task("replicas started", total=sim.replicas)
    log_dir = sim.log_dir or stack.work_dir
    log_dir.mkdir(parents=True, exist_ok=True)
    pool = FunctionPools(sim.replicas, env, log_dir, crash_rate=sim.crash_rate, rng=rng,
                         timeouts=timeouts, warm=DISPATCH)
    cleanup.callback(pool.stop)
    pool_started = time.time()
    try:
        pool.start()
    except ReplicaStartError as exc:
        log = pool.warm.log_of(0)
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:] if log.exists() else []
        raise CliError(f"{exc}: {tail[0] if tail else 'no log'}") from None
    progress.update(started_task, completed=sim.replicas)
    driver = Driver(pool, rng, DISPATCH, RETRY if RETRY in timeouts else None,
                    max_receives=queue.max_receives, cron_jobs=plan.cron_jobs,
                    max_batches_in_flight=2 * sim.replicas, on_feed=load.on_feed)
    driver.enqueue(plan.messages)
    # Distinct events against their total; duplicates and redeliveries only in the message count.
    fed_task = progress.add_task("events fed", total=load.events_in)
    relayed_total = len(load.expected) - load.events_in - len(load.notices)
    relayed_task = progress.add_task("invoice.paid relayed", total=relayed_total) if relayed_total else None
    messages_task = progress.add_task("SQS messages (+dups)", total=None)
    done_task = progress.add_task("deliveries finished", total=len(load.expected))
    cron_task = progress.add_task("cron ticks settled", total=driver.cron_progress[1])
    store = onceonly.connect(stack.store_url)
    cleanup.callback(store.close)
    retry_queue = store.queue(plan.retry_queue)
    conn = psycopg.connect(stack.database_url, autocommit=True)
    cleanup.callback(conn.close)
    start = time.time()
    watch = DrainWatch(stall_limit=sim.stall_limit, time_limit=sim.time_limit)
    next_poll = 0.0
    while True:
        driver.step(feed_cron=True)
        progress.update(fed_task, completed=load.events_fed)
        if relayed_task is not None:
            progress.update(relayed_task, completed=len(load.first_sent) - load.events_fed)
        progress.update(messages_task, completed=driver.messages_sent)
        progress.update(cron_task, completed=driver.cron_progress[0])
        if time.monotonic() < next_poll:
            continue
        next_poll = time.monotonic() + POLL_EVERY
        relayed = load.relay(plan.bridge.take()) if plan.bridge else []
        driver.enqueue(relayed)
        unfinished, total, attempts = load.unfinished(conn)
        load.sample_retry_schedules(conn)
        load.enable_when_held(conn, retry_queue)
        # Read on every poll, not only at the end: a store that died mid-run
        # stops the run here at once (one line, exit 1: errors.expected_failure).
        retry_depth = retry_queue.depth().total
        progress.update(done_task, completed=total - unfinished)
        if driver.idle and driver.dead_letter_queue and not driver.redriven:
            # The run's work is done but for what SQS parked: redrive it once, as the
            # operator the dead-letter alarm calls would, and judge the result.
            driver.redrive_dead_letters()
        parked = load.deliveries_of(driver.dead_letter_queue) if driver.redriven else set()
        finished_all = driver.idle and not relayed and unfinished == 0 and retry_depth == 0 and \
            total >= len(load.expected) - len(parked)
        # Progress is work moving forward, never the retry schedule's own ticks.
        moved = (driver.messages_sent, total - unfinished, attempts, driver.cron_progress[0])
        if watch.observe(moved, finished=finished_all):
            break
    finished = time.time()
    pool.stop()
    ticks = driver.ticks
    for tick in ticks:
        state = store.inspect(tick_lock_name(tick.job, datetime.fromisoformat(tick.tick)))
        tick.completed = bool(state and state.completed)
        tick.final_token = state.token if state else None
    load.park(driver.dead_letter_queue)
    facts = load.facts(conn, stack.receiver, driver.messages_sent, driver.redriven)
    config["startup_seconds"] = round(start - pool_started, 2)
    return build_report(
        config=config, started=start, finished=finished, replicas=sim.replicas, deliveries=facts, ticks=ticks,
        effects=plan.billing.effects(conn), payments=plan.payments.effects(conn) if plan.payments else None,
        paid_ids=plan.payments.expected_deliveries() if plan.payments else set(),
        invocations=driver.invocations, kills=pool.kills, restarts=pool.restarts, drained=watch.drained,
        posts_per_kill=int(env.get("WEBHOOK_MAX_IN_FLIGHT", WebhookConfig.max_in_flight)),
        drain_detail=watch.detail(), domain=domain_invariants(conn, stack.receiver, plan, pool.kills),
        scenarios=scenarios(plan))
