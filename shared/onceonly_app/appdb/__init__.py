"""What the webhook and scheduled-job functions share: settings, the clients
built once per container, and the domain database's plain-SQL migrations."""
