"""Scratch space on a shared server for the tests: the CLI's own helpers
(onceonly_cli/local/scratch.py), so tests and `onceonly simulate` isolate runs alike."""

from onceonly_cli.local.scratch import (
    delete_prefix,
    delete_table,
    scratch_database,
    scratch_redis_prefix,
    with_database,
    with_prefix,
)

__all__ = ["delete_prefix", "delete_table", "scratch_database", "scratch_redis_prefix", "with_database",
           "with_prefix"]
