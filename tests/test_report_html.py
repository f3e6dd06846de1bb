"""The HTML report: self-contained, with the plots embedded, and shown by a real browser
(Debian's headless Chromium takes a screenshot; the screenshot must not be blank)."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import require
from test_report import golden_spec, make_run

from campaign import report as rp
from campaign.report import plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture()
def html_report(tmp_path: Path) -> tuple[rp.Report, str]:
    run = make_run(tmp_path / "results", golden_spec(), name="depth7", pairs=3)
    rep = rp.build_report([run])
    return rep, rp.render(rep, "html")


def test_html_is_self_contained_with_embedded_plots(html_report: tuple[rp.Report, str]) -> None:
    _, page = html_report
    imgs = re.findall(r"<img alt='([^']*)' src='data:image/png;base64,([A-Za-z0-9+/=]+)'>", page)
    assert [alt for alt, _ in imgs] == [
        "Knee curves", "Per-pair gains per cell", "Acceptance by content class"]
    for _, b64 in imgs:
        png = base64.b64decode(b64)
        assert png.startswith(PNG_MAGIC) and len(png) > 5000
    # nothing fetched from elsewhere: no external scripts, stylesheets or images
    assert not re.search(r"""(src|href)=['"](https?:|//|file:)""", page)
    assert "Decision: ADOPT" in page
    assert "sha256" in page


def test_figures_skip_what_was_not_measured(tmp_path: Path) -> None:
    run = make_run(tmp_path, {("knee", "c1", "output_token_throughput"):
                              [(100.0, 115.0), (100.5, 115.0)]}, guardrails=[])
    titles = [t for t, _ in plots.figures(rp.build_report([run]).latest)]
    assert titles == ["Knee curves", "Per-pair gains per cell"]


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
        "--window-size=1200,3000", "--hide-scrollbars", html_path.as_uri(),
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
