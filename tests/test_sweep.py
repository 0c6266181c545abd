"""python -m tools.sweep: one run per λ on tiny models, evaluated, with its table, PNG figure and HTML report."""

import json
import os

import pytest

from infra.png import FONT, chart_pixels
from tools import sweep

FAST = [
    "--student",
    "tiny-qwen3",
    "--teacher",
    "tiny-qwen3",
    "--max-new-tokens",
    "6",
    "--max-turns",
    "2",
    "--batch",
    "2",
    "--mini-batch",
    "2",
    "--micro-batch",
    "8",
    "--workers",
    "2",
    "--steps",
    "1",
    "--eval-seeds",
    "3",
]


def test_sweep_of_two_lambdas_writes_its_table_and_figure(tmp_path, problems, capsys):
    out = str(tmp_path / "sweep")
    sweep.main(
        [
            "--lam",
            "0",
            "0.5",
            "--eval-problems",
            problems,
            "--out",
            out,
            "--problems",
            problems,
        ]
        + FAST
    )
    results = json.load(open(os.path.join(out, "sweep.json")))
    assert list(results) == ["0", "0.5"]
    # accuracy per benchmark (Fig. 6), exchange penalty (Fig. 3b), alone (Fig. 3c)
    for m in results.values():
        assert {
            "p/acc_code",
            "p/acc_math",
            "p/exchange_penalty_code",
            "p/alone_acc_code",
            "p/alone_acc_math",
        } <= set(m)
    for v in ("0", "0.5"):  # each run is a train.py run at its λ, with its checkpoint
        assert os.path.isfile(os.path.join(out, f"lam{v}", "checkpoint", "state.pt"))
    printed = capsys.readouterr().out
    assert '"lam": 0.0' in printed and '"lam": 0.5' in printed
    table = open(os.path.join(out, "sweep.md")).read()
    assert (
        table.startswith("| metric | λ = 0 | λ = 0.5 |") and "p/alone_acc_code" in table
    )
    png = open(os.path.join(out, "sweep.png"), "rb").read()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000
    report = open(os.path.join(out, "report.html")).read()
    assert (
        "data:image/png;base64," in report
        and "lam0.5/report.html" in report
        and "p/exchange_penalty_code" in report
    )


def test_sweep_refuses_a_missing_benchmark_file_before_training(
    tmp_path, problems, error_line
):
    with pytest.raises(SystemExit) as e:
        sweep.main(
            [
                "--lam",
                "0",
                "--eval-problems",
                str(tmp_path / "none.jsonl"),
                "--out",
                str(tmp_path / "s"),
                "--problems",
                problems,
            ]
            + FAST
        )
    assert e.value.code == 2 and not os.path.exists(tmp_path / "s" / "lam0")
    error_line("")


def test_png_figure_has_a_panel_per_figure_and_a_glyph_per_character():
    assert all(len(g) == 15 for g in FONT.values()) and len(FONT) == 47
    img = chart_pixels(
        [
            ("A", [0, 1], {"x": ([1.0, 2.0], "#e69f00")}),
            ("B", [0, 1], {"x": ([None, 3.0], "#e69f00")}),
        ]
    )
    assert img.shape[1] == 2 * 360 and (img == (0xE6, 0x9F, 0x00)).all(-1).any()
