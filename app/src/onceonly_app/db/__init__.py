"""The domain database and the clients every function builds once per container:

- ``settings``: where the functions find their database and store (URLs,
  secrets, the RDS CA bundle);
- ``clients``: the domain pool and the coordination store, per container;
- ``migrate`` and ``migrations/``: the plain-SQL migrations, applied in order;
- ``schema``: the handlers' schema check (applying it is onceonly_app.schema_step);
- ``store_identity``, ``store_switch``: which store the database's fences and
  cursors belong to, and the repair when that store changes;
- ``alarm_clocks``: the stale alarms' first samples, sent at deploy.

Data access, everywhere in the app: module-level functions that take a psycopg
connection (``conn``) and run their statements on it, in the caller's
transaction, with their SQL in the ``.sql`` file beside the module
(``onceonly.stores.sqlfile``). No repository classes and no pools in data
access. A pool is taken only by the entry points that decide where a
transaction starts and ends: a job's ``run(pool, tick, …)`` (one transaction per
fenced batch, none held across an outside call), the webhook service (one
short transaction per statement, none held while a request is in flight, via
``webhooks.deliveries.connection``), the outbox flush, the CLI commands, and
the components that own one short transaction per statement beside the
service (``EndpointGate``, ``EndpointHealth``, the jobs' ``TickFence``).
A function that must commit before its next step (a queue put, say) opens its
own ``conn.transaction()`` and says so.
"""
