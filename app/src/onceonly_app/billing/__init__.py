"""Billing jobs: overdue invoices, the e-mail outbox, recurring invoices and the
payment watcher. Each job module takes a claimed ``onceonly.Tick`` and makes its
effects idempotent in PostgreSQL (conditional transitions, unique keys) and,
where a run must not commit after losing its lease, fenced by the tick's token.
The webhook events they emit go through ``onceonly_app.events``.

- ``overdue``, ``recurring``, ``notifications``, ``payment_watcher``: the four
  jobs, each ``run(pool, tick, …)`` (+ ``.sql``);
- ``ticks``, ``fenced_batches``: fencing writes with the tick's token, and a
  daily job's work as fenced batches within the invocation's time;
- ``emails``: the e-mail outbox (written in the change's transaction);
- ``ses``: sending one e-mail;
- ``payments_api``, ``matching``, ``assets``, ``money``: reading payments, and
  what one does to an invoice, in exact minor units;
- ``config``: the jobs' settings.
"""
