"""The report page in a real browser (headless Chromium): every figure loads, no console errors, nothing fetched
from the network; and the README's Results section agrees with the metrics."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from prenet.rendering.browser import check_page, find_chromium
from prenet.rendering.results import current_block, replace_block, results_markdown

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_run(tiny_pipeline):
    """The tiny run up to report (conftest.tiny_pipeline: only these stages and their upstream)."""
    return tiny_pipeline("report")


@pytest.fixture(scope="module")
def chromium():
    """Debian's chromium (the test setup installs it: `make test-deps`, run by `make test` and .ci/run). Without it
    the browser tests skip — unless PRENET_REQUIRE_CHROMIUM=1 (set by .ci/run), where they fail."""
    exe = find_chromium()
    if exe is None:
        if os.environ.get("PRENET_REQUIRE_CHROMIUM") == "1":
            pytest.fail("chromium is required (PRENET_REQUIRE_CHROMIUM=1) but not installed: apt-get install -y chromium")
        pytest.skip("chromium not installed (apt-get install -y chromium, or `make test-deps`)")
    return exe


def test_report_renders_in_chromium_with_every_figure_and_no_console_error(tiny_run, chromium):
    root, cfg, _ = tiny_run
    page = Path(cfg.paths.report) / "index.html"
    html = page.read_text()
    assert "<script src=" not in html and "http://" not in html and "https://" not in html  # self-contained: no CDN
    check = check_page(page, chromium=chromium)
    assert check.figures >= 10, check
    assert check.loaded == check.figures and not check.console_errors and not check.external_requests, check
    files = {p.name for p in Path(cfg.paths.report).glob("*.png")}
    assert {
        "holdout_scatter.png",
        "holdout_mape_by_hardware.png",
        "memory_scatter.png",
        "interval_ratios.png",
        "convergence_curves.png",
        "outcome_by_epoch.png",
        "outcome_ablation.png",
        "outcome_importance.png",
    } <= files


def test_report_is_readable_at_100_percent_zoom(tiny_run, chromium, tmp_path):
    """Every figure fits the page's column at its natural size, no text of a figure reaches past its canvas and no
    panel titles overlap (checked when each PNG is written), and in a 1280-px Chromium window no figure is scaled
    down and no text is cut at the window's edge; the screenshot is what a reader sees."""
    from PIL import Image

    from prenet.rendering.figures import MAX_WIDTH_PX

    root, cfg, _ = tiny_run
    for png in sorted(Path(cfg.paths.report).glob("*.png")):
        with Image.open(png) as im:
            assert im.width <= MAX_WIDTH_PX, (png.name, im.width)
            assert im.text.get("Description") == "ok", (png.name, im.text.get("Description"))
    check = check_page(Path(cfg.paths.report) / "index.html", chromium=chromium, screenshot=tmp_path / "shot.png")
    assert not check.scaled_figures and not check.clipped_text, (check.scaled_figures, check.clipped_text)
    with Image.open(check.screenshot) as shot:
        assert shot.width == 1280 and len(set(shot.convert("L").resize((64, 64)).getdata())) > 10  # rendered, not blank


def test_the_browser_check_catches_a_broken_page(tmp_path, chromium):
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!doctype html><html><body><img src="missing.png"><script>console.error("boom"); undefinedName();</script>'
        + __import__("prenet.rendering.html", fromlist=["LOAD_CHECK"]).LOAD_CHECK
        + "</body></html>"
    )
    check = check_page(bad, chromium=chromium)
    assert check.figures == 1 and check.loaded == 0
    assert any("boom" in e for e in check.console_errors) and any("undefinedName" in e for e in check.console_errors)
    assert not check.ok


def test_report_numbers_come_from_the_metrics_files(tiny_run):
    root, cfg, _ = tiny_run
    html = (Path(cfg.paths.report) / "index.html").read_text()
    ev = json.loads((Path(cfg.paths.plots) / "evaluate.json").read_text())
    assert f"{ev['overall']['mape_pct']:.3g}" in html
    import hashlib

    md5 = hashlib.md5((Path(cfg.paths.plots) / "evaluate.json").read_bytes()).hexdigest()
    assert md5 in html  # provenance table


def test_readme_results_agree_with_the_metrics():
    readme = (ROOT / "README.md").read_text()
    block = current_block(readme)
    assert block is not None, "README.md has no generated Results section; run `python scripts/write_results.py`"
    assert block == results_markdown(ROOT / "data" / "plots"), (
        "README.md's Results section differs from data/plots; run `python scripts/write_results.py`"
    )


def test_results_section_follows_a_changed_metric(tmp_path):
    mdir = tmp_path / "metrics"
    shutil.copytree(ROOT / "data" / "plots", mdir)
    before = results_markdown(mdir)
    ev = json.loads((mdir / "evaluate.json").read_text())
    ev["overall"]["mape_pct"] = 99.25
    (mdir / "evaluate.json").write_text(json.dumps(ev))
    after = results_markdown(mdir)
    assert after != before and "99.2 %" in after
    readme = "# x\n\n## Results\n\n" + before + "\n\nafter\n"
    assert current_block(replace_block(readme, after)) == after and replace_block(readme, after).endswith("after\n")


def test_prenet_report_command_renders_the_stages_page_with_its_overrides(tmp_path, capsys, monkeypatch):
    """``prenet report [overrides]`` runs the report stage's own function on the composed, rooted config (the end-to-end
    test renders that page; a second render here took 12 s of make test)."""
    import pipeline.report
    from pipeline.cli import main

    seen = []
    monkeypatch.setattr(pipeline.report, "report", lambda cfg: seen.append(cfg) or {"html": Path(cfg.paths.report) / "index.html"})
    out = tmp_path / "again"
    assert main(["report", f"paths.report={out}"]) == 0
    assert len(seen) == 1 and Path(seen[0].paths.report) == out and Path(seen[0].paths.plots).is_absolute()
    assert f"open {out / 'index.html'} in a browser (self-contained" in capsys.readouterr().out


def test_cost_check_rows_show_this_run_then_the_reference_labelled(tmp_path):
    mdir = tmp_path / "metrics"
    shutil.copytree(ROOT / "data" / "plots", mdir)
    (mdir / "forecast_cost.json").write_text(json.dumps({"enabled": False}))
    assert "cost ratio, full-data fine-tune | not run" in results_markdown(mdir)
    run = {
        "regime": "in",
        "n_train": 30000,
        "steps": 2340,
        "train_seconds": 250.0,
        "real_steps": {"relative_eps=0.1": 300},
        "variants": {"plain_subset128": {"cost_ratio": 80.0, "median_abs_pct_error": 12.5, "drift": None}},
    }
    ref = {"enabled": True, "measured": "2026-11-30", "reproduce": "python -m pipeline.forecast_cost convergence=full", "tasks": {"t lr=0.005": run}}
    (tmp_path / "reference").mkdir()
    (tmp_path / "reference" / "forecast_cost.json").write_text(json.dumps(ref))
    md = results_markdown(mdir)
    assert "plain_subset128: 80×, 12.5 %" in md and "reference run of 2026-11-30" in md
    this_run = {**ref, "tasks": {"t lr=0.01": {**run, "n_train": 10000, "variants": {"default": {"cost_ratio": 5.0, "median_abs_pct_error": 30.0}}}}}
    (mdir / "forecast_cost.json").write_text(json.dumps(this_run))  # enabled in this run: its row, then the reference's
    md = results_markdown(mdir)
    mine, theirs = md.index("default: 5×, 30.0 %"), md.index("plain_subset128: 80×, 12.5 %")
    assert mine < theirs and "(this run)" in md[:theirs] and "reference run of 2026-11-30" in md[mine:]


def test_cost_check_rows_show_the_default_forecast_from_other_subset_draws():
    """One subset draw is one noisy estimate (docs/convergence.md): where the stage forecast again with other seeds,
    each fine-tune's row gives their answers and a summary row the headline measure per draw."""
    from prenet.rendering.results import _cost_check

    default = {
        "cost_ratio": 40.0,
        "median_abs_pct_error": 15.0,
        "median_abs_pct_error_q": 15.0,
        "subset_seeds": {"1": {"cost_ratio": 42.0, "median_abs_pct_error_q": 8.0}},
    }
    run = {"regime": "in", "n_train": 30000, "steps": 2340, "train_seconds": 250.0, "real_steps": {"loss=0.5": 30}, "variants": {"default": default}}
    rec = {"tasks": {"t m=0": run}, "summary": {"default_cost_ratio": 40.0}, "default_error_pct_by_subset_seed": {"0": 15.0, "1": 8.0}}
    rows = _cost_check(rec)
    assert "(other subset draws, seed 1: 42×, q·L₀ 8.0 %)" in rows[0][1]
    assert rows[-1][1].startswith("seed 0: 15.0 %; seed 1: 8.0 %; cost 40×") and "per subset draw" in rows[-1][0]
    assert len(_cost_check({**rec, "default_error_pct_by_subset_seed": {"0": 15.0}})) == 1  # one draw: no summary row
