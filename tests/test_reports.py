"""The parts of a pipeline report that need no cluster: curves, axis ranges, the report
folder, the versions, and recipe data built once in the data home."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dasklbfgs.data.cache import recipe_datasets, recipe_folder
from dasklbfgs.errors import ConfigurationError, DatasetExistsError
from dasklbfgs.pipeline.curves import (
    curves_figure,
    honest_limits,
    learning_curves,
    plot_curves,
    smoothed,
    smoothing_weight,
)
from dasklbfgs.pipeline.report import staged_report, versions

WINE = {"rows": None, "features": None, "shard_rows": 60, "seed": 0, "n_classes": None, "ill_conditioned": False,
        "test_fraction": 0.2, "patch_size": None, "image_source": None, "vocab_size": None, "context": None}


def test_smoothing_is_the_debiased_moving_average() -> None:
    values = [4.0, 2.0, 6.0]
    expected, average = [], 0.0
    for i, v in enumerate(values, start=1):  # TensorBoard's rule, written out
        average = 0.5 * average + 0.5 * v
        expected.append(average / (1 - 0.5 ** i))
    np.testing.assert_allclose(smoothed(values, 0.5), expected)
    assert smoothed([3.0] * 5, 0.9).tolist() == pytest.approx([3.0] * 5)  # no start-up bias toward 0
    assert (smoothing_weight(10), smoothing_weight(50), smoothing_weight(1000)) == (0.0, 0.8, 0.9)


def test_axis_ranges_keep_small_wiggles_small() -> None:
    low, high = honest_limits([0.9001, 0.9003], log=False)
    assert low < 0.9001 and high > 0.9003 and high - low >= 0.09  # a tenth of the values' size
    low, high = honest_limits([1.0, 1.1, float("nan"), 0.0, -1.0], log=True)
    assert math.log10(high / low) >= 1.0 and low < 1.0 and high > 1.1  # a decade; 0, -1 and nan left out
    low, high = honest_limits([1e-9, 1e-1], log=True)
    assert low < 1e-9 and high > 1e-1 and math.log10(high / low) < 9  # a wide range only padded
    assert honest_limits([float("nan")], log=False) is None


def test_learning_curves_say_what_they_are(tmp_path) -> None:
    history = [{"step": 10 * i, "time": 0.1 * i, "loss": 2.0 / i} for i in range(1, 40)]
    history[5].update(eval_objective=0.9, eval_accuracy=0.7)
    history.append({"step": 400, "time": 4.0, "loss": float("nan"), "eval_objective": 0.8,
                    "eval_accuracy": 0.75})  # a final entry without a finite training loss
    curves = learning_curves(history, "downpour")
    assert (curves["x"], curves["train"], curves["heldout_metric"]) == ("global step", "mini-batch loss", "accuracy")
    assert "train" not in curves["points"][-1] and curves["points"][-1]["heldout"] == 0.75
    assert curves["points"][5] == {"step": 60, "time": pytest.approx(0.6), "train": pytest.approx(1 / 3),
                                   "heldout_objective": 0.9, "heldout": 0.7}
    exact = learning_curves([{"step": 1, "time": 0.1, "loss": 1.0, "gnorm": 0.5}], "sandblaster")
    assert (exact["x"], exact["train"], exact["heldout_metric"]) == ("iteration", "objective", None)
    for curve in (curves, exact):
        png = plot_curves(curve, tmp_path / f"{curve['solver']}.png", title="t")
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_curves_png_marks_the_best_held_out_point() -> None:
    """A run that overfits after iteration 8: the star sits at the best held-out accuracy and
    the lowest held-out objective, and the legend says where; the suboptimality panel says
    what it is relative to."""
    import matplotlib.pyplot as plt

    accuracy = [0.5, 0.6, 0.7, 0.75, 0.8, 0.82, 0.84, 0.86, 0.85, 0.83, 0.8, 0.79]
    history = [{"step": i, "time": 0.1 * i, "loss": 1.0 / i, "gnorm": 0.1 / i, "eval_accuracy": a,
                "eval_objective": 1.2 - a} for i, a in enumerate(accuracy, start=1)]
    fig = curves_figure(learning_curves(history, "sandblaster"), title="t")
    try:
        by_title = {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}
        assert "Suboptimality (relative to the lowest objective reached)" in by_title
        stars = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
                 for ax in fig.axes for line in ax.get_lines() if line.get_marker() == "*"}
        assert stars == {"best held-out accuracy 0.86 at iteration 8": ([8], [0.86]),
                         "best held-out objective 0.34 at iteration 8": ([8], [pytest.approx(0.34)])}
        legend = [t.get_text() for t in by_title["Held-out accuracy"].get_legend().get_texts()]
        assert "best held-out accuracy 0.86 at iteration 8" in legend
    finally:
        plt.close(fig)


def test_a_report_is_written_whole_or_not_at_all(tmp_path) -> None:
    with pytest.raises(RuntimeError, match="training failed"):
        with staged_report(tmp_path, "run", overwrite=False) as folders:
            (folders["staging"] / "metrics.json").write_text("{}")
            raise RuntimeError("training failed")
    assert list(tmp_path.iterdir()) == []
    for expected in ("run", "run-2"):
        with staged_report(tmp_path, "run", overwrite=False) as folders:
            (folders["staging"] / "metrics.json").write_text(expected)
        assert folders["path"] == tmp_path / expected and (folders["path"] / "metrics.json").read_text() == expected
    with staged_report(tmp_path, "run", overwrite=True) as folders:
        (folders["staging"] / "metrics.json").write_text("new")
    assert (tmp_path / "run" / "metrics.json").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "run-2"]
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigurationError, match=r"the report folder '.*file' cannot be written"):
        with staged_report(tmp_path / "file", "run", overwrite=False):
            pass


def test_a_report_in_a_bucket_that_is_not_there_fails_before_the_run(s3) -> None:
    options = s3[1]
    with pytest.raises(ConfigurationError, match=r"the report folder 's3://no-such-bucket-here/reports' cannot be "
                                                 r"written: .*bucket does not exist"):
        with staged_report("s3://no-such-bucket-here/reports", "run", overwrite=False, storage_options=options):
            raise AssertionError("the run started")


def test_the_durations_are_documented_as_defined() -> None:
    from pathlib import Path

    from dasklbfgs.pipeline.run import DURATIONS

    text = " ".join((Path(__file__).resolve().parents[1] / "pipelines" / "README.md").read_text().split())
    for key, meaning in DURATIONS.items():
        assert f"`{key}`: {meaning}" in text


def test_versions_follow_the_installed_packages() -> None:
    import dask
    import numpy
    import zarr

    found = versions()
    assert list(found)[:2] == ["dasklbfgs", "python"]
    assert (found["numpy"], found["dask"], found["zarr"]) == (numpy.__version__, dask.__version__, zarr.__version__)


def test_recipe_data_is_built_once_and_checked_when_reused(tmp_path, data_home) -> None:
    splits, reused = recipe_datasets("wine", WINE)
    assert not reused and splits["train"].path.parent == recipe_folder("wine", WINE)
    assert splits["train"].path.is_relative_to(data_home) and splits["train"].attrs["recipe"]["kind"] == "wine"
    again, reused = recipe_datasets("wine", WINE)
    assert reused and again["test"].path == splits["test"].path
    assert recipe_folder("wine", {**WINE, "seed": 1}) != recipe_folder("wine", WINE)  # other options, other data
    chosen, reused = recipe_datasets("wine", WINE, tmp_path / "mine")
    assert not reused and chosen["train"].path == tmp_path / "mine" / "train"
    with pytest.raises(DatasetExistsError, match=r"data.path '.*mine' already exists and does not hold the 'wine'"):
        recipe_datasets("wine", {**WINE, "seed": 1}, tmp_path / "mine")  # never replaced: the user chose it
    assert recipe_datasets("wine", WINE, tmp_path / "mine")[1]
