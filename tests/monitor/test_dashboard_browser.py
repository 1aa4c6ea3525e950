"""The Training page rendered by a real browser (headless Chromium, driven by Playwright)
holds the run's curves."""

from __future__ import annotations

import os
import shutil

import pytest

from dasklbfgs import Logistic, connect, sandblaster_lbfgs

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
QUIET_FLAGS = [  # no sandbox as root; and no background traffic to hosts this machine can't reach
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
POINTS_JS = """() => {
    let most = 0;
    for (const model of Bokeh.documents[0].all_models) {
        if (model.type === "ColumnDataSource" && model.data.x !== undefined) most = Math.max(most, model.data.x.length);
    }
    return most;
}"""


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"),
                    reason="chromium is not installed (.ci/run installs it)")
def test_training_page_in_headless_chromium(datasets, tmp_path) -> None:
    assert CHROMIUM is not None, "chromium is missing: .ci/run should have installed it"
    from playwright.sync_api import sync_playwright

    with connect(n_workers=1, dashboard_address="127.0.0.1:0") as client:
        result = sandblaster_lbfgs(Logistic(8, l2=1e-3), datasets["logistic"], client=client)
        url = client.dashboard_link.rsplit("/", 1)[0] + "/training"
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=QUIET_FLAGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1300, "height": 900})
                page.goto(url)
                page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0", timeout=30_000)
                page.wait_for_function(f"() => ({POINTS_JS})() >= {result.nit}", timeout=30_000)
                points = page.evaluate(POINTS_JS)
                assert page.title() == "dasklbfgs: Training"
                page.screenshot(path=str(tmp_path / "training.png"))
            finally:
                browser.close()
    assert points == result.nit  # one point per iteration, drawn in the browser
    assert (tmp_path / "training.png").stat().st_size > 10_000
