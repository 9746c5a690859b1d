"""`onceonly invoke`'s run: stores -> migrations -> one child invocation -> stdout."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import CliError
from ..testing.servers import LocalServers
from .invoke import function_spec, lambda_environment, read_env_vars, read_json_file, run_function
from .project import template_path
from .stores import check_database, migrate_database, open_store, redact, resolve_targets


def invoke_function(function: str, event: Path, *, template: Path | None = None, env_vars: Path | None = None,
                    setup: bool = True, database: str | None = None, store: str | None = None) -> int:
    """Run ``function`` of ``template`` (default: the project's) on the JSON in
    ``event``, print its response; ``setup``: migrate the database and set up
    the store first. The exit code, or CliError when the handler failed."""
    spec = function_spec(template or template_path(), function)
    read_json_file(event)  # fail here, in one line, rather than inside the child
    file_vars = read_env_vars(env_vars, spec.logical_id)
    servers = LocalServers()
    try:
        targets = resolve_targets(database, store, servers)
        if servers.embedded:
            print("note: using a throwaway embedded PostgreSQL; pass --database to keep the data",
                  file=sys.stderr)
        if servers.processes:
            print(f"note: using a throwaway local store ({redact(targets.store_url)}); pass a store URL "
                  "to keep its records", file=sys.stderr)
        check_database(targets.database_url)
        if setup:
            migrate_database(targets.database_url)
        open_store(targets.store_url, setup=setup).close()
        extra = {**file_vars, "DATABASE_URL": targets.database_url, "ONCEONLY_STORE_URL": targets.store_url}
        aws_only = ("_SECRET", "_PARAMETER")  # replaced locally by the plain URLs above
        unset = [n for n in spec.unresolved_env if n not in extra and not n.endswith(aws_only)]
        if unset:
            print("note: set only by CloudFormation, left unset (give them with --env-vars): "
                  + ", ".join(unset), file=sys.stderr)
        result = run_function(spec, event.resolve(), lambda_environment(spec, extra))
    finally:
        servers.stop()
    print(json.dumps(result.response, indent=2, default=str))
    if result.exit_code:
        error = result.response if isinstance(result.response, dict) else {}
        message = (str(error.get("errorMessage") or "").splitlines() or [""])[0]
        raise CliError(f"{spec.logical_id} failed: {error.get('errorType', 'Error')}: {message}")
    return 0
