"""The stores' implementation: nothing outside the library imports it (the
public names are re-exported by ``onceonly``, ``onceonly.postgres``,
``onceonly.redis`` and ``onceonly.dynamodb``).

One package per store, each with the same modules: ``store`` (the store,
leases and counting semaphores), ``queue`` (its due queue, given what it needs
of the store through its constructor), ``options`` (the URL options it
accepts), ``errors`` (its driver's exceptions -> onceonly errors), plus the
named statements of ``postgres/sql/`` or the scripts of ``redis/lua/``. Each
package imports only its own driver; connect() picks one lazily.

Shared by the three: ``_common`` (argument checks, payload encoding),
``errors`` (:func:`~onceonly.stores.errors.translated`, which applies a
store's ``translate``), ``options`` (the one refusal of an unknown option),
``timeouts`` (the ``timeout`` option and how each driver's timeouts are
sized) and ``sqlfile`` (named statements from a .sql file)."""
