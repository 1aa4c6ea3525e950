"""The Training page rendered by a real browser (headless Chromium, driven by Playwright)
holds each run's curves, compares two runs of different solvers on the axis they share, and
shows in its tables' cells (what the user reads, not only the data the browser holds) the
figures of the run picked, and of a run it follows live as they change."""

from __future__ import annotations

import math
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from dasklbfgs import Logistic, Softmax, connect, sandblaster_lbfgs
from dasklbfgs.downpour import downpour_sgd
from dasklbfgs.monitor.runs import shown as as_shown
from dasklbfgs.scoring.names import held_out_label, metric_label

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
#: every DataTable's grid as the browser drew it (SlickGrid, in the table's shadow root, which
#: Playwright's CSS locators pierce): whether it shows, its column titles and its rows' cells, in
#: the order the rows stand on screen (SlickGrid places each row at its ``top``)
GRIDS_JS = """(grids) => grids.map((grid) => ({
    visible: grid.checkVisibility(),
    header: Array.from(grid.querySelectorAll('.slick-column-name'), (name) => name.textContent),
    rows: Array.from(grid.querySelectorAll('.slick-row'))
        .sort((a, b) => parseFloat(a.style.top) - parseFloat(b.style.top))
        .map((row) => Array.from(row.querySelectorAll('.slick-cell'), (cell) => cell.textContent)),
}))"""
#: the page follows the run named "live": it shows it running, with the held-out figures of its first iteration
FOLLOWING_JS = f"""() => ({MODEL_JS})('status').text.startsWith('<b>live</b>')
    && ({MODEL_JS})('status').text.includes('<b>running</b>') && ({MODEL_JS})('held-out-latest').data.step[0] == '1'"""
HELD_OUT_KEYS = ("eval_objective", "eval_accuracy")  # what these classifiers' runs record on held-out data


def _drawn_tables(page):
    """The page's tables as drawn, by what their first column titles say they are."""
    grids = page.locator(".bk-data-table").evaluate_all(GRIDS_JS)
    named = {"held-out": "held_out", "metric": "scores", "": "settings"}
    return {named[grid["header"][0]]: grid for grid in grids}


def _held_out_rows(result):
    """Each held-out figure's latest value and its step, from the run's own history, as the page shows them."""
    rows = []
    for key in HELD_OUT_KEYS:
        latest = [entry for entry in result.history if math.isfinite(entry.get(key, math.nan))][-1]
        rows.append([held_out_label(key), as_shown(latest[key]), as_shown(latest["step"])])
    return rows


def _score_rows(result):
    """The run's final scores (``result.scores``), train and test by metric, as the page shows them."""
    if "scores" not in result:  # a run not scored at its end
        return []
    train, test = result.scores["train"], result.scores["test"]
    rows = []
    for name in train:
        if name == "confusion_matrix":
            rows += [[f"{metric_label(name)}, true class {k}", as_shown(a), as_shown(b)]
                     for k, (a, b) in enumerate(zip(train[name], test[name]))]
        else:
            rows.append([metric_label(name), as_shown(train[name]), as_shown(test[name])])
    return rows


def _cells_show(page, result, *, seconds=5.0):
    """The tables' cells once they show ``result``'s figures (or, if they never do, after ``seconds``)."""
    want = _held_out_rows(result)
    deadline = time.monotonic() + seconds
    while True:
        tables = _drawn_tables(page)
        if tables["held_out"]["rows"] == want or time.monotonic() > deadline:
            return tables
        page.wait_for_timeout(100)


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"),
                    reason="chromium is not installed (.ci/run installs it)")
def test_training_page_in_headless_chromium(datasets, tmp_path) -> None:
    assert CHROMIUM is not None, "chromium is missing: .ci/run should have installed it"
    from playwright.sync_api import sync_playwright

    with connect(n_workers=2, threads_per_worker=1, dashboard_address="127.0.0.1:0") as client:
        sb = sandblaster_lbfgs(Logistic(8, l2=1e-4), datasets["logistic-ill"], client=client, maxiter=12,
                               eval_data=datasets["logistic"], score=True, name="lbfgs-ill")
        # held-out figures too: two rows in the held-out table, as many as the Sandblaster run's
        dp = downpour_sgd(Softmax(8, 3), datasets["multinomial"], client=client, batch_size=20, epochs=2,
                          poll_interval=0.05, eval_data=datasets["multinomial-ill"])
        url = client.dashboard_link.rsplit("/", 1)[0] + "/training"
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=QUIET_FLAGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.goto(url)
                page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0", timeout=30_000)
                drawn, tables = {}, {}
                for result in (dp, sb):  # the newest run is shown first; then the user picks the other
                    page.evaluate(PICK_JS, result.run_id)
                    page.wait_for_function(f"() => ({MODEL_JS})('status').text.includes('{result.run_id}')",
                                           timeout=30_000)
                    page.wait_for_function(f"() => ({POINTS_JS})() > 5", timeout=30_000)
                    drawn[result.run_id] = {"points": page.evaluate(POINTS_JS), **page.evaluate(PAGE_JS)}
                    tables[result.solver] = _cells_show(page, result)
                    page.screenshot(path=str(tmp_path / f"{result.solver}.png"), full_page=True)
                # Sandblaster (iterations) compared with Downpour (global steps): on wall time, both named.
                page.evaluate(COMPARE_JS, dp.run_id)
                page.wait_for_function(f"() => ({MODEL_JS})('compare-loss').data.x.length > 5", timeout=30_000)
                page.wait_for_function(f"() => ({MODEL_JS})('legend-loss').items.length == 2", timeout=30_000)
                compared = page.evaluate(COMPARED_JS)
                page.screenshot(path=str(tmp_path / "compared.png"), full_page=True)
                # Back to the newest run (Downpour), alone: the page follows new runs again ...
                page.evaluate(COMPARE_JS, "none")
                page.evaluate(PICK_JS, dp.run_id)
                page.wait_for_function(f"""() => ({MODEL_JS})('status').text.startsWith('<b>{dp.run_id}</b>')
                    && !({MODEL_JS})('status').text.includes('compared with')
                    && !({MODEL_JS})('status').text.includes('a newer run exists')""", timeout=30_000)
                tables["downpour again"] = _cells_show(page, dp)
                # ... and follows a run started now as it trains: the run waits after its first
                # iteration until the page shows it, then goes on at an iteration each half a second
                # (the page's refresh), so that the page draws several of its held-out figures in turn.
                showing = threading.Event()

                def paced(_) -> None:
                    showing.wait(timeout=30)
                    time.sleep(0.5)

                with ThreadPoolExecutor(1) as pool:
                    running = pool.submit(sandblaster_lbfgs, Logistic(8), datasets["logistic"], client=client,
                                          maxiter=10, eval_data=datasets["logistic-ill"], name="live", callback=paced)
                    try:
                        page.wait_for_function(FOLLOWING_JS, timeout=30_000)
                    finally:
                        showing.set()
                    live = running.result()
                page.wait_for_function(f"""() => ({MODEL_JS})('status').text.startsWith('<b>live</b>')
                    && ({MODEL_JS})('status').text.includes('<b>finished</b>')""", timeout=30_000)
                tables["live"] = _cells_show(page, live)
            finally:
                browser.close()
    assert drawn[sb.run_id]["points"] == sb.nit > 5  # one point per iteration, drawn in the browser
    assert drawn[dp.run_id]["points"] == len([h for h in dp.history if "loss" in h]) > 5
    for shown in drawn.values():
        assert shown["picker"] == [dp.run_id, sb.run_id]  # newest first
        assert shown["navbar"] and shown["title"] == "dasklbfgs: Training"
        assert "finished" in shown["status"]
    # The held-out figures and the final scores reach the browser by name.
    assert drawn[sb.run_id]["heldOut"] == drawn[dp.run_id]["heldOut"] == ["held-out objective", "held-out accuracy"]
    scores = drawn[sb.run_id]["scores"]
    row = scores["metric"].index("log-loss")
    assert [float(scores[split][row]) for split in ("train", "test")] == [
        pytest.approx(sb.scores[split]["log_loss"], rel=1e-5) for split in ("train", "test")]
    assert drawn[dp.run_id]["scores"]["metric"] == []
    for solver in ("sandblaster", "downpour", "compared"):
        assert (tmp_path / f"{solver}.png").stat().st_size > 10_000
    # The tables' cells, as drawn, are the figures of the run shown: after each pick, and after
    # following a run live to its end (not the first figures it drew, nor the previous run's).
    assert live.nit > 3  # iterations after the first, each with held-out figures the page drew in turn
    shown_runs = {"downpour": (dp, dp.run_id, "global step"), "sandblaster": (sb, "lbfgs-ill", "iteration"),
                  "downpour again": (dp, dp.run_id, "global step"), "live": (live, "live", "iteration")}
    assert {scenario: table["held_out"] for scenario, table in tables.items()} == {
        scenario: {"visible": True, "header": ["held-out", "latest", unit], "rows": _held_out_rows(result)}
        for scenario, (result, _, unit) in shown_runs.items()}
    assert {scenario: (table["scores"]["visible"], table["scores"]["rows"] if table["scores"]["visible"] else [])
            for scenario, table in tables.items()} == {
        scenario: ("scores" in result, _score_rows(result)) for scenario, (result, _, _) in shown_runs.items()}
    assert {scenario: (table["settings"]["header"][2], table["settings"]["rows"][0]) for scenario, table in
            tables.items()} == {scenario: (name, ["", "solver", result.solver])
                                for scenario, (result, name, _) in shown_runs.items()}
    # The comparison: the x axis both runs share is wall time, and the title says why; each line named.
    assert compared["xTitle"] == f"wall time (s) (shared: lbfgs-ill counts iterations, {dp.run_id} global steps)"
    assert compared["runX"] == pytest.approx([h["time"] for h in sb.history])
    assert compared["compareX"] == pytest.approx([h["time"] for h in dp.history if "loss" in h])
    assert compared["legend"][0] == "lbfgs-ill: objective (full batch)"
    assert compared["legend"][1] in [f"{dp.run_id}: mini-batch loss ({how})" for how in ("smoothed", "noisy")]
    assert compared["differs"][compared["setting"].index("solver")] == "≠"
