"""The HTML report: self-contained, with the plots embedded, and shown by a real browser
(Debian's headless Chromium takes a screenshot; the screenshot must not be blank)."""

from __future__ import annotations

import base64
import datetime as dt
import io
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from campaign import report as rp
from campaign.report import plots
from tests.cli import invoke
from tests.runs import SIM_RUN, T0, golden_spec, make_run, require

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def level_spec() -> dict[tuple[str, str, str], list[tuple[float, float]]]:
    """The golden run's knee with its spec-decode figures per level (the knee cut at its
    level boundaries): the candidate yields more per step, and its steps cost more, the
    more so at c4."""
    return {
        ("knee", "c1", "tokens_per_decode_step"): [(2.7, 3.3), (2.8, 3.2), (2.7, 3.25)],
        ("knee", "c4", "tokens_per_decode_step"): [(2.6, 2.9), (2.65, 2.95), (2.6, 2.9)],
        ("knee", "c1", "itl_p50"): [(10.0, 9.0), (10.2, 9.1), (10.1, 9.0)],
        ("knee", "c4", "itl_p50"): [(12.0, 12.5), (12.1, 12.4), (12.0, 12.6)],
        ("knee", "c1", "acceptance_pos0"): [(0.8, 0.85)] * 3,
        ("knee", "c1", "acceptance_pos1"): [(0.6, 0.7)] * 3,
        ("knee", "c4", "acceptance_pos0"): [(0.78, 0.8)] * 3,
        ("knee", "c4", "acceptance_pos1"): [(0.55, 0.6)] * 3,
    }


@pytest.fixture()
def html_report(tmp_path: Path) -> tuple[rp.Report, str]:
    run = make_run(tmp_path / "results", golden_spec() | level_spec(), name="depth7", pairs=3)
    rep = rp.build_report([run])
    return rep, rp.render(rep, "html")


def test_html_is_self_contained_with_embedded_plots(html_report: tuple[rp.Report, str]) -> None:
    rep, page = html_report
    imgs = re.findall(r"<img alt='([^']*)' src='data:image/png;base64,([A-Za-z0-9+/=]+)'>", page)
    assert [alt for alt, _ in imgs] == [t for _, t, _ in plots.figures(rep)]
    # every figure but the guardrails (none decided), the sequential path (a fixed design)
    # and the rate sweep (none measured)
    assert len(imgs) == len(plots.PLOTS) - 3
    for _, b64 in imgs:
        png = base64.b64decode(b64)
        assert png.startswith(PNG_MAGIC) and len(png) > 5000
    # nothing fetched from elsewhere: no external scripts, stylesheets or images
    assert not re.search(r"""(src|href)=['"](https?:|//|file:)""", page)
    assert "Decision: ADOPT" in page
    assert "sha256" in page
    # the decision comes first, before any table or plot
    body = page[page.index("<body>"):]
    assert body.index("Decision: ADOPT") < body.index("<table")


def test_figures_skip_what_was_not_measured(tmp_path: Path) -> None:
    run = make_run(tmp_path, {("knee", "c1", "output_token_throughput"):
                              [(100.0, 115.0), (100.5, 115.0)]}, guardrails=[])
    names = [n for n, _, _ in plots.figures(rp.build_report([run]))]
    assert names == ["knee", "pair-changes", "control-window"]


def test_sim_run_plots_every_figure_with_units(tmp_path: Path) -> None:
    """The real simulated run: every figure, per-position acceptance, axes with units. Its
    p99 TTFT is not shown within the +5% limit at four cells (two pairs, no sampling error
    recorded): those unclear guardrails stop adoption, so the guardrail figure is drawn,
    one panel each."""
    run = tmp_path / SIM_RUN.name
    shutil.copytree(SIM_RUN, run)
    rep = rp.build_report([run])
    figs = plots.figures(rep)
    assert [n for n, _, _ in figs] == ["knee", "pair-changes", "guardrails", "control-window",
                                       "acceptance"]
    guard = dict((n, f) for n, _, f in figs)["guardrails"]
    assert [a.get_title() for a in guard.axes] == [
        f"depth7: guardrail ttft_p99 at {where} unclear — stops adoption"
        for where in ("knee c1", "knee c16", "agentfix prose", "agentfix shell")]
    for name, _, fig in figs:
        for ax in fig.axes:
            assert ax.get_xlabel() and ax.get_ylabel(), name
            assert "(" in ax.get_ylabel(), f"{name}: no unit on {ax.get_ylabel()!r}"
    acc = dict((n, f) for n, _, f in figs)["acceptance"]
    assert [a.get_xlabel() for a in acc.axes] == [
        "content class (agent fixtures)", "draft position (0 = first drafted token)"]
    assert [t.get_text() for t in acc.axes[1].get_xticklabels()] == [str(i) for i in range(7)]


def test_history_plot_and_plot_files(tmp_path: Path) -> None:
    nights = [make_run(tmp_path, {("knee", "c1", "output_token_throughput"):
                                  [(100.0, 100.0 + g), (100.5, 100.5 + g)]},
                       guardrails=[], short_id=f"n{i:05d}", when=T0 + dt.timedelta(days=i))
              for i, g in enumerate((15.0, 2.0, 14.0))]
    rep = rp.build_report(nights)
    assert [n for n, _, _ in plots.figures(rep)][-1] == "history"
    written = plots.write_files(rep, tmp_path / "out" / "plots")
    names = sorted(p.name for p in written)
    assert "history.png" in names and "history.svg" in names
    for p in written:
        data = p.read_bytes()
        assert data.startswith(PNG_MAGIC) if p.suffix == ".png" else b"<svg" in data[:2000]


def test_cli_html_writes_plots_beside_the_page(golden_run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "site" / "report.html"
    out.parent.mkdir()
    proc = invoke("report", str(golden_run_dir), "--format", "html", "-o", str(out))
    assert proc.code == 0, proc.stderr
    files = sorted(p.name for p in (out.parent / "plots").iterdir())
    # no guardrail decided, a fixed design has no sequential path, no rate was swept
    drawn = [name for name, _, _ in plots.PLOTS
             if name not in ("guardrails", "sequential", "rates")]
    assert files == sorted(f"{n}{s}" for n in drawn for s in (".png", ".svg"))
    assert out.read_text(encoding="utf-8").count("data:image/png;base64,") == len(drawn)


@pytest.fixture()
def golden_run_dir(tmp_path: Path) -> Path:
    return make_run(tmp_path / "results", golden_spec() | level_spec(), name="depth7", pairs=3)


@pytest.mark.browser
def test_chromium_renders_the_page_with_its_plots(
    html_report: tuple[rp.Report, str], tmp_path: Path
) -> None:
    chromium = shutil.which("chromium")
    require(chromium is not None, "headless Chromium",
            "apt-get update && apt-get install -y chromium")
    assert chromium is not None
    _, page = html_report
    html_path = tmp_path / "report.html"
    html_path.write_text(page, encoding="utf-8")
    shot = tmp_path / "shot.png"
    cmd = [
        chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
        "--window-size=1200,6000", "--hide-scrollbars", html_path.as_uri(),
    ]
    # own process group and a hard limit: a stuck browser is killed whole, never left behind
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            import os
            import signal

            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert shot.is_file(), out.decode(errors="replace")[-2000:]
    data = shot.read_bytes()
    assert data.startswith(PNG_MAGIC)

    from matplotlib import image

    pixels = image.imread(str(shot))
    assert pixels.shape[0] >= 2000 and pixels.shape[1] >= 1000
    rgb = pixels[..., :3]
    # not blank: many distinct colours (the plots' blues and reds, the verdict colours)
    flat = (rgb.reshape(-1, 3) * 255).astype(int)
    colours = {tuple(c) for c in flat[:: 7]}
    assert len(colours) > 50
    # the embedded figures are drawn: plot blue (#1f77b4) appears somewhere in the page
    blue = (abs(flat[:, 0] - 0x1F) < 12) & (abs(flat[:, 1] - 0x77) < 12) & (
        abs(flat[:, 2] - 0xB4) < 12)
    assert blue.sum() > 200


def test_every_embedded_figure_is_drawn(html_report: tuple[rp.Report, str]) -> None:
    """Each figure the page embeds decodes to a PNG that is not blank (many colours)."""
    from matplotlib import image

    _, page = html_report
    imgs = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    # every figure but the guardrails (none decided), the sequential path (a fixed design)
    # and the rate sweep (none measured)
    assert len(imgs) == len(plots.PLOTS) - 3
    for b64 in imgs:
        pixels = image.imread(io.BytesIO(base64.b64decode(b64)), format="png")
        flat = (pixels[..., :3].reshape(-1, 3) * 255).astype(int)
        assert len({tuple(c) for c in flat[::5]}) > 30
        assert (flat.sum(axis=1) < 600).mean() > 0.01  # ink on the page, not only white


def test_cells_are_styled_by_their_label_and_read_in_plain_words(
        html_report: tuple[rp.Report, str]) -> None:
    """The text says the verdict in plain words ("no clear change"); the cell's colour
    still comes from its label (`within-drift`, styled by the page's CSS)."""
    _, page = html_report
    cells = re.findall(r"<td class='([a-z-]+)'(?: title='[^']*')?>([a-z -]+)</td>", page)
    labels = {label for label, _ in cells}
    assert "adopt" in labels
    assert all(f"td.{label}" in page or f".{label}{{" in page for label in labels), labels
    assert any(label != word for label, word in cells), cells  # plain words, styled by label
