"""pyproject.toml and environment.yml must ask for the same dependencies."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _name_and_spec(requirement: str) -> tuple[str, str]:
    match = re.match(r"^\s*([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*(.*)$", requirement)
    assert match, requirement
    return match.group(1).lower().replace("_", "-"), match.group(3).replace(" ", "")


def test_environment_yml_matches_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_deps = dict(_name_and_spec(r) for r in project["dependencies"])
    conda_deps = dict(
        _name_and_spec(d) for d in env["dependencies"] if isinstance(d, str) and not d.startswith(("python", "pip"))
    )
    assert conda_deps == pip_deps
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python"))
    assert python.replace(" ", "") == "python" + project["requires-python"]


def test_console_script_points_at_cli_main() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["dasklbfgs"] == "dasklbfgs.cli:main"
    from dasklbfgs.cli import main

    assert callable(main)
