"""The run report (infra/report.py): what train.py records for it, how it reads a run directory (resumed runs, empty
logs, NaN), and, in headless Chromium, that the page draws a learning curve per role."""

import html
import json
import math
import os
import re
import shutil
import struct
import subprocess
import zlib

import numpy as np
import pytest

import eval as ev
import train
from infra import metrics, models, report
from tests.test_train import FAST

ROLES = ["coder", "tester", "reasoner", "tool_user"]


def _metrics_record(step, **changes):
    """A metrics.jsonl record of the shape metrics.rollout_metrics and train.train_step write."""
    x = step / 10
    m = {
        "step": step,
        "roles": {
            r: {
                "a_opd": -1 + x * i / 4,
                "a_role": 0.1 * math.sin(x + i),
                "reverse_kl": 1 - x / (i + 2),
                "responses": 2,
                "tokens": 20,
            }
            for i, r in enumerate(ROLES)
        },
        "turns_per_episode": 2 - x / 4,
        "conflict_rate": 0.5 - x / 10,
        "stopped": {},
        "outcomes": {},
        "format": {
            r: {"code_block": 80.0 - i, "truncated": 5.0 + i, "unparsed": 15.0}
            for i, r in enumerate(ROLES)
        },
        "loss": [0.5 - x / 10, 0.4],
        "updates": 2,
        "skipped": 0,
        "seconds": {"rollout": 1.0, "update": 0.5},
    }
    m.update(changes)
    return m


def _run_dir(path, steps=30):
    """A run directory as train.py leaves it: metrics.jsonl, results.json, samples.jsonl."""
    os.makedirs(path)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(_metrics_record(s)) + "\n" for s in range(steps))
    results = {
        "before": {"acc_code": {"mean": 47.0, "std": 2.0}},
        "after": {"acc_code": {"mean": 90.0, "std": 1.5}},
    }
    with open(os.path.join(path, "results.json"), "w") as f:
        json.dump(results, f)
    with open(os.path.join(path, "samples.jsonl"), "w") as f:
        for step in (0, steps - 1):
            for r in ROLES:
                f.write(
                    json.dumps(
                        {
                            "step": step,
                            "problem": "sum",
                            "role": r,
                            "pieces": ["print", "(a", " +", " b)"],
                            "a_role": [0.5, -0.5, None, 0.1],
                            "a_opd": [0.0, -1.0, None, 0.0],
                        }
                    )
                    + "\n"
                )
    return str(path)


def test_a_training_run_records_samples_at_its_first_and_last_step_and_writes_its_report(
    tmp_path, problems, capsys
):
    out = str(tmp_path / "run")
    train.main(["--problems", problems, "--out", out, "--steps", "3"] + FAST)
    assert f"report: {os.path.join(out, 'report.html')}" in capsys.readouterr().out
    samples = [json.loads(line) for line in open(os.path.join(out, "samples.jsonl"))]
    assert sorted({s["step"] for s in samples}) == [0, 2]
    # the batch's 2 episodes: one code and one math problem, each role in one of them
    for step in (0, 2):
        mine = [s for s in samples if s["step"] == step]
        assert sorted(s["role"] for s in mine) == sorted(ROLES)
        assert {s["problem"] for s in mine} == {"sum", "apples"}
    for s in samples:
        assert len(s["pieces"]) == len(s["a_role"]) == len(s["a_opd"]) > 0
    page = open(os.path.join(out, "report.html")).read()
    assert page.count("<svg") == len(report.CURVES) and "<polyline" in page
    assert page.count("class='tok'") > 0 and "No results.json" in page
    # at its top, what it reports: when and with which command the run began, its preset and seeds
    head = page[page.index("<h1>") : page.index("<h2>")]
    began = json.load(open(os.path.join(out, "run.json")))["commands"][0]
    assert (
        f"<tr><td>{began['date']}, began</td><td><code>" in head
        and html.escape(began["command"]) in head
    )
    assert "<tr><td>preset</td><td>paper</td></tr>" in head
    assert "<tr><td>λ (Eq. 10)</td><td>0.1</td></tr>" in head
    assert (
        "<tr><td>seeds</td><td>training 0; no evaluation (no --eval-problems)</td></tr>"
        in head
    )
    # how it ended, its wall time and what it ran on: what a reader compares runs by
    ended = json.load(open(os.path.join(out, "run.json")))["commands"][0]
    assert ended["ended"] == "done" and ended["seconds"] >= 0
    assert f"<br>done after {report.wall_time(ended['seconds'])}; " in head
    assert html.escape(models.machine("cpu")) in head and "kernels" in head


def test_a_resumed_run_shows_the_last_record_of_each_step_and_skips_lines_without_one(
    tmp_path,
):
    path = tmp_path / "metrics.jsonl"
    lines = [
        _metrics_record(0),
        _metrics_record(1, conflict_rate=0.9),
        _metrics_record(2),
        {"started": 1},
        _metrics_record(1, conflict_rate=0.1),
        _metrics_record(2, conflict_rate=0.2),
    ]
    # the last cut by a crash
    path.write_text("".join(json.dumps(m) + "\n" for m in lines) + '{"step": 3, "ro')
    records = report.last_per_step(report.read_steps(str(path)))
    assert [(m["step"], m["conflict_rate"]) for m in records] == [
        (0, 0.5),
        (1, 0.1),
        (2, 0.2),
    ]


def test_an_empty_run_directory_says_what_is_missing_and_still_renders(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("")
    page = open(report.write_report(str(tmp_path))).read()
    assert "metrics.jsonl holds no completed step yet" in page and "<svg" not in page
    assert "No results.json" in page and "No samples.jsonl" in page


def test_non_finite_values_break_a_line_and_are_never_drawn(tmp_path):
    values = [1.0, 2.0, None, float("nan"), 3.0, 4.0, float("inf"), 5.0]
    svg = report.chart("t", list(range(len(values))), {"coder": values})
    numbers = re.findall(r"(?:points|cx|cy)='([^']*)'", svg)
    assert numbers and all(
        math.isfinite(float(v)) for n in numbers for v in re.split(r"[ ,]", n)
    )
    # faint and smoothed: [1, 2], [3, 4], [5]
    assert svg.count("<polyline") == 4 and svg.count("<circle") == 2
    assert "no finite values" in report.chart(
        "t", [0, 1], {"coder": [None, float("nan")]}
    )
    # a diverged step as train.py writes it (json_text: NaN -> null) renders
    run = _run_dir(tmp_path / "run", steps=3)
    with open(os.path.join(run, "metrics.jsonl"), "a") as f:
        f.write(
            json.dumps(
                _metrics_record(
                    3,
                    loss=[None],
                    roles={
                        r: {
                            "a_opd": None,
                            "a_role": None,
                            "reverse_kl": None,
                            "responses": 2,
                            "tokens": 20,
                        }
                        for r in ROLES
                    },
                )
            )
            + "\n"
        )
    page = open(report.write_report(run)).read()
    assert not re.search(r"\b(nan|inf)\b", page.lower()) and page.count("<svg") == len(
        report.CURVES
    )


def test_the_header_lists_every_command_of_a_resumed_run_and_its_evaluation_seeds(
    tmp_path,
):
    run = _run_dir(tmp_path / "run")
    args = {
        "preset": "toy",
        "seed": 3,
        "eval_problems": "held.jsonl",
        "eval_seeds": [2000, 2001],
    }
    commands = [
        {
            "date": "2026-12-01T10:00:00+00:00",
            "command": "python -m toy",
            "from_step": 0,
            "machine": "a CPU, 2 cores, AVX2 kernels",
            "ended": "stopped by SIGINT",
            "seconds": 125,
        },
        {
            "date": "2026-12-01T11:00:00+00:00",
            "command": "python -m toy --resume",
            "from_step": 40,
        },
    ]
    with open(os.path.join(run, "run.json"), "w") as f:
        json.dump({"settings": {}, "args": args, "commands": commands}, f)
    head = open(report.write_report(run)).read().split("<h2>")[0]
    assert (
        "<tr><td>2026-12-01T10:00:00+00:00, began</td><td><code>python -m toy</code>"
        "<br>stopped by SIGINT after 2 min 5 s; a CPU, 2 cores, AVX2 kernels</td>"
        in head
    )
    # a command that recorded no end (killed, or still running) and no machine: said so
    assert (
        "--resume</code><br>did not record its end (still running, or killed); machine not recorded"
        in head
    )
    assert (
        "<tr><td>2026-12-01T11:00:00+00:00, resumed from step 40</td><td><code>python -m toy --resume"
        in head
    )
    assert (
        "<td>preset</td><td>toy</td>" in head
        and "<td>training 3; evaluation 2000 2001</td>" in head
    )
    assert "<tr><td>report written</td>" in head
    # a run of an older train.py, or a run.json of other fields: said so
    for run_json in ({"args": args, "commands": ["python -m toy"]}, None):
        if run_json:
            with open(os.path.join(run, "run.json"), "w") as f:
                json.dump(run_json, f)
        else:
            os.remove(os.path.join(run, "run.json"))
        assert (
            "No run.json of train.py: the date, command and seeds of the run were not recorded"
            in open(report.write_report(run)).read()
        )


def _labels(svg):
    """The tick labels of a chart's y axis (right-aligned) and x axis (centred), as numbers."""
    read = lambda anchor: [
        float(v) for v in re.findall(rf"text-anchor='{anchor}'>([^<]+)</text>", svg)
    ]
    return read("end"), read("middle")


@pytest.mark.parametrize(
    "values",
    [
        [0.0] * 30,
        [100.0] * 30,
        [-2.0] * 30,
        [3.0 + 94 * k / 29 for k in range(30)],
        [0.31 + k / 1000 for k in range(30)],
        [-0.4 + k / 50 for k in range(30)],
    ],
    ids=["zero", "hundred", "negative", "percent", "narrow", "crossing"],
)
def test_no_axis_runs_past_the_datas_range(values):
    """A share of 0% all along is drawn on an axis from 0 up, not one that runs below 0; every tick lies within the
    data's range (a flat line's range widened on the side its sign allows), and the steps' axis ends at the last."""
    ys, xs = _labels(
        report.chart("truncated responses, %", list(range(30)), {"coder": values})
    )
    lo, hi = min(values), max(values)
    assert ys and xs and 0 <= min(xs) and max(xs) <= 29
    assert (
        all(lo - 1e-9 <= y for y in ys)
        if lo >= 0
        else all(y <= hi + 1e-9 for y in ys)
        if hi <= 0
        else all(lo - 1e-9 <= y <= hi + 1e-9 for y in ys)
    )
    if lo == hi:
        assert lo in ys  # the flat line's own value is labelled


def test_the_evaluation_table_has_the_rows_of_eval_markdown(tmp_path):
    run = _run_dir(tmp_path / "run")
    results = json.load(open(os.path.join(run, "results.json")))
    page = open(report.write_report(run)).read()
    assert "<td>acc_code</td><td>47.0 ± 2.0</td><td>90.0 ± 1.5</td>" in page
    assert "| acc_code | 47.0 ± 2.0 | 90.0 ± 1.5 |" in ev.markdown(results)


def test_a_teachers_check_beside_the_run_is_a_table_in_its_report_and_none_is_no_section(
    tmp_path,
):
    run = _run_dir(tmp_path / "run")
    assert "teacher's check" not in open(report.write_report(run)).read()
    check = {
        "PAC: a needed revision gains <b>": {"learned": 99.2, "hand-written": 100.0},
        "responses / whole jobs": {"learned": "334 / 172", "hand-written": "334 / 172"},
    }
    with open(os.path.join(run, "teacher_check.json"), "w") as f:
        json.dump(check, f)
    page = open(report.write_report(run)).read()
    assert "<h2>The teacher's check on held-out responses</h2>" in page
    assert "<th>learned</th><th>hand-written</th>" in page
    assert (
        "<tr><td>PAC: a needed revision gains &lt;b&gt;</td><td>99.2</td><td>100.0</td></tr>"
        in page
    )
    assert "<td>334 / 172</td>" in page


def test_the_rows_that_matter_come_first_accuracy_exchange_penalty_revise_iff_wrong():
    cell = {"mean": 1.0, "std": 0.0}
    names = [
        "turns_code",
        "parse_fenced_coder",
        "revise_iff_wrong_tester",
        "exchange_penalty_math",
        "acc_math",
        "kept_when_wrong_coder",
        "revise_iff_wrong_coder",
        "acc_code",
        "exchange_penalty_code",
    ]
    order = [k for k, _ in report.table_rows({"after": {k: cell for k in names}})]
    assert order == [
        "acc_code",
        "acc_math",
        "exchange_penalty_code",
        "exchange_penalty_math",
        "revise_iff_wrong_coder",
        "revise_iff_wrong_tester",
        "kept_when_wrong_coder",
        "parse_fenced_coder",
        "turns_code",
    ]


def test_token_pieces_keep_spaces_and_split_characters(tok):
    text = "def f(x):\n    return x + 1  # é, 数"
    tokens = tok(text, add_special_tokens=False)["input_ids"]
    pieces = metrics.token_pieces(tok, tokens)
    assert len(pieces) == len(tokens) and "".join(pieces) == text
    # a three-byte character: its text goes to its last byte's token
    assert "" in pieces and "数" in pieces


def test_cli_writes_the_page_and_refuses_a_bad_directory_in_one_line(
    tmp_path, capsys, error_line
):
    run = _run_dir(tmp_path / "run")
    report.main([run])
    assert capsys.readouterr().out == f"wrote {os.path.join(run, 'report.html')}\n"
    (tmp_path / "run" / "results.json").write_text('{"before": ')
    for bad, line in (
        (str(tmp_path / "missing"), "not a train.py run directory"),
        (str(tmp_path), "not a train.py run directory"),
        (run, ""),
    ):
        with pytest.raises(SystemExit) as e:
            report.main([bad])
        assert e.value.code == 2
        error_line(
            f"{bad}: {line}"
            if line
            else f"{os.path.join(run, 'results.json')}: not JSON"
        )


def _png_rgb(path):
    """An 8-bit, non-interlaced RGB or RGBA PNG as an (H, W, 3) uint8 array: zlib and the five row filters."""
    data, pos, idat = open(path, "rb").read(), 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if kind == b"IHDR":
            w, h, depth, colour, _, _, interlace = struct.unpack(
                ">IIBBBBB", data[pos + 8 : pos + 21]
            )
            assert depth == 8 and colour in (2, 6) and not interlace
        idat += data[pos + 8 : pos + 8 + n] if kind == b"IDAT" else b""
        pos += 12 + n
    bpp = 3 if colour == 2 else 4
    raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, 1 + w * bpp)
    img, prev = np.zeros((h, w * bpp), np.uint8), np.zeros(w * bpp, np.int64)
    for y in range(h):
        f, row = raw[y, 0], raw[y, 1:].astype(np.int64)
        if f == 1:  # Sub: a running sum per channel
            row = np.cumsum(row.reshape(w, bpp), axis=0).reshape(-1)
        elif f == 2:  # Up
            row = row + prev
        # Average, Paeth: each byte needs the one reconstructed before it
        elif f in (3, 4):
            out, up = [0] * len(row), prev.tolist()
            for i, v in enumerate(row.tolist()):
                a, b = (out[i - bpp] if i >= bpp else 0), up[i]
                c = up[i - bpp] if i >= bpp else 0
                if f == 3:
                    out[i] = (v + (a + b) // 2) & 255
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    out[i] = (
                        v + (a if pa <= pb and pa <= pc else b if pb <= pc else c)
                    ) & 255
            row = np.array(out)
        img[y] = prev = row % 256
    return img.reshape(h, w, bpp)[:, :, :3]


def _screenshot(page, png):
    browser = shutil.which("chromium")
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={os.path.dirname(png)}/profile",
            f"--screenshot={png}",
            "--window-size=1150,900",
            f"file://{page}",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return _png_rgb(png)


def _pixels_of(img, colour):
    rgb = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(img.astype(int) - rgb).max(axis=2) <= 24).sum())


@pytest.mark.skipif(
    shutil.which("chromium") is None,
    reason="no chromium binary (.ci/run installs the Debian package)",
)
def test_chromium_draws_a_learning_curve_per_role(tmp_path):
    run = _run_dir(tmp_path / "run")
    img = _screenshot(report.write_report(run), str(tmp_path / "report.png"))
    drawn = {r: _pixels_of(img, report.ROLE_COLOURS[r]) for r in ROLES}
    # five per-role charts, each a solid line ~280 px long
    assert all(n > 1000 for n in drawn.values()), drawn
    # the same page without curves: none of those colours (the heat maps and the table stay)
    open(os.path.join(run, "metrics.jsonl"), "w").close()
    img = _screenshot(report.write_report(run), str(tmp_path / "empty.png"))
    assert all(_pixels_of(img, report.ROLE_COLOURS[r]) < 50 for r in ROLES)


@pytest.mark.skipif(
    shutil.which("chromium") is None,
    reason="no chromium binary (.ci/run installs the Debian package)",
)
def test_chromium_draws_the_heat_maps_colour_scale(tmp_path):
    """Tokens whose A^role is 0 take no colour: the deepest blue and red on the page are the scale's own."""
    rows = [("sum turn 1", "coder", ["print", "(a", " +", " b)"] * 6, [0.0] * 24)]
    page = tmp_path / "heat.html"
    page.write_text(report.page("Role advantage", report.heatmap(rows)))
    img = _screenshot(str(page), str(tmp_path / "heat.png"))
    over_white = lambda rgb, alpha: (
        "#" + "".join(f"{round(c * alpha + 255 * (1 - alpha)):02x}" for c in rgb)
    )
    deepest = {
        "blue": over_white((40, 90, 220), 0.8),
        "red": over_white((220, 50, 40), 0.8),
    }
    drawn = {name: _pixels_of(img, colour) for name, colour in deepest.items()}
    assert all(n > 100 for n in drawn.values()), drawn


# ------------------------------------------------------------------ a run directory from elsewhere is data

# Markup that runs as script wherever a field is printed as it is: in text, in a quoted attribute, in the title.
# Each script leaves a mark its own text does not hold: the body's data-ran, the title 'ran42'.
RAN = "document.body.dataset.ran='ran'+(40+2)"
HOSTILE = (
    f"</title></code></td></table><script>{RAN};document.title='ran'+(40+2)</script>"
    f'<img src=x onerror="{RAN}"><svg onload="{RAN}"></svg>\' onmouseover=\'{RAN}\' '
    f'<a href="javascript:{RAN}">link</a><iframe src="javascript:parent.{RAN}"></iframe>'
)
# what report.html is made of: any other tag came from a field
REPORT_TAGS = {
    "meta",
    "title",
    "style",
    "h1",
    "h2",
    "p",
    "b",
    "br",
    "sup",
    "code",
    "span",
    "table",
    "tr",
    "th",
    "td",
    "figure",
    "figcaption",
    "svg",
    "line",
    "text",
    "polyline",
    "circle",
}


def _hostile_run(path):
    """A run directory whose every field the report prints holds HOSTILE: run.json's header, the roles of
    metrics.jsonl, the names of results.json, samples.jsonl's problem, role and tokens, teacher_check.json, and
    the directory's own name."""
    name = str(path) + "<img src=x onerror=document.body.dataset.ran=42>"
    run = _run_dir(name)
    fields = dict.fromkeys(
        ("date", "command", "from_step", "machine", "ended", "seconds"), HOSTILE
    )
    args = dict.fromkeys(("preset", "seed", "eval_problems", "lam"), HOSTILE)
    run_json = {"args": {**args, "eval_seeds": [HOSTILE]}, "commands": [fields] * 2}
    record = _metrics_record(0)
    record["roles"][HOSTILE] = record["roles"]["coder"]
    sample = {
        "step": 0,
        "problem": HOSTILE,
        "role": HOSTILE,
        "pieces": [HOSTILE],
        "a_role": [0.5],
    }
    for file, value in (
        ("run.json", json.dumps(run_json)),
        ("metrics.jsonl", json.dumps(record) + "\n"),
        ("samples.jsonl", json.dumps(sample) + "\n"),
        ("results.json", json.dumps({HOSTILE: {HOSTILE: {"mean": 1, "std": 0}}})),
        ("teacher_check.json", json.dumps({HOSTILE: {HOSTILE: HOSTILE}})),
    ):
        with open(os.path.join(run, file), "w") as f:
            f.write(value)
    return run


def test_every_field_of_a_hostile_run_directory_is_text_in_its_report(tmp_path):
    page = open(report.write_report(_hostile_run(tmp_path / "run"))).read()
    tags = re.findall(r"<([A-Za-z][^\s/>]*)([^>]*)>", page)
    assert {t.lower() for t, _ in tags} <= REPORT_TAGS, {t for t, _ in tags}
    attributes = " ".join(a for _, a in tags).lower()
    assert not re.search(r"\bon\w+\s*=|javascript:", attributes), attributes
    # shown as the text it is, wherever it was: the header's four rows, the legend, each table and heat map
    assert page.count(html.escape(HOSTILE)) >= 10
    assert "&lt;img src=x onerror=document.body.dataset.ran=42&gt;</h1>" in page


def _dom(page, profile):
    """The page's DOM after headless Chromium loaded it and ran whatever script it holds (a virtual second)."""
    return subprocess.run(
        [
            shutil.which("chromium"),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=1000",
            "--dump-dom",
            f"file://{page}",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout


@pytest.mark.skipif(
    shutil.which("chromium") is None,
    reason="no chromium binary (.ci/run installs the Debian package): the browser-free test above still runs",
)
def test_chromium_runs_no_script_of_a_hostile_run_directory(tmp_path):
    # the check itself: the same markup printed as it is runs, and leaves its mark
    bare = tmp_path / "bare.html"
    bare.write_text(f"<!doctype html><title>t</title><body>{HOSTILE}</body>")
    assert "ran42" in _dom(str(bare), str(tmp_path / "profile"))
    dom = _dom(
        report.write_report(_hostile_run(tmp_path / "run")), str(tmp_path / "profile")
    )
    assert (
        '<table class="meta">' in dom and "ran42" not in dom and "data-ran" not in dom
    )
    assert "<title>MAS-OPD run run&lt;img" in dom
