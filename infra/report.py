"""The run report: one self-contained HTML page of a train.py run directory RUN (inline SVG, no script, nothing
fetched): the learning curves of RUN/metrics.jsonl per role, the before/after evaluation of RUN/results.json, and
the token-level role advantage A^role (Eq. 9, App. G.2) of a few responses sampled at the first and the last step
(RUN/samples.jsonl). train.py writes it at the end of a run; this command rewrites it for any run directory:

    python -m infra.report RUN       # -> RUN/report.html
"""

from config import parser
from infra.cli import flags_first


def report_args(argv=None):
    """python -m infra.report's command line: the run directory."""
    ap = parser(
        description="Write RUN/report.html, the report of a train.py run directory."
    )
    ap.add_argument("run", metavar="RUN", help="a train.py output directory")
    return ap.parse_args(argv)


if __name__ == "__main__":  # flags first: --help and a refused flag answer before torch
    flags_first(report_args)

import datetime
import html
import json
import math
import os
import sys

from infra.checkpoint import read_json, step_of
from infra.data import write_atomic
from infra.rundir import check_run_dir
from infra.runs import RUN
from infra.seats import number_of, role_of

# Okabe-Ito colours: told apart by colour-blind readers, and none of them a shade of the heat map's blue or red
ROLE_COLOURS = {
    "coder": "#e69f00",
    "tester": "#009e73",
    "reasoner": "#cc79a7",
    "tool_user": "#56b4e9",
}
ALL = "all roles"
COLOURS = {**ROLE_COLOURS, ALL: "#555555"}
SMOOTH = 5  # steps in the moving average drawn over each logged line
CSS = (
    "body{font-family:sans-serif;max-width:66em;margin:1em auto;padding:0 1em}figure{display:inline-block;"
    "margin:0 .5em .5em 0}figcaption{font-size:.85em}table{border-collapse:collapse}td,th{padding:.15em .6em;"
    "border-bottom:1px solid #ddd;text-align:right}td:first-child,th:first-child{text-align:left}"
    ".meta td{text-align:left;font-size:.9em}"
    ".tok{font-family:monospace;white-space:pre-wrap;border-radius:2px}.heat{max-width:60em}"
)


def page(title, body):
    """A whole HTML page around `body` (one style sheet for the report and eval.py's heat map)."""
    return (
        f"<!doctype html><meta charset='utf-8'><title>{html.escape(title)}</title><style>{CSS}</style>"
        + body
    )


def finite(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# --- reading a run directory ---


def read_steps(path):
    """The records of a JSONL step log (metrics.jsonl, samples.jsonl) in file order; a line without a step (cut
    short by a crash, or no step record) is skipped, as checkpoint.start_log drops it on resume."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if finite(step_of(line))]


def last_per_step(records):
    """One record per step, in step order: a resumed run's later record of a step replaces the earlier one."""
    return [r for _, r in sorted({r["step"]: r for r in records}.items())]


def read_results(path):
    """results.json of train.py ({"before"|"after": {metric: {"mean", "std"}}}); a damaged one is a one-line
    ValueError naming it."""
    try:
        with open(path, encoding="utf-8") as f:
            results = json.load(f)
    except ValueError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    if not isinstance(results, dict) or not all(
        isinstance(m, dict) for m in results.values()
    ):
        raise ValueError(
            f"{path}: not the results.json of train.py (system -> metric -> mean, std)"
        )
    return results


# --- learning curves ---


def per_role(key):
    return lambda m: {role: s.get(key) for role, s in m.get("roles", {}).items()}


def format_share(rule):
    return lambda m: {
        role: shares.get(rule, 0.0) for role, shares in m.get("format", {}).items()
    }


def one(f):
    return lambda m: {ALL: f(m)}


CURVES = [  # (chart title, a metrics.jsonl record -> {line: value}); metrics.py names the fields
    ("reverse KL estimate per token (Eq. 5)", per_role("reverse_kl")),
    ("A<sup>OPD</sup> per token (Eq. 8)", per_role("a_opd")),
    ("A<sup>role</sup> per token (Eq. 9)", per_role("a_role")),
    ("unparsed responses, % (a format failure)", format_share("unparsed")),
    ("truncated responses, % (the length limit)", format_share("truncated")),
    (
        "conflict rate (turns whose roles disagree)",
        one(lambda m: m.get("conflict_rate")),
    ),
    ("turns per episode", one(lambda m: m.get("turns_per_episode"))),
    (
        "loss (Eq. 13), mean over the step's updates",
        one(
            lambda m: (
                sum(m["loss"]) / len(m["loss"])
                if m.get("loss") and all(map(finite, m["loss"]))
                else None
            )
        ),
    ),
    ("seconds per step", one(lambda m: sum(m.get("seconds", {}).values()))),
]
# a GRPO baseline's run (python -m baselines.grpo): its rewards in the teacher's place
REWARD_CURVES = [
    ("mean reward per response (App. D.4, Eq. 14)", lambda m: m.get("reward", {})),
    (
        "responses with a zero advantage, % (a group with equal rewards)",
        lambda m: m.get("zero_advantage", {}),
    ),
]


def ticks(lo, hi, integer=False, n=4):
    """About n round values, 1, 2 or 5 times a power of ten apart, from at most lo to at least hi: an axis."""
    raw = (hi - lo) / n
    unit = 10 ** math.floor(math.log10(raw))
    step = next(k * unit for k in (1, 2, 5, 10) if k * unit >= raw * (1 - 1e-9))
    step = max(step, 1) if integer else step
    first = math.floor(lo / step + 1e-9) * step
    return [first + i * step for i in range(math.ceil((hi - first) / step - 1e-9) + 1)]


def axis_range(lo, hi):
    """An axis from the data's least to its greatest value, never past them: a flat line gets room on the side
    its sign allows (values all >= 0, such as a share or a count, never show a negative axis, nor <= 0 a positive
    one), so that no axis runs where the data cannot be."""
    if hi - lo >= 1e-12:
        return lo, hi
    pad = max(1.0, abs(lo)) * 0.1
    return (
        (lo, hi + pad)
        if lo >= 0
        else (lo - pad, hi)
        if hi <= 0
        else (lo - pad, hi + pad)
    )


def inside(values, lo, hi):
    """The tick values within [lo, hi] (ticks rounds outwards)."""
    eps = (hi - lo) * 1e-9
    return [v for v in values if lo - eps <= v <= hi + eps]


def smoothed(values):
    """The trailing mean of each finite value over the last SMOOTH steps' finite values (None stays None)."""
    out = []
    for k, v in enumerate(values):
        window = [u for u in values[max(0, k - SMOOTH + 1) : k + 1] if finite(u)]
        out.append(sum(window) / len(window) if finite(v) else None)
    return out


def segments(steps, values):
    """The runs of consecutive finite values as [(step, value)]: a NaN or a missing value breaks the line."""
    out, run = [], []
    for x, y in zip(steps, values):
        if finite(y):
            run.append((x, y))
        elif run:
            out, run = out + [run], []
    return out + [run] if run else out


def chart(title, steps, lines, width=340, height=200):
    """One SVG line chart. steps: (S,) step numbers; lines: {name: (S,) values, None where a step had none}. Each
    line is drawn faint as logged and solid as its moving average (smoothed), in its role's colour."""
    left, right, top, bottom = 52, 10, 8, 24
    ys = [y for vs in lines.values() for y in vs if finite(y)]
    if not ys:
        return (
            f"<figure><figcaption>{title}</figcaption><p>no finite values</p></figure>"
        )
    (y0, y1), (x0, x1) = axis_range(min(ys), max(ys)), axis_range(steps[0], steps[-1])
    yt, xt = inside(ticks(y0, y1), y0, y1), inside(ticks(x0, x1, integer=True), x0, x1)
    px = lambda x: left + (x - x0) / (x1 - x0) * (width - left - right)
    py = lambda y: height - bottom - (y - y0) / (y1 - y0) * (height - top - bottom)
    out = [
        f"<figure><figcaption>{title}</figcaption><svg xmlns='http://www.w3.org/2000/svg' width='{width}' "
        f"height='{height}' font-size='10' font-family='sans-serif'>"
    ]
    for y in yt:
        out.append(
            f"<line x1='{left}' x2='{width - right}' y1='{py(y):.1f}' y2='{py(y):.1f}' stroke='#e4e4e4'/>"
            f"<text x='{left - 4}' y='{py(y) + 3:.1f}' text-anchor='end'>{y:.3g}</text>"
        )
    for x in xt:
        out.append(
            f"<text x='{px(x):.1f}' y='{height - 8}' text-anchor='middle'>{x:g}</text>"
        )
    out.append(f"<text x='2' y='{height - 8}' fill='#888'>step</text>")
    for name, values in lines.items():
        # the agents of a role share its colour
        colour = COLOURS.get(role_of(name), "#000000")
        for faint, vs in ((True, values), (False, smoothed(values))):
            for run in segments(steps, vs):
                if len(run) == 1:
                    out.append(
                        f"<circle cx='{px(run[0][0]):.1f}' cy='{py(run[0][1]):.1f}' r='2.5' fill='{colour}'/>"
                    )
                    continue
                points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in run)
                style = (
                    "stroke-width='1' stroke-opacity='0.35'"
                    if faint
                    else "stroke-width='2'"
                )
                out.append(
                    f"<polyline fill='none' stroke='{colour}' {style} points='{points}'/>"
                )
    return "".join(out) + "</svg></figure>"


def seat_order(name):
    """Roles in COLOURS' order, then any other by name (a run directory from elsewhere may name any), the agents of
    a role (infra/seats.py) in number order."""
    role = role_of(name)
    return (
        list(COLOURS).index(role) if role in COLOURS else len(COLOURS),
        role,
        number_of(name),
    )


def curves_html(records):
    """The charts of CURVES over metrics.jsonl's records (last_per_step), with one legend of the roles."""
    if not records:
        return "<p>metrics.jsonl holds no completed step yet.</p>"
    steps = [r["step"] for r in records]
    charts = []
    for title, values in CURVES + (
        REWARD_CURVES if any("reward" in r for r in records) else []
    ):
        per_step = [values(r) for r in records]
        names = sorted({k for v in per_step for k in v}, key=seat_order)
        charts.append(
            chart(title, steps, {k: [v.get(k) for v in per_step] for k in names})
        )
    roles = sorted(
        {k for r in records for k in r.get("roles", {})} | {ALL}, key=seat_order
    )
    legend = " ".join(
        f"<b style='color:{COLOURS.get(role_of(r), '#000000')}'>&#9472;&#9472; {html.escape(r)}</b>"
        for r in roles
    )
    return (
        f"<p>{legend} &nbsp; faint: as logged; solid: mean over the last {SMOOTH} steps.</p>"
        + "".join(charts)
    )


# --- the evaluation table ---

# The rows a reader looks for first, in this order: team accuracy, the exchange penalty (what RAS should raise,
# Fig. 3a), revise-iff-wrong (what PAC should raise, Fig. 4); the diagnostics follow alphabetically.
KEY_ROWS = ("acc_", "exchange_penalty_", "revise_iff_wrong_")


def row_order(metric):
    """Sort key of a metric's row: its KEY_ROWS rank (accuracy, App. D.5; exchange penalty, Fig. 3a;
    revise-iff-wrong, Fig. 4; the rest after them), then its name."""
    return next(
        (i for i, prefix in enumerate(KEY_ROWS) if metric.startswith(prefix)),
        len(KEY_ROWS),
    ), metric


def table_rows(rows):
    """rows: system name -> eval.mean_std's {metric: {"mean", "std"}}. -> [(metric, [cell per system])], one row
    per metric, KEY_ROWS first, a cell "mean ± std" or "-" where a system has no such metric."""
    metrics = sorted({k for m in rows.values() for k in m}, key=row_order)
    return [
        (
            k,
            [
                f"{m[k]['mean']:.1f} ± {m[k]['std']:.1f}" if k in m else "-"
                for m in rows.values()
            ],
        )
        for k in metrics
    ]


def results_html(results):
    """results.json as an HTML table, one column per evaluation (before, after)."""
    head = "".join(f"<th>{html.escape(name)}</th>" for name in results)
    body = "".join(
        f"<tr><td>{html.escape(k)}</td>"
        + "".join(f"<td>{html.escape(c)}</td>" for c in cells)
        + "</tr>"
        for k, cells in table_rows(results)
    )
    return f"<table><tr><th>metric (mean ± std over the evaluation seeds)</th>{head}</tr>{body}</table>"


# {row: {teacher: value}}: what a caller measured of the teacher before training
CHECK = "teacher_check.json"


def check_html(rows):
    """RUN/teacher_check.json (e.g. toy/learned.py's check_rows) as an HTML table, one column per teacher."""
    names = list(next(iter(rows.values()), {}))
    head = "".join(f"<th>{html.escape(n)}</th>" for n in names)
    cell = lambda v: html.escape(v) if isinstance(v, str) else f"{v:.1f}"
    body = "".join(
        f"<tr><td>{html.escape(k)}</td>"
        + "".join(f"<td>{cell(c.get(n, '-'))}</td>" for n in names)
        + "</tr>"
        for k, c in rows.items()
    )
    return f"<table><tr><th>% of held-out cases</th>{head}</tr>{body}</table>"


# --- heat maps of the role advantage (App. G.2) ---


def heatmap(rows, block=4, levels=11):
    """App. G.2: per-token A^role = l^(i) - l^(j) (Eq. 9), averaged over blocks of `block` tokens and quantised
    into `levels` signed levels (the middle one ~ 0), on one scale for all rows. rows: (title, role, pieces,
    a_role): pieces (L,) the text of each token (token_pieces), a_role (L,) floats (None for a non-finite one).
    An HTML fragment: blue = typical of the target role, red = of its teammate."""
    blocks = [
        [
            (
                "".join(pieces[i : i + block]),
                [v for v in a_role[i : i + block] if finite(v)],
            )
            for i in range(0, len(pieces), block)
        ]
        for _, _, pieces, a_role in rows
    ]
    blocks = [
        [(text, sum(vs) / len(vs) if vs else None) for text, vs in row]
        for row in blocks
    ]
    top = max([1e-9] + [abs(v) for row in blocks for _, v in row if v is not None])
    half = levels // 2
    parts = [
        f"<p>Blocks of {block} tokens; colour = mean A<sup>role</sup> in {levels} levels. Blue: typical of "
        "the target role; red: of its teammate.</p>",
        scale_html(top, half) if rows else "",
    ]
    for (title, role, _, _), row in zip(rows, blocks):
        parts.append(
            f"<p class='heat'><b>{html.escape(title)} ({html.escape(role)})</b><br>"
        )
        for text, v in row:
            q = 0 if v is None else max(-half, min(half, round(v / top * half)))
            tip = "none" if v is None else f"{v:+.4f}"
            parts.append(
                f"<span class='tok' title='{tip}' style='background:{level_colour(q, half)}'>"
                f"{html.escape(text)}</span>"
            )
        parts.append("</p>")
    return "".join(parts)


def level_colour(q, half):
    """The colour of level q in -half..half: blue for q > 0 (the target role's), red below, deeper further out."""
    return (
        f"rgba(40,90,220,{q / half * 0.8:.2f})"
        if q > 0
        else f"rgba(220,50,40,{-q / half * 0.8:.2f})"
    )


def scale_html(top, half):
    """The heat map's colour scale: every level's colour with the mean A^role it stands for, -top to +top."""
    cells = "".join(
        f"<span class='tok' style='background:{level_colour(q, half)}'> {q / half * top:+.3g} </span>"
        for q in range(-half, half + 1)
    )
    return f"<p class='scale'>A<sup>role</sup>: teammate's &larr; {cells} &rarr; target role's</p>"


def samples_html(samples):
    """The heat maps of samples.jsonl's records at its first and last step (metrics.step_samples)."""
    if not samples:
        return "<p>samples.jsonl holds no sampled response.</p>"
    steps = sorted({s["step"] for s in samples})
    rows = [
        (
            f"step {s['step']} ({'first, before any update' if s['step'] == steps[0] else 'last'}), problem "
            f"{s['problem']}",
            s["role"],
            s["pieces"],
            s["a_role"],
        )
        for s in samples
        if s["step"] in (steps[0], steps[-1])
    ]
    return heatmap(rows)


# --- the page ---


def header_html(run_dir):
    """What the report reports, at its top: when the run began and with which command (each resume after it), how
    each ended, its wall time and the machine it ran on (CPU, kernels, GPU), the preset, lambda and seeds
    (RUN/run.json, which train.py writes at every start), and when this page was written. run.json may come from
    elsewhere: whatever its fields hold is shown as text."""
    run = read_json(os.path.join(run_dir, RUN))
    now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    if not (
        isinstance(run, dict)
        and isinstance(run.get("commands"), list)
        and run["commands"]
        and all(isinstance(c, dict) for c in run["commands"])
        and isinstance(run.get("args"), dict)
    ):
        return (
            f"<p>Written {now}. No run.json of train.py: the date, command and seeds of the run were not "
            "recorded.</p>"
        )
    # run.json's fields, whatever they hold, are shown as text: each escaped where it enters a row
    text = lambda v: html.escape(str(v))
    args, rows = run["args"], []
    for k, c in enumerate(run["commands"]):
        when = "began" if k == 0 else f"resumed from step {c.get('from_step')}"
        # how the command ended and on what: runs from two machines differ in their last bits (README)
        took = (
            f"{c.get('ended')} after {wall_time(c.get('seconds'))}"
            if "ended" in c
            else "did not record its end (still running, or killed)"
        )
        rows.append(
            (
                text(f"{c.get('date')}, {when}"),
                f"<code>{text(c.get('command'))}</code><br>{text(took)}; "
                f"{text(c.get('machine', 'machine not recorded'))}",
            )
        )
    seeds = args.get("eval_seeds") or []
    evaluation = (
        f"evaluation {' '.join(map(str, seeds)) if isinstance(seeds, list) else seeds}"
        if args.get("eval_problems")
        else "no evaluation (no --eval-problems)"
    )
    rows += [
        ("preset", text(args.get("preset"))),
        ("λ (Eq. 10)", text(args.get("lam"))),
        ("seeds", text(f"training {args.get('seed')}; {evaluation}")),
        ("report written", now),
    ]
    return (
        "<table class='meta'>"
        + "".join(f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in rows)
        + "</table>"
    )


def wall_time(seconds):
    """A wall time as the commands print it, "3 min 41 s"; a value that is not a number (run.json may come from
    elsewhere) as it is."""
    if not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        return f"{seconds} s"
    return f"{int(seconds // 60)} min {int(seconds % 60)} s"


def section(run_dir, name, read, render, missing):
    """A section from RUN/name: render(read(path)), or the sentence `missing` when there is no such file."""
    path = os.path.join(run_dir, name)
    return (
        render(read(path)) if os.path.isfile(path) else f"<p>No {name}: {missing}.</p>"
    )


def write_report(run_dir):
    """Write RUN/report.html (atomically) from the run directory's files; returns its path. A run directory
    without metrics.jsonl, one holding a link or anything else a run directory may not (infra/rundir.py), or a
    damaged results.json, is a one-line ValueError."""
    check_run_dir(run_dir, run_dir)
    if not os.path.isfile(os.path.join(run_dir, "metrics.jsonl")):
        raise ValueError(f"{run_dir}: not a train.py run directory (no metrics.jsonl)")
    name = os.path.basename(os.path.abspath(run_dir))
    body = [
        f"<h1>MAS-OPD run {html.escape(name)}</h1>",
        header_html(run_dir),
        "<h2>Learning curves</h2>",
        section(
            run_dir,
            "metrics.jsonl",
            lambda p: last_per_step(read_steps(p)),
            curves_html,
            "",
        ),
        "<h2>Evaluation on the held-out problems</h2>",
        section(
            run_dir,
            "results.json",
            read_results,
            results_html,
            "train.py evaluates only with --eval-problems, and writes this file when the run ends",
        ),
        "<h2>Role advantage of sampled responses (Eq. 9, App. G.2)</h2>",
        section(
            run_dir,
            "samples.jsonl",
            read_steps,
            samples_html,
            "train.py records a few responses at its first and last step",
        ),
    ]
    # only a run whose teacher was checked has one
    if os.path.isfile(os.path.join(run_dir, CHECK)):
        body += [
            "<h2>The teacher's check on held-out responses</h2>",
            section(run_dir, CHECK, read_json, check_html, ""),
        ]
    path = os.path.join(run_dir, "report.html")
    write_atomic(path, page(f"MAS-OPD run {name}", "".join(body)))
    return path


def main(argv=None):
    run = report_args(argv).run
    try:
        print(f"wrote {write_report(run)}")
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
