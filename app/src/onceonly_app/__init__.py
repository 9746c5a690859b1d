"""The reference app built on the onceonly layer. One namespace, so that
installing it never claims generic top-level names:

- ``onceonly_app.events``: the webhook events the app emits (types, payload
  limits, the outbox fan-out); used by webhooks and billing alike;
- ``onceonly_app.webhooks``: webhook delivery;
- ``onceonly_app.billing``: the scheduled billing jobs;
- ``onceonly_app.runtime``: the functions' plumbing (deadlines, tracing,
  bounded AWS clients);
- ``onceonly_app.db``: the domain database (migrations, schema, clients,
  settings, the store's identity).

``webhooks`` and ``billing`` never import each other: what they share lives in
``events``, ``runtime`` and ``db``."""
