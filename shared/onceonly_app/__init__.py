"""The reference app built on the onceonly layer: webhook delivery
(``onceonly_app.webhooks``), scheduled billing jobs (``onceonly_app.billing``)
and their shared database plumbing (``onceonly_app.appdb``). One namespace, so
that installing it never claims generic top-level names."""
