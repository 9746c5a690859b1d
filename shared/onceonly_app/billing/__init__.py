"""Billing jobs: overdue invoices, the e-mail outbox, recurring invoices and the
payment watcher. Each job module takes a claimed ``onceonly.Tick`` and makes its
effects idempotent in PostgreSQL (conditional transitions, unique keys) and,
where a run must not commit after losing its lease, fenced by the tick's token."""
