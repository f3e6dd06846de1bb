"""preregistration.json read back as a typed `Registration`, older results schemas migrated
in memory, damaged files refused by name; the frozen campaign read back as the model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from campaign import RESULTS_SCHEMA_VERSION, __version__
from campaign import report as rp
from campaign.campaignfile import Campaign, Preregistration, load_campaign
from campaign.errors import EXIT_USAGE, ResultsError, SpecError
from campaign.results.integrity import PRE_CHAIN_NOTE
from campaign.results.registration import (
    CellRef,
    Registration,
    registered_levels,
    rule_hash,
    update_to_2,
    update_to_3,
    values_hash,
)
from campaign.results.store import RunStore, load_run
from tests.runs import SIM_RUN, TPUT, make_run, unchain

RULE = Preregistration().model_dump(mode="json", by_alias=True)
FIXED = {k: v for k, v in RULE.items() if k not in ("sequential", "slo")}
"""What a fixed design registers: no `sequential: null` (its hash as before designs)."""


def registration(**kw: Any) -> Registration:
    args: dict[str, Any] = {"campaign": "demo", "arms": ["control", "cand"],
                            "drift_band": 0.03, "registered_at": "2026-11-29T10:00:00.000Z"}
    return Registration.new(RULE, **{**args, **kw})


def test_round_trip(tmp_path: Path) -> None:
    reg = registration()
    path = tmp_path / "preregistration.json"
    reg.save(path)
    back = Registration.load(path)
    assert back == reg
    assert back.written_version == back.schema_version == RESULTS_SCHEMA_VERSION == 3
    assert back.tool_version == __version__ and back.rule_intact
    assert back.sha256 == rule_hash(FIXED) and back.rule == FIXED
    assert list(json.loads(path.read_text())) == [
        "schema_version", "campaign", "registered_at", "arms", "rule", "drift_band", "sha256",
        "tool_version", "values_sha256", "levels", "guardrail_bands", "journal_chain"]
    assert back.journal_chain == 1
    assert back.values_sha256 == values_hash(FIXED, 0.03, ["control", "cand"])
    design = Registration.new(Preregistration(sequential={"max_pairs": 4}).model_dump(
        mode="json", by_alias=True), campaign="d", arms=["control", "cand"], drift_band=0.03,
        registered_at="2026-11-29T10:00:00.000Z")
    assert design.rule["sequential"]["max_pairs"] == 4 and design.rule["pairs"] == 4
    with pytest.raises(FileExistsError):
        reg.save(path)  # never replaced


def test_store_registers_through_the_model(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path, "demo", b"name: demo\n", short_id="abcdef")
    digest = store.register(RULE, campaign="demo", arms=["control", "cand"], drift_band=0.02)
    reg = Registration.load(store.run_dir / "preregistration.json")
    assert reg.sha256 == digest and reg.drift_band == 0.02 and reg.schema_version == 3


@pytest.fixture()
def sim_run(tmp_path: Path) -> Path:
    run = tmp_path / SIM_RUN.name
    shutil.copytree(SIM_RUN, run)
    return run


def test_schema_1_directory_is_migrated_in_memory_only(sim_run: Path) -> None:
    before = {p.name: p.read_bytes() for p in sim_run.iterdir()}
    assert json.loads(before["preregistration.json"])["schema_version"] == 1
    data = load_run(sim_run)
    assert data.schema_version == 1 and data.registration.written_version == 1
    reg = data.registration
    assert reg.schema_version == RESULTS_SCHEMA_VERSION and reg.tool_version is None
    assert reg.rule_intact and reg.levels is None
    assert (reg.campaign, reg.arms, reg.drift_band) == ("sim-depth7", ["control", "depth7"], 0.03)
    rep = rp.build_report([sim_run])
    assert json.loads(rp.render(rep, "json"))["results_schema_version"] == 1
    assert {p.name: p.read_bytes() for p in sim_run.iterdir()} == before  # never rewritten
    RunStore.open(sim_run)  # a schema-1 run can still be resumed


def test_update_to_2_keeps_everything_else() -> None:
    v1 = {"schema_version": 1, "campaign": "c", "rule": {"margin": 0.1}, "sha256": "x"}
    assert update_to_2(v1) == {**v1, "schema_version": 2, "tool_version": None,
                               "values_sha256": None}
    assert v1["schema_version"] == 1  # the input is not changed


def test_update_to_3_adds_no_levels_and_no_guardrail_bands() -> None:
    v2 = {"schema_version": 2, "campaign": "c", "values_sha256": "y"}
    assert update_to_3(v2) == {**v2, "schema_version": 3, "levels": None,
                               "guardrail_bands": None}


def test_schema_2_directory_is_read_and_verified_as_before(tmp_path: Path) -> None:
    """A schema-2 registration (no `levels`; values_sha256 over rule, band and arms) keeps
    its hash, is migrated in memory, and its verdict reads the levels from campaign.yaml."""
    run = make_run(tmp_path, ADOPTS, guardrails=[])
    unchain(run)  # a schema-2 run's journal recorded no file digests
    path = run / "preregistration.json"
    doc = json.loads(path.read_text())
    del doc["levels"], doc["guardrail_bands"]
    doc["schema_version"] = 2
    doc["values_sha256"] = values_hash(doc["rule"], doc["drift_band"], doc["arms"])
    path.chmod(0o644)
    path.write_text(json.dumps(doc))
    data = load_run(run)
    assert data.schema_version == 2 and data.registration.levels is None
    assert data.registration_edits == ()
    assert data.notes == (PRE_CHAIN_NOTE,)  # the only note: a journal before the chain
    rep = rp.build_report([run])
    assert rep.latest.decision == "adopt" and rep.latest.results_schema_version == 2


def test_frozen_campaign_comes_back_as_the_model(sim_run: Path) -> None:
    data = load_run(sim_run)
    campaign = data.campaign
    assert isinstance(campaign, Campaign) and data.campaign_problems == ()
    assert campaign.name == "sim-depth7" and campaign.arm_names == ["control", "depth7"]
    assert campaign.workloads.levels("knee") == ["c1", "c4", "c16"]
    assert campaign.source == (sim_run / "campaign.yaml").resolve()
    # relative paths resolve against the original campaign folder the journal names
    assert campaign.base_dir == Path("/work/main/examples").resolve()
    assert campaign.launches["depth7"].env["SPECAB_SIM_DEPTH"] == "7"


def test_frozen_campaign_shared_by_content_but_knows_its_file(tmp_path: Path) -> None:
    a = make_run(tmp_path, {("knee", "c1", TPUT): [(100.0, 115.0)]}, short_id="aaaaa1", pairs=1)
    b = make_run(tmp_path, {("knee", "c1", TPUT): [(100.0, 115.0)]}, short_id="aaaaa2", pairs=1)
    ca, cb = load_run(a).campaign, load_run(b).campaign
    assert ca is not None and cb is not None
    assert ca.model_dump() == cb.model_dump() and ca.launches == cb.launches
    assert (ca.source, cb.source) == ((a / "campaign.yaml").resolve(),
                                      (b / "campaign.yaml").resolve())


def test_lenient_load_skips_the_checks_of_named_files(tmp_path: Path) -> None:
    frozen = tmp_path / "campaign.yaml"
    shutil.copy(SIM_RUN / "campaign.yaml", frozen)
    with pytest.raises(SpecError, match="does not exist"):
        load_campaign(frozen, base_dir=tmp_path)
    campaign = load_campaign(frozen, base_dir=tmp_path, check_files=False)
    assert campaign.resolve("x") == (tmp_path / "x").resolve()


def test_invalid_frozen_campaign_is_reported_not_fatal(tmp_path: Path) -> None:
    run = make_run(tmp_path, {("knee", "c1", TPUT): [(100.0, 115.0), (100.5, 115.6)]},
                   guardrails=[])
    (run / "campaign.yaml").write_text("name: demo\nlane: sim\n")
    data = load_run(run)
    assert data.campaign is None and "server: required but missing" in data.campaign_problems
    rep = rp.build_report([run])
    assert rep.latest.decision == "adopt" and rep.latest.lane == ""
    assert any("not a valid campaign" in n for n in rep.latest.notes)


def test_frozen_rule_no_longer_valid_is_named(tmp_path: Path) -> None:
    run = make_run(tmp_path, {("knee", "c1", TPUT): [(100.0, 115.0), (100.5, 115.6)]},
                   guardrails=[])
    path = run / "campaign.yaml"
    doc = json.loads(path.read_text())
    doc["preregistration"]["margin"] = "lots"
    path.write_text(json.dumps(doc))
    rep = rp.build_report([run])
    assert rep.latest.edited_after_registration == ("preregistration (no longer valid)",)
    assert rep.latest.decision == "adopt"


DAMAGED: list[tuple[str, str, str]] = [
    ("not-json", "{not json", "unreadable"),
    ("list", "[1, 2]", "not a JSON object but a list"),
    ("string-version", json.dumps({"schema_version": "1"}), "schema_version '1' is not"),
    ("no-version", json.dumps({"campaign": "demo"}), "'schema_version' is missing"),
    ("newer", json.dumps({"schema_version": RESULTS_SCHEMA_VERSION + 1}), "upgrade spec-ab"),
]


def _valid_doc() -> dict[str, Any]:
    return registration().model_dump(mode="json")


def _without(key: str) -> str:
    doc = _valid_doc()
    del doc[key]
    return json.dumps(doc)


DAMAGED += [
    ("no-sha256", _without("sha256"), "'sha256' is missing"),
    ("no-rule", _without("rule"), "'rule' is missing"),
    ("band", json.dumps({**_valid_doc(), "drift_band": 1.5}), "drift_band: 1.5 is not a fraction"),
    ("band-bool", json.dumps({**_valid_doc(), "drift_band": True}), "drift_band: True"),
    ("one-arm", json.dumps({**_valid_doc(), "arms": ["control"]}), "arms: List should have"),
    ("unknown-key", json.dumps({**_valid_doc(), "extra": 1}), "extra: Extra inputs"),
    ("v1-missing-sha", json.dumps({k: v for k, v in {**_valid_doc(), "schema_version": 1}.items()
                                   if k not in ("sha256", "tool_version")}), "'sha256' is missing"),
]


@pytest.mark.parametrize("case,text,expected", DAMAGED, ids=[d[0] for d in DAMAGED])
def test_damaged_preregistration_names_the_file(tmp_path: Path, case: str, text: str,
                                                expected: str) -> None:
    run = make_run(tmp_path, {("knee", "c1", TPUT): [(100.0, 115.0)]}, pairs=1, guardrails=[])
    path = run / "preregistration.json"
    path.chmod(0o644)
    path.write_text(text)
    for read in (Registration.load, lambda p: load_run(p.parent), lambda p: RunStore.open(p.parent),
                 lambda p: rp.build_report([p.parent])):
        with pytest.raises(ResultsError) as info:
            read(path)
        assert str(run) in str(info.value), case
        assert expected in str(info.value), (case, str(info.value))
        assert info.value.exit_code == EXIT_USAGE


# ------------------------------------------------- every value a verdict depends on is hashed


def _edit(run: Path, **changes: Any) -> None:
    path = run / "preregistration.json"
    doc = json.loads(path.read_text())
    doc.update(changes)
    path.chmod(0o644)
    path.write_text(json.dumps(doc))


ADOPTS = {("knee", "c1", TPUT): [(100.0, 112.0), (100.0, 111.0)]}


def test_edited_drift_band_is_detected_and_the_registered_one_used(tmp_path: Path) -> None:
    run = make_run(tmp_path, ADOPTS, guardrails=[])
    assert rp.build_report([run]).latest.decision == "adopt"
    _edit(run, drift_band=0.5)  # would turn adopt into keep-default
    rep = rp.build_report([run])
    assert rep.latest.decision == "adopt" and rep.latest.rule.band == 0.03
    assert "edited after registration" in rep.latest.notes[0]
    assert "drift_band 0.5 (registered 0.03)" in rep.latest.notes[0]
    doc = json.loads(rp.render(rep, "json"))
    assert doc["rule"]["registration_intact"] is False
    assert "edited after registration" in doc["notes"][0]
    top = rp.render(rep, "table").splitlines()[:6]
    assert any("edited after registration" in line for line in top)


def test_edited_arm_order_is_detected(tmp_path: Path) -> None:
    run = make_run(tmp_path, ADOPTS, guardrails=[])
    _edit(run, arms=["cand", "control"])
    rep = rp.build_report([run])
    assert rep.latest.arms == ("control", "cand")
    assert "arms ['cand', 'control'] (registered ['control', 'cand'])" in rep.latest.notes[0]


def test_edit_that_cannot_be_recovered_is_refused(tmp_path: Path) -> None:
    run = make_run(tmp_path, ADOPTS, guardrails=[])
    _edit(run, arms=["control", "other"], drift_band=0.2)
    (run / "campaign.yaml").write_text("not: a campaign\n")
    with pytest.raises(ResultsError, match=r"preregistration\.json.*values_sha256"):
        rp.build_report([run])


def test_schema_2_without_values_hash_is_refused(tmp_path: Path) -> None:
    run = make_run(tmp_path, ADOPTS, guardrails=[])
    path = run / "preregistration.json"
    doc = json.loads(path.read_text())
    del doc["values_sha256"]
    path.chmod(0o644)
    path.write_text(json.dumps(doc))
    with pytest.raises(ResultsError, match="'values_sha256' is missing"):
        load_run(run)


def test_levels_are_registered_resolved_and_hashed(tmp_path: Path) -> None:
    """`level: "*"` is resolved to the configured levels at registration: decision cells,
    and each guardrail's cells (a knee sweep's spec-decode figures at level `all`)."""
    run = make_run(tmp_path, ADOPTS, decision_cells=[{"workload": "knee", "level": "*"}],
                   guardrails=[{"metric": "ttft_p99"},
                               {"metric": "ttft_p50", "at": "all"},
                               {"metric": "acceptance_rate", "workload": "knee"},
                               {"metric": "error_rate", "level": "shell", "absolute": True}])
    reg = load_run(run).registration
    assert reg.levels is not None
    assert reg.levels.decision_cells == [CellRef(workload="knee", level="c1"),
                                         CellRef(workload="knee", level="c4")]
    assert reg.levels.decision_levels() == {"knee": ["c1", "c4"]}
    ttft, everywhere, acceptance, errors = reg.levels.guardrails
    # the default `at: decision`: where the decision is made
    assert [(c.workload, c.level) for c in ttft.cells] == [("knee", "c1"), ("knee", "c4")]
    # `at: all`: every configured level of its metric
    assert [(c.workload, c.level) for c in everywhere.cells] == [
        ("knee", "c1"), ("knee", "c4"), ("agentfix", "shell"), ("agentfix", "prose")]
    # named elsewhere than the decision cells: where it names
    assert [(c.workload, c.level) for c in acceptance.cells] == [("knee", "all")]
    assert [(c.workload, c.level) for c in errors.cells] == [("agentfix", "shell")]
    bands = reg.guardrail_bands
    assert reg.values_sha256 == values_hash(reg.rule, reg.drift_band, reg.arms, reg.levels,
                                            bands)
    assert reg.values_sha256 != values_hash(reg.rule, reg.drift_band, reg.arms, reg.levels)


def test_guardrail_bands_are_registered_and_judge_the_guardrails(tmp_path: Path) -> None:
    """Each guardrail's band is resolved at registration and hashed; the verdict takes a
    guardrail's own registered band as the prior of its metric's pass-to-pass noise, and an
    edit of it after registration refuses the run. A guardrail with no band of its own is
    registered with the campaign's, which never judges it: its prior is the statistic's
    measured default (±10% per pass for a p99)."""
    spec = {**ADOPTS, ("knee", "c1", "ttft_p99"): [(50.0, 50.5), (51.0, 50.8)]}
    def with_sampling_error(df: Any) -> Any:
        return df.assign(log_se=[0.05 if m == "ttft_p99" else None for m in df["metric"]])

    run = make_run(tmp_path / "own", spec, edit=with_sampling_error, guardrails=[
        {"metric": "ttft_p99", "max_worsening": 0.05, "drift_band": 0.07}])
    data = load_run(run)
    assert data.registration.guardrail_bands == [0.07]
    rep = rp.build_report([run])
    assert rep.latest.rule.guardrail_registered_band(0) == pytest.approx(0.07)
    (check,) = rep.latest.verdict.candidates[0].guardrails
    # the prior (±7% per pass, worth 2 df) pooled with the campaign's own pair (±0.0%, 1 df)
    assert ("the metric's pass-to-pass noise ±5.5% per pass (prior ±7.0% per pass "
            "(registered); the campaign's pairs show ±0.0% over 1 df; 3 df)") in check.evidence
    _edit(run, guardrail_bands=[0.2])
    with pytest.raises(ResultsError, match=r"values_sha256"):
        rp.build_report([run])

    campaigns = make_run(tmp_path / "campaign", spec, edit=with_sampling_error,
                         guardrails=[{"metric": "ttft_p99", "max_worsening": 0.05}])
    assert load_run(campaigns).registration.guardrail_bands == [0.03]
    rep = rp.build_report([campaigns])
    assert rep.latest.rule.guardrail_registered_band(0) is None
    (check,) = rep.latest.verdict.candidates[0].guardrails
    assert ("prior ±10% per pass, the measured default for a p99 (docs/limits.md)"
            in check.evidence)
    assert "±3.0%" not in check.evidence


def test_edited_levels_are_detected_and_the_registered_ones_used(tmp_path: Path) -> None:
    run = make_run(tmp_path, ADOPTS, guardrails=[],
                   decision_cells=[{"workload": "knee", "level": "*"}])
    registered = load_run(run).registration.levels
    doc = json.loads((run / "preregistration.json").read_text())
    doc["levels"]["decision_cells"] = doc["levels"]["decision_cells"][:1]  # drop c4
    _edit(run, levels=doc["levels"])
    data = load_run(run)
    assert data.registration.levels == registered
    assert "levels (registered: as the frozen campaign resolves them)" in data.notes[0]
    (run / "campaign.yaml").write_text("not: a campaign\n")  # nothing left to recover from
    with pytest.raises(ResultsError, match="the levels do not match values_sha256"):
        load_run(run)


def test_schema_3_without_levels_is_refused(tmp_path: Path) -> None:
    run = make_run(tmp_path, ADOPTS, guardrails=[])
    doc = json.loads((run / "preregistration.json").read_text())
    del doc["levels"]
    (run / "preregistration.json").chmod(0o644)
    (run / "preregistration.json").write_text(json.dumps(doc))
    with pytest.raises(ResultsError, match="'levels' is missing"):
        load_run(run)


@pytest.mark.parametrize("damage", ["deleted", "damaged"])
def test_registered_levels_hold_without_campaign_yaml(tmp_path: Path, damage: str) -> None:
    """A run of `level: "*"` whose campaign.yaml is gone still reports every registered
    level; a registered level with no rows is missing (no adopt), not skipped."""
    run = make_run(tmp_path, {("knee", "c1", TPUT): [(100.0, 120.0), (100.0, 121.0)]},
                   guardrails=[], decision_cells=[{"workload": "knee", "level": "*"}])
    assert registered_levels(load_run(run).campaign).decision_levels() == {  # type: ignore[arg-type]
        "knee": ["c1", "c4"]}
    if damage == "deleted":
        (run / "campaign.yaml").unlink()
    else:
        (run / "campaign.yaml").write_text("name: [broken\n")
    assert load_run(run).campaign is None
    rep = rp.build_report([run])
    cells = {(c.workload, c.level) for c in rep.latest.decision_cells()}
    assert cells == {("knee", "c1"), ("knee", "c4")}
    assert rep.latest.decision == "keep-default"
    c4 = next(c for c in rep.latest.decision_cells() if c.level == "c4")
    assert c4.verdict != "adopt" and c4.pairs == () and c4.stats is None


def test_schema_1_checks_the_rule_only(sim_run: Path) -> None:
    _edit(sim_run, drift_band=0.02)  # schema 1 never hashed the band: reported as before
    reg = load_run(sim_run).registration
    assert reg.values_sha256 is None and reg.drift_band == 0.02
