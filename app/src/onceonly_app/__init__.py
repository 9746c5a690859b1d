"""The reference app built on the onceonly layer. One namespace, so that
installing it never claims generic top-level names:

- ``onceonly_app.events``: the webhook events the app emits (types, payload
  limits, the outbox fan-out); used by webhooks and billing alike;
- ``onceonly_app.webhooks``: webhook delivery;
- ``onceonly_app.billing``: the scheduled billing jobs;
- ``onceonly_app.runtime``: the functions' plumbing (deadlines, tracing,
  bounded AWS clients);
- ``onceonly_app.db``: the domain database (migrations, the handlers' schema
  check, clients, settings, the store's identity);
- ``onceonly_app.schema_step``: the deploy's schema step (migrations, the
  store's setup and the repair after a change of store);
- ``onceonly_app.sql_queries``, ``onceonly_app.batching``: named SQL files,
  bounded batches.

``webhooks`` and ``billing`` never import each other: what they share lives in
``events``, ``runtime`` and ``db`` (docs/architecture.md; lint-imports checks it)."""
