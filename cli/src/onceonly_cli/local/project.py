"""The project the command line works on: the folder that holds template.yaml
(and beside it functions/ and node_modules/). The one place that
decides it, so that every command and server agrees:

1. the folder given with ``--project-dir`` (``use``), else
2. ``$ONCEONLY_PROJECT_DIR``, else
3. the current directory or the nearest parent holding a template.yaml.

The CLI is an installed distribution: nothing here looks at where its own
source files happen to be."""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "ONCEONLY_PROJECT_DIR"
TEMPLATE = "template.yaml"

_chosen: Path | None = None


class ProjectNotFoundError(RuntimeError):
    """No project folder: the message says how to name one."""


def use(directory: Path | None) -> None:
    """Work on ``directory`` from now on (``--project-dir``); None: look it up."""
    global _chosen
    _chosen = None if directory is None else Path(directory).resolve()


def project_root(start: Path | None = None) -> Path:
    """The project folder (see the module's docstring), or ProjectNotFoundError."""
    explicit = _chosen or (Path(os.environ[ENV_VAR]) if os.environ.get(ENV_VAR) else None)
    if explicit is not None:
        root = explicit.resolve()
        if not (root / TEMPLATE).is_file():
            raise ProjectNotFoundError(f"no {TEMPLATE} in the project folder {root} "
                                       f"(--project-dir or ${ENV_VAR})")
        return root
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / TEMPLATE).is_file():
            return folder
    raise ProjectNotFoundError(f"no {TEMPLATE} in {here} or any folder above it: run inside the onceonly "
                               f"project, or name it with --project-dir or ${ENV_VAR}")


def template_path() -> Path:
    return project_root() / TEMPLATE
