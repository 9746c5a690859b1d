"""The domain database (PostgreSQL) shared by the webhook and scheduled-job
functions: settings, connections and plain-SQL migrations. Knows nothing of
the coordination store."""
