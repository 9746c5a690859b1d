"""The library installs on its own: the root pyproject.toml builds a wheel with
the package `onceonly` and nothing else (typed, versioned, drivers as extras),
and the reference app and CLI come from cli/pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import onceonly
from tests.support import REPO_ROOT

pytestmark = pytest.mark.sam_build


@pytest.fixture(scope="module")
def library_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # Offline: the venv's own setuptools builds it (no build isolation, no index).
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                    "-q", "-w", str(out), str(REPO_ROOT)], check=True, capture_output=True, timeout=120)
    (wheel,) = out.glob("onceonly-*.whl")
    return wheel


def test_the_library_wheel_holds_onceonly_and_nothing_else(library_wheel: Path) -> None:
    names = zipfile.ZipFile(library_wheel).namelist()
    top_level = {name.split("/")[0] for name in names}
    assert top_level == {"onceonly", f"onceonly-{onceonly.__version__}.dist-info"}
    assert "onceonly/py.typed" in names
    # one package per store, each listed in pyproject.toml, with its SQL or Lua files
    assert "onceonly/stores/postgres/sql/store.sql" in names
    assert "onceonly/stores/redis/lua/claim.lua" in names
    assert "onceonly/stores/redis/lua/common.lua" in names
    for store in ("postgres", "redis", "dynamodb"):
        for module in ("__init__", "store", "queue", "options", "errors"):
            assert f"onceonly/stores/{store}/{module}.py" in names


def test_the_library_wheel_has_no_required_driver_and_one_extra_per_store(library_wheel: Path) -> None:
    with zipfile.ZipFile(library_wheel) as wheel:
        metadata = wheel.read(f"onceonly-{onceonly.__version__}.dist-info/METADATA").decode()
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert requires, "the extras' requirements should be listed"
    assert all("extra ==" in line for line in requires), requires
    extras = {line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Provides-Extra:")}
    assert {"postgres", "redis", "dynamodb"} <= extras


def test_importing_the_library_imports_no_driver() -> None:
    code = ("import sys, onceonly; "
            "print(sorted(m for m in ('psycopg', 'psycopg_pool', 'boto3', 'botocore', 'redis') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_version_is_reported_by_the_library_and_the_command() -> None:
    onceonly_cmd = Path(sys.executable).with_name("onceonly")
    out = subprocess.run([str(onceonly_cmd), "--version"], check=True, capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith(f"onceonly {onceonly.__version__}")
    assert "onceonly-app" in out.stdout
