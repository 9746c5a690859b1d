"""Wiring of `onceonly invoke`: arguments -> stores -> one child invocation -> stdout."""

from __future__ import annotations

import argparse
import json
import sys

from .errors import CliError
from .invoke import function_spec, lambda_environment, read_env_vars, read_json_file, run_function
from .servers import LocalServers
from .stores import check_database, migrate_database, open_store, redact, resolve_targets


def invoke_command(args: argparse.Namespace) -> int:
    spec = function_spec(args.template, args.function)
    read_json_file(args.event)  # fail here, in one line, rather than inside the child
    file_vars = read_env_vars(args.env_vars, spec.logical_id)
    servers = LocalServers()
    try:
        targets = resolve_targets(args.database, args.store, servers)
        if servers.embedded:
            print("note: using a throwaway embedded PostgreSQL; pass --database to keep the data",
                  file=sys.stderr)
        if servers.processes:
            print(f"note: using a throwaway local store ({redact(targets.store_url)}); pass a store URL "
                  "to keep its records", file=sys.stderr)
        check_database(targets.database_url)
        if not args.no_setup:
            migrate_database(targets.database_url)
        open_store(targets.store_url, setup=not args.no_setup).close()
        extra = {**file_vars, "DATABASE_URL": targets.database_url, "ONCEONLY_STORE_URL": targets.store_url}
        aws_only = ("_SECRET", "_PARAMETER")  # replaced locally by the plain URLs above
        unset = [n for n in spec.unresolved_env if n not in extra and not n.endswith(aws_only)]
        if unset:
            print("note: set only by CloudFormation, left unset (give them with --env-vars): "
                  + ", ".join(unset), file=sys.stderr)
        result = run_function(spec, args.event.resolve(), lambda_environment(spec, extra))
    finally:
        servers.stop()
    print(json.dumps(result.response, indent=2, default=str))
    if result.exit_code:
        error = result.response if isinstance(result.response, dict) else {}
        message = (str(error.get("errorMessage") or "").splitlines() or [""])[0]
        raise CliError(f"{spec.logical_id} failed: {error.get('errorType', 'Error')}: {message}")
    return 0
