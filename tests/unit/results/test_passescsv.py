"""passes.csv's two readers: the strict typed one for files as spec-ab writes them, the
loose one for anything else. Both must give the same table, floats exactly as written."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd

from campaign.results import passescsv as pc
from campaign.results.journal import PASS_COLUMNS, PassRow, rows_to_csv

AWKWARD = [213.81818181818178, 0.1 + 0.2, 1e-300, 5e-324, 1.7976931348623157e308,
           float("nan"), float("inf"), 29.335726097154315]


def rows() -> list[PassRow]:
    return [PassRow(run="r", pair=1 + i % 2, pair_attempt=1, arm=("NA" if i == 3 else "cand"),
                    slot=i, started_at="2026-12-02T03:00:00Z", workload="knee",
                    level=f"c{i}", metric="output_token_throughput", value=v, valid=i != 2,
                    attempt=1, reason="" if i != 2 else "stalled: 12 s, \"a\"",
                    log_se=None if i % 2 else 0.1 * i)
            for i, v in enumerate(AWKWARD)]


def loose(data: bytes) -> pd.DataFrame:
    return pc.check_passes(pd.read_csv(io.BytesIO(data), **pc.CSV_READ), Path("p.csv"))[0]


def test_floats_read_back_exactly_as_measured_by_both_readers() -> None:
    data = rows_to_csv(rows()).encode()
    strict, bad = pc.check_passes(pc.parse(data), Path("p.csv"))
    assert not bad
    pd.testing.assert_frame_equal(strict, loose(data))
    assert strict["value"].tolist()[:5] == AWKWARD[:5]  # not one ulp off
    assert strict["value"].iloc[7] == 29.335726097154315
    assert strict["arm"].iloc[3] == "NA" and strict["reason"].iloc[2] == "stalled: 12 s, \"a\""
    assert strict["log_se"].isna().tolist() == [bool(i % 2) for i in range(len(AWKWARD))]


def test_an_edited_cell_falls_back_to_the_loose_reader_and_names_its_line() -> None:
    text = rows_to_csv(rows()).splitlines()
    assert "213.81818181818178" in text[1]
    text[1] = text[1].replace("213.81818181818178", "lots")  # file line 2
    text[5] = text[5].replace(",true,", ",True,")  # pandas reads True as true; Arrow does not
    data = ("\n".join(text) + "\n").encode()
    table, bad = pc.check_passes(pc.parse(data), Path("p.csv"))
    assert bad == [2]
    assert table["value"].tolist()[:4] == AWKWARD[1:5]  # the other rows, exactly
    assert table["valid"].iloc[3]  # file line 6 ("True")


def test_an_older_header_without_log_se_is_read_strictly_too() -> None:
    data = rows_to_csv(rows()).encode()
    old = "\n".join(",".join(line.split(",")[:len(PASS_COLUMNS)])
                    for line in data.decode().splitlines()[:2]) + "\n"
    table = pc.parse(old.encode())
    assert list(table.columns) == PASS_COLUMNS
    assert table["value"].tolist() == [AWKWARD[0]] and table["pair"].dtype.kind == "i"
