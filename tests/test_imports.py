"""What importing dasklbfgs loads: the package, a worker's portion, the command's help.

Each check runs in a fresh interpreter (this one has imported everything long ago) and
compares module names, never times: ``benchmarks/first_run.py`` measures the seconds.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import cloudpickle
import pytest

import dasklbfgs
from dasklbfgs import Logistic
from dasklbfgs.solvers.sandblaster.portion_service import PortionService
from dasklbfgs.solvers.sandblaster.tasks import load_cached_shard, portion_loss_grad
from tests._datasets import write

ROOT = Path(__file__).resolve().parents[1]

#: Modules no part of importing dasklbfgs, or of a worker's portion, should load: the
#: dashboard's bokeh, plotting, the estimators' scikit-learn, the coordinator's
#: scipy.optimize, the pipelines' YAML, and pandas.
HEAVY = ("bokeh", "matplotlib", "sklearn", "scipy.optimize", "yaml", "pandas")
#: What ``dasklbfgs --help`` must not load (numpy is allowed: the options are typed with it).
NOT_FOR_HELP = ("dask", "distributed", "zarr", "scipy", "bokeh", "matplotlib", "sklearn", "yaml", "pandas", "tornado")


def loaded_by(code: str, *, before: str = "") -> set[str]:
    """The modules a fresh interpreter loads running ``code`` (after ``before``, whose own
    modules are not counted)."""
    program = (f"import sys\n{before}\nalready = set(sys.modules)\n{code}\n"
               "import json\nprint(json.dumps(sorted(set(sys.modules) - already)))")
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def heavy_among(modules: set[str], heavy: tuple[str, ...]) -> list[str]:
    """The names of ``heavy`` that ``modules`` hold, themselves or a submodule of them."""
    return sorted(h for h in heavy if any(m == h or m.startswith(h + ".") for m in modules))


def test_importing_dasklbfgs_loads_no_heavy_module() -> None:
    assert heavy_among(loaded_by("import dasklbfgs"), (*HEAVY, "dask", "distributed", "zarr", "scipy")) == []


def test_what_a_worker_unpickles_for_a_portion_loads_no_heavy_module(tmp_path: Path) -> None:
    """A worker receives the portion service, the shard-load and portion tasks, the model
    and the dataset pickled; it has distributed loaded already (which loads yaml)."""
    data = write(tmp_path / "data", "logistic", rows=200, features=4, shard_rows=100)
    blobs = [cloudpickle.dumps(obj) for obj in (PortionService(), load_cached_shard, portion_loss_grad,
                                                Logistic(data.n_features), data)]
    loaded = loaded_by(f"import pickle\nfor blob in {blobs!r}:\n    pickle.loads(blob)",
                       before="import distributed, distributed.worker")
    assert "dasklbfgs.solvers.sandblaster.portion_service" in loaded  # the check saw the unpickling
    # scipy.sparse too: the shards are dense
    assert heavy_among(loaded, (*HEAVY, "scipy.sparse")) == []


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["data", "make", "--help"],
                                  ["data", "import", "--help"]])
def test_the_commands_help_loads_neither_dask_nor_scipy(argv: list[str]) -> None:
    loaded = loaded_by(f"from dasklbfgs.cli.main import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass")
    assert "dasklbfgs.solvers.sandblaster.options" in loaded  # the flags were derived from the options
    assert heavy_among(loaded, NOT_FOR_HELP) == []


def test_python_m_dasklbfgs_is_the_command() -> None:
    done = subprocess.run([sys.executable, "-m", "dasklbfgs", "--version"], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    assert (done.returncode, done.stdout.strip()) == (0, f"dasklbfgs {dasklbfgs.__version__}")


def test_every_public_name_is_there_when_asked_for() -> None:
    """The lazy exports: ``from dasklbfgs import *`` gives every name of ``__all__``, each the
    object its own module defines, and ``dir()`` lists them before they are loaded."""
    out = subprocess.run(
        [sys.executable, "-c", "import dasklbfgs, json; listed = dir(dasklbfgs)\n"
                               "from dasklbfgs import *\n"
                               "print(json.dumps([listed, sorted(n for n in dasklbfgs.__all__ if n in globals())]))"],
        cwd=ROOT, capture_output=True, text=True, check=True)
    listed, imported = json.loads(out.stdout)
    assert sorted(dasklbfgs.__all__) == imported
    assert set(dasklbfgs.__all__) <= set(listed)
    from dasklbfgs.models.linear import Logistic as defined
    from dasklbfgs.solvers.registry import minimize

    assert dasklbfgs.Logistic is defined and dasklbfgs.minimize is minimize
    with pytest.raises(AttributeError, match="module 'dasklbfgs' has no attribute 'Logistics'"):
        dasklbfgs.Logistics  # noqa: B018 - the attribute access is the test


def test_a_pickled_options_object_needs_no_coordinator() -> None:
    """What front ends and workers read of a solver (its options) unpickles without its
    coordinator (Dask's client side, scipy.optimize)."""
    from dasklbfgs import SandblasterOptions

    blob = pickle.dumps(SandblasterOptions(maxiter=3))
    loaded = loaded_by(f"import pickle\nassert pickle.loads({blob!r}).maxiter == 3")
    assert "dasklbfgs.solvers.sandblaster.coordinator" not in loaded
    assert heavy_among(loaded, ("scipy", "distributed", "dask")) == []
