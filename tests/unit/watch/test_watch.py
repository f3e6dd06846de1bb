"""`spec-ab watch`: a lane's control watched across nights (issue 40's "Done when")."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from campaign.watch import detect
from campaign.watch.series import Series
from tests.cli import invoke
from tests.unit.watch.nightly import noisy, write_lane, write_night


def _watch(*args: str) -> tuple[int, dict]:
    r = invoke("watch", *args, "--format", "json")
    return r.code, json.loads(r.stdout) if r.stdout.strip() else {}


def _series(values: np.ndarray, band: float = 0.03) -> Series:
    return Series("lane", "output_token_throughput", "knee/c1", "knee/c1", "higher", band,
                  (), tuple(float(v) for v in values))


def test_a_12pct_step_in_the_control_is_found_at_its_night_and_exits_1(tmp_path: Path
                                                                        ) -> None:
    tput = noisy(30, seed=3)
    tput[24:] *= 0.88
    dirs = write_lane(tmp_path, "gb10-a", tput)
    code, doc = _watch(str(tmp_path))
    assert code == 1
    (change,) = [c for c in doc["changes"] if c["metric"] == "output_token_throughput"]
    night = [str(d) for d in dirs].index(change["run"])
    assert abs(night - 24) <= 1
    assert change["direction"] == "worse" and change["lane"] == "gb10-a"
    assert change["cell"] == "knee/c1" and -0.16 < change["change"] < -0.08
    assert {c["metric"] for c in doc["changes"]} == {"output_token_throughput"}


def test_a_15pct_drop_in_acceptance_is_found_the_same_way(tmp_path: Path) -> None:
    acc = noisy(30, seed=5, level=0.6)
    acc[23:] *= 0.85
    dirs = write_lane(tmp_path, "gb300", noisy(30, seed=6), acc)
    code, doc = _watch(*map(str, dirs))
    assert code == 1
    found = {c["metric"]: c for c in doc["changes"]}
    assert "output_token_throughput" not in found
    night = [str(d) for d in dirs].index(found["acceptance_rate"]["run"])
    assert abs(night - 23) <= 1 and found["acceptance_rate"]["direction"] == "worse"


def test_a_stationary_series_reports_no_change_in_at_least_18_of_20_seeds() -> None:
    quiet = sum(not detect.detect(_series(noisy(365, seed=s, cv=0.03))).changes
                for s in range(20))
    assert quiet >= 18


def test_one_bad_night_is_an_outlier_not_a_lasting_change(tmp_path: Path) -> None:
    tput = noisy(24, seed=8)
    tput[12] *= 0.7  # one bad night inside the series
    tput[23] *= 0.7  # and the newest: the next night will tell
    dirs = write_lane(tmp_path, "lane", tput)
    code, doc = _watch(str(tmp_path))
    assert code == 0 and doc["changes"] == []
    (s,) = [s for s in doc["series"] if s["metric"] == "output_token_throughput"]
    assert s["outliers"] == [str(dirs[12]), str(dirs[23])]


def test_lanes_are_never_pooled(tmp_path: Path) -> None:
    """One lane 12% slower than the other all along is no change in either."""
    write_lane(tmp_path, "fast", noisy(12, seed=1))
    write_lane(tmp_path, "slow", noisy(12, seed=2) * 0.88)
    code, doc = _watch(str(tmp_path))
    assert code == 0 and doc["changes"] == []
    assert {s["lane"] for s in doc["series"]} == {"fast", "slow"}


def test_a_night_without_metrics_is_a_gap_not_a_zero(tmp_path: Path) -> None:
    acc: list[float | None] = [0.6] * 12
    acc[4] = acc[5] = None  # an external server without /metrics those nights
    write_lane(tmp_path, "ext", noisy(12, seed=4), acc)
    code, doc = _watch(str(tmp_path))
    assert code == 0 and doc["changes"] == []
    (s,) = [s for s in doc["series"] if s["metric"] == "acceptance_rate"]
    assert [n["value"] for n in s["nights"]][3:7] == [0.6, None, None, 0.6]
    assert s["cell"] == "knee/c1" and s["source"] == "knee/all"


def test_a_night_that_fails_verify_is_named_and_left_out_even_once_cached(
        tmp_path: Path) -> None:
    dirs = write_lane(tmp_path, "lane", noisy(12, seed=9))
    assert _watch(str(tmp_path))[0] == 0  # every night verified, and kept in the cache
    csv = dirs[6] / "passes.csv"
    csv.write_text(csv.read_text().replace("4096.0", "4097.0", 1))
    code, doc = _watch(str(tmp_path))
    assert code == 0
    assert [r["run"] for r in doc["refused"]] == [str(dirs[6])]
    assert "rows" in doc["refused"][0]["why"]
    (s,) = [s for s in doc["series"] if s["metric"] == "output_token_throughput"]
    assert str(dirs[6]) not in [n["run"] for n in s["nights"]]
    r = invoke("watch", str(tmp_path))
    assert "fails `spec-ab verify`" in r.stdout and str(dirs[6]) in r.stdout


def test_bad_input_is_one_message_and_exit_2(tmp_path: Path) -> None:
    r = invoke("watch", str(tmp_path / "nowhere"))
    assert r.code == 2 and "no such folder" in r.stderr and "Traceback" not in r.output
    (tmp_path / "empty").mkdir()
    r = invoke("watch", str(tmp_path / "empty"))
    assert r.code == 2 and "neither a run folder nor a folder holding runs" in r.stderr
    r = invoke("watch", str(tmp_path), "--since", "0")
    assert r.code == 2 and "--since 0" in r.stderr


def test_every_format_says_the_change_and_html_plots_each_series(tmp_path: Path) -> None:
    tput = noisy(20, seed=3)
    tput[14:] *= 0.88
    write_lane(tmp_path, "lane", tput)
    table = invoke("watch", str(tmp_path))
    assert table.code == 1 and "WORSE: lane lane: output_token_throughput" in table.stdout
    assert "spec-ab init --template aa" in table.stdout  # the advice, in words
    md = invoke("watch", str(tmp_path), "-f", "markdown")
    assert md.code == 1 and md.stdout.startswith("# spec-ab watch")
    out = tmp_path / "watch.html"
    html = invoke("watch", str(tmp_path), "-f", "html", "-o", str(out))
    assert html.code == 1 and out.read_text().count("data:image/png;base64,") == 6


def test_a_run_folder_inside_the_parent_is_given_once(tmp_path: Path) -> None:
    d = write_night(tmp_path, "lane", 0, 100.0)
    code, doc = _watch(str(tmp_path), str(d))
    assert code == 0 and len(doc["series"][0]["nights"]) == 1


def test_nights_checked_on_several_cores_come_back_in_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pooled check (a long history's first watch) gives what one by one gives."""
    from campaign.watch import nights

    dirs = write_lane(tmp_path, "lane", noisy(6, seed=2))
    (dirs[2] / "passes.csv").write_text("damaged\n")
    monkeypatch.setattr(nights, "POOL_FROM", 2)
    monkeypatch.setattr(nights.os, "cpu_count", lambda: 2)
    found, refused = nights.read_nights(nights.run_folders([tmp_path]))
    assert [n.run_dir for n in found] == [str(d) for i, d in enumerate(dirs) if i != 2]
    assert [r.run_dir for r in refused] == [str(dirs[2])]


def test_a_change_older_than_since_is_reported_but_does_not_fail(tmp_path: Path) -> None:
    tput = noisy(30, seed=3)
    tput[20:] *= 0.88
    write_lane(tmp_path, "lane", tput)
    code, doc = _watch(str(tmp_path), "--since", "7")
    assert code == 0 and doc["failing"] == []
    (change,) = doc["changes"]
    assert change["recent"] is False and change["direction"] == "worse"
    assert _watch(str(tmp_path), "--since", "12")[0] == 1


def test_no_night_that_verifies_is_exit_2_naming_each(tmp_path: Path) -> None:
    dirs = write_lane(tmp_path, "lane", [100.0, 101.0])
    for d in dirs:
        (d / "passes.csv").write_text("damaged\n")
    r = invoke("watch", str(tmp_path))
    assert r.code == 2 and "no night to watch" in r.stderr
    assert all(str(d) in r.stdout for d in dirs) and "Traceback" not in r.output


def test_an_older_night_s_lane_is_read_from_its_manifest(tmp_path: Path) -> None:
    write_night(tmp_path, "gb10", 0, 100.0)
    write_night(tmp_path, "gb10", 1, 101.0, lane_in_journal=False)
    code, doc = _watch(str(tmp_path))
    assert code == 0 and doc["refused"] == []
    assert {s["lane"] for s in doc["series"]} == {"gb10"}
    assert len(doc["series"][0]["nights"]) == 2
