"""The custom-op tax table's verdicts (tax.rows): met at <= 1.00, or inside the A/A band."""

from __future__ import annotations

from deploy.bench import tax


def _measured(ratio: float) -> tax.Measured:
    # Three rounds at the same ratio on both runners: the median is `ratio`.
    pairs = [(ratio * t, t) for t in (1.0, 2.0, 3.0)]
    return tax.Measured(cpp=pairs, py=pairs)


def _verdicts(ratio: float, band: tax.Band | None) -> list[str]:
    rows, _ = tax.rows([("cell", _measured(ratio))], bands=[band])
    return [row[3].split()[-1] for row in rows]


def test_a_ratio_that_rounds_to_one_is_met_without_a_band():
    assert _verdicts(1.004, None) == ["MET", "MET"]


def test_a_ratio_above_one_without_a_band_is_missed():
    rows, missed = tax.rows([("cell", _measured(1.03))])
    assert [row[3].split()[-1] for row in rows] == ["MISSED", "MISSED"]
    assert missed == ["cell C++ 1.03", "cell Python 1.03"]


def test_a_ratio_inside_the_a_a_band_is_met():
    band = {"C++": (0.95, 1.05), "Python": (0.97, 1.02)}
    # 1.03 lies inside the C++ band (top 1.05), above the Python one (top 1.02).
    assert _verdicts(1.03, band) == ["MET", "MISSED"]


def test_the_band_is_printed_with_the_verdict():
    band = {"C++": (0.95, 1.05), "Python": (0.97, 1.02)}
    rows, _ = tax.rows([("cell", _measured(1.03))], bands=[band])
    assert rows[0][3] == "<= 1.00 or <= A/A 1.05 MET"


def test_band_rows_name_size_isa_and_runner():
    bands = {("portable", (1, 64)): {"C++": (0.98, 1.04)}}
    assert tax.band_rows(bands) == [
        ("1x64 --isa portable, C++", "same package twice", "0.98..1.04", "")
    ]
