"""The `onceonly` commands, one module each. A command module has:

- ``NAME``: the word on the command line;
- ``register(subparsers)``: adds its parser (options, help) to the top parser's subparsers;
- ``run(args) -> int``: maps the parsed options to the plain typed call that does
  the work (in ``local`` or ``simulate``) and returns the exit code.

argparse stays in this package: the modules that do the work never see it.
``COMMANDS`` is the order of ``onceonly --help``; a new command is a new module
and an entry here.

- simulate: the real functions as replicas under duplicates and crashes
- invoke: one function of template.yaml, locally
- status, prune, redrive: an operator's look at and repairs of the queue and ticks
- subscriptions: webhook subscriptions, rotate-secret included
- migrate: the domain migrations and the store's setup
- selftest: a multi-process race against a store, checked
- options: the option types and groups the commands share"""

from __future__ import annotations

import argparse
from types import ModuleType
from typing import Any, Protocol, cast


class Command(Protocol):
    NAME: str

    def register(self, subparsers: Any) -> argparse.ArgumentParser: ...

    def run(self, args: argparse.Namespace) -> int: ...


def command_modules() -> list[Command]:
    """The command modules, in --help order."""
    from . import invoke, migrate, prune, redrive, selftest, simulate, status, subscriptions

    modules: list[ModuleType] = [simulate, invoke, status, prune, redrive, subscriptions, migrate, selftest]
    return [cast(Command, module) for module in modules]
