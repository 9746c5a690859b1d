"""What a run ran on: date, machine, interpreter, server and library versions,
the commit, and the load average (the machine is shared: it says how noisy)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from datetime import UTC, datetime
from importlib.metadata import version
from typing import Any

import psycopg
import redis

from bench.places import Places
from onceonly_cli.local.project import project_root

LIBRARIES = ("psycopg", "psycopg-pool", "redis", "boto3", "aws-lambda-powertools", "procrastinate")


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=project_root(), capture_output=True, text=True, check=False)
    return done.stdout.strip()


def _changed() -> bool:
    return bool(_git("status", "--porcelain", "--untracked-files=no"))


def _dynalite_version() -> str:
    package = project_root() / "node_modules" / "dynalite" / "package.json"
    return str(json.loads(package.read_text())["version"]) if package.exists() else "unknown"


def describe(places: Places) -> dict[str, Any]:
    with psycopg.connect(places.postgres_url, autocommit=True) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    client = redis.Redis.from_url(places.redis_server_url)
    try:
        redis_version = str(client.info("server")["redis_version"])
    finally:
        client.close()
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "machine": platform.machine(),
        "system": platform.platform(terse=True),
        "python": platform.python_version(),
        "postgresql": row[0] if row else "unknown",
        "redis": redis_version,
        "dynalite": _dynalite_version(),
        "libraries": {name: version(name) for name in LIBRARIES},
        "commit": commit(),
        "load_average_start": os.getloadavg(),
    }


def commit() -> str:
    """The checkout's commit, and whether it has local changes."""
    return _git("rev-parse", "--short", "HEAD") + (" (with local changes)" if _changed() else "")
