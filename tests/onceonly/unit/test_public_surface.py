"""The library's public surface (docs/coordination.md, "The public surface"):
the app, the CLI and the functions import only public modules of onceonly,
every store package has the same shape, and a store's queue never reaches
back into its store module."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

import onceonly
from tests.support import REPO_ROOT

LIBRARY = REPO_ROOT / "src" / "onceonly"
PUBLIC_MODULES = ("onceonly", "onceonly.postgres", "onceonly.redis", "onceonly.dynamodb")


def _imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def _private(module: str) -> bool:
    parts = module.split(".")
    return parts[0] == "onceonly" and (module.startswith("onceonly.stores") or any(p.startswith("_") for p in parts))


@pytest.mark.parametrize("area", ["app/src/onceonly_app", "cli/src/onceonly_cli", "functions", "bench"])
def test_nothing_outside_the_library_imports_its_internals(area: str) -> None:
    found = [f"{path.relative_to(REPO_ROOT)}: {module}"
             for path in sorted((REPO_ROOT / area).rglob("*.py"))
             for module in _imports(path) if _private(module)]
    assert found == []


@pytest.mark.parametrize("store", ["postgres", "redis", "dynamodb"])
def test_every_store_package_has_the_same_modules_and_its_queue_does_not_import_its_store(store: str) -> None:
    package = LIBRARY / "stores" / store
    assert {"__init__.py", "store.py", "queue.py", "options.py", "errors.py"} <= {p.name for p in package.glob("*.py")}
    queue_imports = ast.walk(ast.parse((package / "queue.py").read_text(encoding="utf-8")))
    relative = {node.module for node in queue_imports if isinstance(node, ast.ImportFrom) and node.level == 1}
    assert "store" not in relative
    module = importlib.import_module(f"onceonly.stores.{store}")
    assert module.__doc__ and "``store``" in module.__doc__ and "``errors``" in module.__doc__


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_public_modules_list_documented_names(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__doc__
    for exported in module.__all__:
        value = getattr(module, exported)
        if callable(value):
            assert value.__doc__, f"{name}.{exported} has no docstring"


def test_the_named_files_sit_in_their_store_packages() -> None:
    assert (LIBRARY / "stores" / "postgres" / "sql" / "store.sql").is_file()
    assert {p.stem for p in (LIBRARY / "stores" / "redis" / "lua").glob("*.lua")} >= {"common", "claim", "acquire"}
    assert not list((LIBRARY / "stores").glob("*.lua")) and not list((LIBRARY / "stores").glob("*.sql"))
    assert onceonly.MAX_SECONDS == 10 * 365 * 86400
