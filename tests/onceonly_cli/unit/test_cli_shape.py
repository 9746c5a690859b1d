"""The command line's shape: every command is a module with NAME, register and
run, and main builds its parser from them alone; the project folder is decided
in one place (--project-dir, $ONCEONLY_PROJECT_DIR, else the nearest folder
holding a template.yaml); simulate has a Python entry."""

from __future__ import annotations

import argparse
import inspect
from pathlib import Path

import pytest

from onceonly_cli import main as cli_main
from onceonly_cli import simulate
from onceonly_cli.commands import command_modules
from onceonly_cli.local import project
from onceonly_cli.local.project import ProjectNotFoundError, project_root


def test_every_command_is_a_module_with_register_and_run() -> None:
    names = [module.NAME for module in command_modules()]
    assert names == ["simulate", "invoke", "status", "prune", "redrive", "subscriptions", "migrate", "selftest"]
    top = argparse.ArgumentParser()
    subparsers = top.add_subparsers(dest="command")
    for module in command_modules():
        assert isinstance(module.register(subparsers), argparse.ArgumentParser)
        assert list(inspect.signature(module.run).parameters) == ["args"]
    assert set(subparsers.choices) == set(names)


def test_main_runs_the_chosen_command_module(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[argparse.Namespace] = []
    status = next(module for module in command_modules() if module.NAME == "status")
    monkeypatch.setattr(status, "run", lambda args: seen.append(args) or 7)
    assert cli_main.main(["status", "--json"]) == 7
    assert seen[0].json is True


def test_there_is_one_rotate_secret_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli_main.main(["rotate-secret", "wh_1"])
    assert "invalid choice: 'rotate-secret'" in capsys.readouterr().err
    args = cli_main.build_parser().parse_args(["subscriptions", "rotate-secret", "wh_1", "--overlap", "60"])
    assert (args.action, args.webhook_id, args.overlap) == ("rotate-secret", "wh_1", 60.0)


@pytest.fixture
def no_chosen_project(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(project.ENV_VAR, raising=False)
    project.use(None)


@pytest.mark.usefixtures("no_chosen_project")
def test_the_project_is_the_nearest_folder_holding_a_template(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "template.yaml").write_text("Resources: {}\n")
    below = tmp_path / "functions" / "a"
    below.mkdir(parents=True)
    monkeypatch.chdir(below)
    assert project_root() == tmp_path.resolve()


@pytest.mark.usefixtures("no_chosen_project")
def test_an_explicit_project_wins_and_must_hold_a_template(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chosen, other = tmp_path / "chosen", tmp_path / "other"
    for folder in (chosen, other):
        folder.mkdir()
        (folder / "template.yaml").write_text("Resources: {}\n")
    monkeypatch.chdir(other)
    monkeypatch.setenv(project.ENV_VAR, str(chosen))
    assert project_root() == chosen.resolve()
    try:
        project.use(other)  # --project-dir beats the environment
        assert project_root() == other.resolve()
        project.use(tmp_path)  # no template.yaml there
        with pytest.raises(ProjectNotFoundError, match="no template.yaml"):
            project_root()
    finally:
        project.use(None)


@pytest.mark.usefixtures("no_chosen_project")
def test_no_project_is_one_line_naming_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    if any((folder / "template.yaml").is_file() for folder in tmp_path.resolve().parents):
        pytest.skip("a template.yaml above the temporary folder")
    with pytest.raises(ProjectNotFoundError, match="--project-dir"):
        project_root()


def test_simulate_has_a_python_entry() -> None:
    config = simulate.SimulationConfig(store="redis", events=5)
    assert (config.replicas, config.crash_rate, config.seed) == (4, 0.1, None)
    assert list(inspect.signature(simulate.run).parameters) == ["config"]
    report = simulate.Report({"ok": False}, comparison=False)
    assert (report.ok, report.exit_code) == (False, 3)
