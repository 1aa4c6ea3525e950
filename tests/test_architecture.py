"""The layout docs/architecture.md draws holds in the code: arrows go down only, no solver
package imports a sibling, the math imports no Dask, and the places the page names exist."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dasklbfgs"

#: each part of the package and its layer: a module imports its own layer or lower ones
LAYERS = {
    0: {"errors", "options", "_typing", "_version", "_format", "_checks", "allocator", "_recent", "_lazy"},
    1: {"optim"},
    2: {"models", "data", "_wire", "checkpoint_store"},
    3: {"cluster", "monitor", "parallel", "_actors", "scoring"},
    4: {"solvers"},
    5: {"estimators", "_fit_stores", "_post_fit", "cli", "pipeline", "sandblaster", "downpour", "events", "__init__",
        "__main__", "selection", "testing"},
}
LAYER_OF = {part: layer for layer, parts in LAYERS.items() for part in parts}
SOLVER_FAMILIES = ("sandblaster", "downpour", "peers")
PURE = ("optim", "models")  # the math: no Dask, no Zarr


def _modules() -> list[tuple[Path, tuple[str, ...]]]:
    return [(path, path.relative_to(PACKAGE).with_suffix("").parts) for path in sorted(PACKAGE.rglob("*.py"))]


def _imports(path: Path) -> list[str]:
    """Every module ``path`` imports, at any depth (imports inside functions count too)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
    return names


def _part(parts: tuple[str, ...]) -> str:
    return parts[0]


def test_every_part_of_the_package_has_a_layer() -> None:
    unplaced = {_part(parts) for _, parts in _modules()} - set(LAYER_OF)
    assert not unplaced, f"place {sorted(unplaced)} in LAYERS (and in docs/architecture.md's drawing)"


def test_arrows_go_down_only() -> None:
    upward = []
    for path, parts in _modules():
        here = LAYER_OF[_part(parts)]
        for name in _imports(path):
            if name.startswith("dasklbfgs."):
                there = LAYER_OF[name.split(".")[1]]
                if there > here:
                    upward.append(f"{path.relative_to(ROOT)} imports {name}")
            elif name == "dasklbfgs" and here < 5:
                upward.append(f"{path.relative_to(ROOT)} imports the package's face")
    # cluster.connect installs the Training page in the scheduler it starts: the one place
    # the engine names a page (both layer 3, so the rule holds without an exception)
    assert not upward, "\n".join(upward)


def test_no_solver_package_imports_a_sibling() -> None:
    crossing = []
    for path, parts in _modules():
        if parts[0] != "solvers" or len(parts) < 3 or parts[1] not in (*SOLVER_FAMILIES, "_replicas"):
            continue
        for name in _imports(path):
            match = re.match(r"dasklbfgs\.solvers\.(\w+)", name)
            if match and match[1] in SOLVER_FAMILIES and match[1] != parts[1]:
                crossing.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not crossing, "\n".join(crossing)


@pytest.mark.parametrize("part", PURE)
def test_the_math_imports_no_dask(part) -> None:
    impure = [f"{path.relative_to(ROOT)} imports {name}" for path, parts in _modules() if parts[0] == part
              for name in _imports(path) if name.split(".")[0] in ("dask", "distributed", "zarr")]
    assert not impure, "\n".join(impure)


def test_the_places_the_architecture_page_names_exist() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`((?:[\w/]+/)?[\w]+\.py)`", text)) | set(re.findall(r"`([\w]+(?:/[\w]+)+/)`", text))
    assert len(named) >= 10
    missing = [p for p in named if not ((PACKAGE / p).exists() or (ROOT / p).exists())]
    assert not missing, f"docs/architecture.md names {missing}, which do not exist"


def test_every_model_the_front_ends_build_declares_itself() -> None:
    """A new model is its module plus its class in ``models/registry.py`` CLASSES: it sizes
    itself for a dataset, and the shape options it declares are ModelOptions fields."""
    from dasklbfgs.models.base import Model
    from dasklbfgs.models.registry import CLASSES, ModelOptions

    for name, cls in CLASSES.items():
        assert cls.name == name and cls.for_dataset.__func__ is not Model.for_dataset.__func__, name
        assert set(cls.shape_options) <= set(ModelOptions.fields()), name
