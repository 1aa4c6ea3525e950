"""The Training page rendered by a real browser (headless Chromium, driven by Playwright)
holds each run's curves, and compares two runs of different solvers on the axis they share."""

from __future__ import annotations

import os
import shutil

import pytest

from dasklbfgs import Logistic, Softmax, connect, sandblaster_lbfgs
from dasklbfgs.downpour import downpour_sgd

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
QUIET_FLAGS = [  # no sandbox as root; and no background traffic to hosts this machine can't reach
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
MODEL_JS = "(name) => Bokeh.documents[0].get_model_by_name(name)"
POINTS_JS = f"() => ({MODEL_JS})('run-loss').data.x.length"
PICK_JS = f"(run) => {{ ({MODEL_JS})('run-picker').value = run; }}"  # as a user's pick reaches the server
COMPARE_JS = f"(run) => {{ ({MODEL_JS})('compare-picker').value = run; }}"
COMPARED_JS = f"""() => ({{
    xTitle: ({MODEL_JS})('x-axis-loss').axis_label,
    legend: ({MODEL_JS})('legend-loss').items.map((item) => item.label.value),
    runX: Array.from(({MODEL_JS})('run-loss').data.x),
    compareX: Array.from(({MODEL_JS})('compare-loss').data.x),
    differs: ({MODEL_JS})('settings').data.differs,
    setting: ({MODEL_JS})('settings').data.setting,
}})"""
PAGE_JS = f"""() => ({{
    picker: ({MODEL_JS})('run-picker').options.map((option) => option[0]),
    status: ({MODEL_JS})('status').text,
    navbar: document.querySelector('.navbar') !== null,
    title: document.title,
    heldOut: ({MODEL_JS})('held-out-latest').data.metric,
    scores: ({MODEL_JS})('final-scores').data,
}})"""


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"),
                    reason="chromium is not installed (.ci/run installs it)")
def test_training_page_in_headless_chromium(datasets, tmp_path) -> None:
    assert CHROMIUM is not None, "chromium is missing: .ci/run should have installed it"
    from playwright.sync_api import sync_playwright

    with connect(n_workers=2, threads_per_worker=1, dashboard_address="127.0.0.1:0") as client:
        sb = sandblaster_lbfgs(Logistic(8, l2=1e-4), datasets["logistic-ill"], client=client, maxiter=12,
                               eval_data=datasets["logistic"], score=True, name="lbfgs-ill")
        dp = downpour_sgd(Softmax(8, 3), datasets["multinomial"], client=client, batch_size=20, epochs=2,
                          poll_interval=0.05)
        url = client.dashboard_link.rsplit("/", 1)[0] + "/training"
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=QUIET_FLAGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.goto(url)
                page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0", timeout=30_000)
                drawn = {}
                for result in (dp, sb):  # the newest run is shown first; then the user picks the other
                    page.evaluate(PICK_JS, result.run_id)
                    page.wait_for_function(f"() => ({MODEL_JS})('status').text.includes('{result.run_id}')",
                                           timeout=30_000)
                    page.wait_for_function(f"() => ({POINTS_JS})() > 5", timeout=30_000)
                    drawn[result.run_id] = {"points": page.evaluate(POINTS_JS), **page.evaluate(PAGE_JS)}
                    page.screenshot(path=str(tmp_path / f"{result.solver}.png"), full_page=True)
                # Sandblaster (iterations) compared with Downpour (global steps): on wall time, both named.
                page.evaluate(COMPARE_JS, dp.run_id)
                page.wait_for_function(f"() => ({MODEL_JS})('compare-loss').data.x.length > 5", timeout=30_000)
                page.wait_for_function(f"() => ({MODEL_JS})('legend-loss').items.length == 2", timeout=30_000)
                compared = page.evaluate(COMPARED_JS)
                page.screenshot(path=str(tmp_path / "compared.png"), full_page=True)
            finally:
                browser.close()
    assert drawn[sb.run_id]["points"] == sb.nit > 5  # one point per iteration, drawn in the browser
    assert drawn[dp.run_id]["points"] == len([h for h in dp.history if "loss" in h]) > 5
    for shown in drawn.values():
        assert shown["picker"] == [dp.run_id, sb.run_id]  # newest first
        assert shown["navbar"] and shown["title"] == "dasklbfgs: Training"
        assert "finished" in shown["status"]
    # The held-out figures and the final scores reach the browser by name.
    assert drawn[sb.run_id]["heldOut"] == ["held-out objective", "held-out accuracy"]
    scores = drawn[sb.run_id]["scores"]
    row = scores["metric"].index("log-loss")
    assert [float(scores[split][row]) for split in ("train", "test")] == [
        pytest.approx(sb.scores[split]["log_loss"], rel=1e-5) for split in ("train", "test")]
    assert drawn[dp.run_id]["heldOut"] == [] and drawn[dp.run_id]["scores"]["metric"] == []
    for solver in ("sandblaster", "downpour", "compared"):
        assert (tmp_path / f"{solver}.png").stat().st_size > 10_000
    # The comparison: the x axis both runs share is wall time, and the title says why; each line named.
    assert compared["xTitle"] == f"wall time (s) (shared: lbfgs-ill counts iterations, {dp.run_id} global steps)"
    assert compared["runX"] == pytest.approx([h["time"] for h in sb.history])
    assert compared["compareX"] == pytest.approx([h["time"] for h in dp.history if "loss" in h])
    assert compared["legend"][0] == "lbfgs-ill: objective (full batch)"
    assert compared["legend"][1] in [f"{dp.run_id}: mini-batch loss ({how})" for how in ("smoothed", "noisy")]
    assert compared["differs"][compared["setting"].index("solver")] == "≠"
