"""The domain database and the clients every function builds once per container:

- ``settings``: where the functions find their database and store (URLs,
  secrets, the RDS CA bundle);
- ``clients``: the domain pool and the coordination store, per container;
- ``migrate`` and ``migrations/``: the plain-SQL migrations, applied in order;
- ``schema``: applying them at deploy, and the handlers' schema check;
- ``store_identity``, ``store_switch``: which store the database's fences and
  cursors belong to, and the repair when that store changes;
- ``alarm_clocks``: the stale alarms' first samples, sent at deploy.
"""
