"""The toy world: its problems are valid, its simulator agrees with the real sandboxed environment and verifier,
its training examples respect who may see what, and MAS-OPD run through train.py moves its students the way
each mechanism should (PAC: the Tester revises a wrong test case; RAS: the roles drop the teammate's work)."""

import ast
import dataclasses
import hashlib
import json
import os
import random
import re
import shutil
import signal
from functools import partial
from types import SimpleNamespace

import pytest
import torch

import config
import toy.__main__ as toy_demo
import train
from attribution import HEADER, attribute_turn
from config import get_args
from infra.data import check_problem, load_problems
from infra.models import load_model, machine, make_tokenizer, tiny_model
from prompts import build_context
from rollout import RolloutConfig, code_env, math_env
from sampler import sequence_logprobs
from teacher import ROLE_CONDITIONS
from tools.contexts import main as contexts_main
from toy import ablation, baselines, learned, scaling
from toy import build as toy_build
from toy.__main__ import main as toy_main
from toy.build import (
    TOY_VERSION,
    build_line,
    build_toy,
    make_phrase_tokenizer,
    sft,
    sft_examples,
    train_args,
)
from toy.expert import HandTeacher
from toy.world import NOUN, ROLE_BLIND, SPLITS, simulate, toy_problems


def test_problems_are_valid_and_splits_disjoint():
    splits = {s: toy_problems(s) for s in SPLITS}
    assert [len(splits[s]) for s in SPLITS] == [148, 37, 37]
    ids = [{p["id"] for p in ps} for ps in splits.values()]
    assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
    for ps in splits.values():
        assert {p["domain"] for p in ps} == {"code", "math"}
        for p in ps:
            check_problem(p)
    with pytest.raises(ValueError, match="split"):
        toy_problems("held-out")


def test_simulator_matches_the_real_environment_and_verifier():
    rng, cfg = random.Random(0), RolloutConfig(code_timeout=5, math_timeout=5)
    problems = toy_problems("train")
    seen = set()
    for _ in range(10):
        p = rng.choice(problems)
        for turn in simulate(p, ROLE_BLIND, rng):
            real, agree = (code_env if p["domain"] == "code" else math_env)(
                p, turn.responses, cfg
            )
            assert real == turn.artefacts
            att = attribute_turn(p, real, timeout=5)
            assert att.description == turn.verdict
            assert list(att.checks.values()) == list(turn.checks.values())
            seen |= {p["domain"]} | {
                "whole job"
                for r, text in turn.responses.items()
                if text != turn.own[r] and not text.endswith(turn.own[r])
            }
    assert seen >= {"code", "math"}


def test_examples_students_never_see_verdicts_or_role_conditions():
    tok = make_tokenizer()
    for context, response in sft_examples(tok, toy_problems("train"), 80, 0):
        text = tok.decode(context) + tok.decode(response)
        assert HEADER not in text and not any(
            c[:40] in text for c in ROLE_CONDITIONS.values()
        )


def test_phrase_tokenizer_round_trips_keeps_digits_apart_and_decisions_alone():
    corpus = [
        "I keep my test case.\nTest Input:\n```\n3\n```\nTest Output:\n```\n56\n```"
    ] * 50
    tok = make_phrase_tokenizer(corpus, vocab_size=400)
    text = "<|im_start|>user\nWhat is 12 times 34? ünïcode\n  x<|im_end|>"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    assert all(
        not any(ch.isdigit() for ch in t)
        or t.strip("Ġ").isdigit()
        and len(t.strip("Ġ")) == 1
        for t in tok.convert_ids_to_tokens(ids)
    )
    pieces = [
        tok.decode([i]) for i in tok(corpus[0], add_special_tokens=False)["input_ids"]
    ]
    # a decision, then a label with its fence
    assert pieces[:2] == ["I keep my test case.\n", "Test Input:\n```\n"]


def test_sft_fits_a_small_set():
    tok = make_tokenizer()
    ex = sft_examples(tok, toy_problems("train"), 4, 3)
    model = tiny_model("qwen3", layers=1, hidden=32, seed=0)
    before = (
        torch.stack([lp.mean() for lp in sequence_logprobs(model, *zip(*ex))])
        .mean()
        .item()
    )
    sft(model, ex, 12, batch=4, lr=2e-2)
    with torch.no_grad():
        after = (
            torch.stack([lp.mean() for lp in sequence_logprobs(model, *zip(*ex))])
            .mean()
            .item()
        )
    assert after > before + 1.0


@pytest.fixture(scope="module")
def small_toy(tmp_path_factory):
    """A toy build of a few SFT steps, and a file of 4 held-out toy problems: (cache dir, problem file)."""
    root = tmp_path_factory.mktemp("toy")
    cache = str(root / "cache")
    build_toy(cache, student_steps=3, examples=64)
    held = root / "held.jsonl"
    held.write_text("".join(json.dumps(p) + "\n" for p in toy_problems("test")[::10]))
    return cache, str(held)


def test_short_toy_run_builds_caches_trains_and_evaluates(tmp_path, small_toy, capsys):
    """`python -m toy` in miniature: the toy build (a few SFT steps), cached, with its problem files; MAS-OPD
    steps through train.py with the hand-written teacher; evaluation before and after on held-out toy problems."""
    cache, held = small_toy
    root = os.path.join(cache, TOY_VERSION)
    assert os.listdir(cache) == [TOY_VERSION]  # no temporary directory left behind
    # cached: built once, never rebuilt
    assert build_toy(cache, student_steps=10**9) == root
    for split in SPLITS:
        assert [
            p["id"] for p in load_problems(os.path.join(root, f"{split}.jsonl"))
        ] == [p["id"] for p in toy_problems(split)]
    out = str(tmp_path / "run")
    toy_main(
        [
            "--cache",
            cache,
            "--out",
            out,
            "--steps",
            "2",
            "--batch",
            "4",
            "--mini-batch",
            "2",
            "--max-new-tokens",
            "12",
            "--max-turns",
            "2",
            "--eval-seeds",
            "5",
            "--eval-problems",
            held,
        ]
    )
    printed = capsys.readouterr().out
    assert '"teacher": null' in printed and "teacher: HandTeacher" in printed
    # names the preset that runs
    assert any(line.startswith("preset: toy (") for line in printed.splitlines())
    with open(os.path.join(out, "results.json")) as f:
        results = json.load(f)
    assert set(results) == {"before", "after"}
    for r in results.values():
        assert 0 <= r["acc_code"]["mean"] <= 100 and 0 <= r["acc_math"]["mean"] <= 100
    with open(os.path.join(out, "metrics.jsonl")) as f:
        lines = [json.loads(line) for line in f]
    assert [m["step"] for m in lines] == [0, 1]
    # scored, finite
    assert all(v["reverse_kl"] == v["reverse_kl"] for v in lines[0]["roles"].values())
    # the run report, with the hand-written teacher's role advantage of responses from both steps
    assert f"report: {os.path.join(out, 'report.html')}" in printed
    page = open(os.path.join(out, "report.html"), encoding="utf-8").read()
    assert (
        "<td>acc_code</td>" in page
        and "step 0 (first" in page
        and "step 1 (last)" in page
    )
    # the toy preset evaluates with the seats exchanged too, and the demo sums up after the full table
    assert {"exchange_penalty_code", "exchange_penalty_math"} <= set(results["after"])
    closing = printed[printed.index("== summary") :]
    assert (
        "evaluation seeds 5" in closing
        and "| acc_code |" in closing
        and "| exchange_penalty_math |" in closing
    )
    assert "parse_" not in closing.split(toy_demo.LEGEND)[0] and re.search(
        r"wall time: \d+ min \d+ s", closing
    )


def test_a_demo_interrupted_twice_and_resumed_keeps_its_evaluation_before_training(
    tmp_path, small_toy, monkeypatch, capsys, sandbox_continues
):
    """Ctrl-C during the demo's training, twice, each time continued with --resume: the summary still has both
    columns, and its "before" is the evaluation made when the run began."""
    cache, held = small_toy
    out = str(tmp_path / "run")
    demo = [
        "--cache",
        cache,
        "--out",
        out,
        "--steps",
        "3",
        "--save-every",
        "1",
        "--batch",
        "2",
        "--mini-batch",
        "2",
        "--max-new-tokens",
        "8",
        "--max-turns",
        "2",
        "--eval-seeds",
        "5",
        "--eval-problems",
        held,
    ]
    step = train.train_step
    for stop_at in (1, 2):

        def interrupted(k, *a, **kw):  # Ctrl-C as step `stop_at` begins
            if k == stop_at:
                os.kill(os.getpid(), signal.SIGINT)
            return step(k, *a, **kw)

        with monkeypatch.context() as m:
            m.setattr(train, "train_step", interrupted)
            # a KeyboardInterrupt would end the whole session
            with pytest.raises(BaseException) as e:
                toy_main(demo + (["--resume"] if stop_at > 1 else []))
        assert isinstance(e.value, SystemExit) and e.value.code == 130
        assert (
            f"stopped by SIGINT with {stop_at} of 3 steps done"
            in capsys.readouterr().err
        )
        # the resume below runs in this process, as a new one would run it
        sandbox_continues()
        if stop_at == 1:
            before = json.load(open(os.path.join(out, "results.json")))["before"]
    toy_main(demo + ["--resume"])
    printed = capsys.readouterr().out
    results = json.load(open(os.path.join(out, "results.json")))
    assert set(results) == {"before", "after"} and results["before"] == before
    assert (
        "resuming from step 2: 2 of 3 steps done" in printed
        and "| metric | before | after |" in printed
    )


def test_the_demo_runs_train_py_with_the_toy_preset_and_nothing_else():
    """The toy's schedule is a preset of config.py's one table: the demo's arguments name the files and the preset,
    no value of their own, and the toy preset is what a run of those arguments gets."""
    targv = train_args("ROOT", "OUT")
    assert targv == [
        "--problems",
        os.path.join("ROOT", "train.jsonl"),
        "--student",
        os.path.join("ROOT", "student"),
        "--out",
        "OUT",
        "--preset",
        "toy",
    ]
    args = get_args(targv)
    assert {k: getattr(args, k) for k in config.TOY if k != "seeds"} == {
        k: v for k, v in config.TOY.items() if k != "seeds"
    }
    assert config.preset_line(args).startswith(
        "preset: toy (steps=100, batch=16, mini_batch=8, micro_batch=64, "
    )
    # one thread, whatever the load: the toy's figures follow the order of float sums, which the thread count sets
    assert args.threads == 1 and get_args(targv[:-2]).threads == 0


def test_the_summary_shows_the_rows_that_matter_in_order_and_what_a_problem_is_worth():
    problems = [{"domain": "code"}] * 19 + [{"domain": "math"}] * 18
    m = lambda v: {"mean": v, "std": 1.5}
    results = {
        "before": {
            "turns_code": m(3),
            "acc_math": m(33),
            "revise_iff_wrong_tester": m(10),
            "acc_code": m(47),
            "exchange_penalty_code": m(0),
        },
        "after": {
            "turns_code": m(1),
            "acc_math": m(96),
            "revise_iff_wrong_tester": m(80),
            "acc_code": m(90),
            "exchange_penalty_code": m(40),
        },
    }
    text = toy_demo.summary(
        results, problems, [2000, 2001, 2002], "runs/toy/report.html", 421.7
    )
    assert (
        "19 code problems (one = 5.3 points), 18 math problems (one = 5.6 points)"
        in text
    )
    assert "seeds 2000, 2001, 2002" in text and "turns_code" not in text
    rows = [
        line.split(" | ")[0]
        for line in text.splitlines()
        if line.startswith("| ") and "±" in line
    ]
    assert rows == [
        "| acc_code",
        "| acc_math",
        "| exchange_penalty_code",
        "| revise_iff_wrong_tester",
    ]
    assert "| acc_code | 47.0 ± 1.5 | 90.0 ± 1.5 |" in text
    assert (
        "report: runs/toy/report.html (learning curves, every metric, heat maps)\n"
        "wall time: 7 min 1 s\n"
    ) in text
    # the last line: the CPU kernels that made the figures, and where another CPU's are
    assert text.endswith(
        f"made with {machine()}; the README shows this summary from AVX-512 and from AVX2 "
        "kernels side by side: another CPU's 'after' figures may differ by several points "
        "(README: what the figures depend on)"
    )
    assert "kernels" in machine()


def test_a_build_another_process_finished_first_is_kept(tmp_path, monkeypatch):
    """Two ablation processes started on an empty cache both build; the one whose rename comes second keeps the
    first one's build and leaves no temporary directory."""
    real_replace = os.replace

    def other_process_first(src, dst):
        if dst.endswith(TOY_VERSION):
            # the other process's build of the same version lands first
            shutil.copytree(src, dst)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", other_process_first)
    root = build_toy(str(tmp_path), student_steps=1, examples=8)
    assert os.listdir(tmp_path) == [TOY_VERSION] and os.path.isdir(
        os.path.join(root, "student")
    )


def test_ablation_trains_each_variant_per_seed_and_tables_four_systems(
    tmp_path, small_toy, capsys
):
    cache, held = small_toy
    out = str(tmp_path / "abl")
    ablation.main(
        [
            "--out",
            out,
            "--steps",
            "1",
            "--train-seeds",
            "0",
            "1",
            "--eval-seeds",
            "5",
            "--cache",
            cache,
            "--batch",
            "2",
            "--mini-batch",
            "2",
            "--max-new-tokens",
            "8",
            "--max-turns",
            "2",
            "--eval-problems",
            held,
        ]
    )
    for run in ("mas_opd", "w_o_ras", "w_o_pac"):
        for seed in (0, 1):
            assert os.path.isdir(
                os.path.join(out, f"{run}_seed{seed}", "checkpoint", "coder")
            )
    with open(os.path.join(out, "ablation.json")) as f:
        results = json.load(f)
    assert list(results) == ["untrained", "MAS-OPD", "w/o RAS (lambda=0)", "w/o PAC"]
    for m in results.values():
        assert {
            "acc_code",
            "acc_math",
            "exchange_penalty_code",
            "exchange_penalty_math",
        } <= set(m)
    # one model in both seats
    assert results["untrained"]["exchange_penalty_code"]["mean"] == 0
    assert "Table 2 analogue" in capsys.readouterr().out
    # --reuse evaluates the trained runs again without training them
    stamp = os.path.getmtime(
        os.path.join(out, "mas_opd_seed0", "checkpoint", "state.pt")
    )
    ablation.main(
        [
            "--out",
            out,
            "--train-seeds",
            "0",
            "1",
            "--eval-seeds",
            "5",
            "--cache",
            cache,
            "--max-new-tokens",
            "8",
            "--max-turns",
            "2",
            "--eval-problems",
            held,
            "--reuse",
        ]
    )
    printed = capsys.readouterr().out
    assert (
        "== training" not in printed
        and printed.count("== reusing") == 6
        and "Table 2 analogue" in printed
    )
    assert (
        os.path.getmtime(os.path.join(out, "mas_opd_seed0", "checkpoint", "state.pt"))
        == stamp
    )
    # --train-only trains the runs of its seeds and stops: no evaluation, the table of the earlier run untouched
    table = os.path.getmtime(os.path.join(out, "ablation.json"))
    ablation.main(
        [
            "--out",
            out,
            "--steps",
            "1",
            "--train-seeds",
            "2",
            "--cache",
            cache,
            "--batch",
            "2",
            "--mini-batch",
            "2",
            "--max-new-tokens",
            "8",
            "--max-turns",
            "2",
            "--train-only",
        ]
    )
    printed = capsys.readouterr().out
    assert (
        printed.count("== training") == 3
        and "== evaluating" not in printed
        and "Table 2" not in printed
    )
    assert all(
        os.path.isdir(os.path.join(out, f"{run}_seed2", "checkpoint", "coder"))
        for run in ("mas_opd", "w_o_ras", "w_o_pac")
    )
    assert os.path.getmtime(os.path.join(out, "ablation.json")) == table


def test_scaling_trains_each_team_size_and_draws_the_curve(tmp_path, small_toy, capsys):
    cache, held = small_toy
    out = str(tmp_path / "scaling")
    scaling.main(
        [
            "--out",
            out,
            "--agents",
            "1",
            "2",
            "--steps",
            "1",
            "--train-seeds",
            "0",
            "--eval-seeds",
            "5",
            "--cache",
            cache,
            "--batch",
            "2",
            "--mini-batch",
            "2",
            "--max-new-tokens",
            "8",
            "--max-turns",
            "2",
            "--eval-problems",
            held,
        ]
    )
    assert sorted(os.listdir(os.path.join(out, "n_2_seed0", "checkpoint"))) == [
        "coder",
        "coder2",
        "reasoner",
        "reasoner2",
        "settings.json",
        "state.pt",
        "tester",
        "tester2",
        "tool_user",
        "tool_user2",
    ]
    with open(os.path.join(out, "scaling.json")) as f:
        results = json.load(f)
    assert list(results) == [
        "untrained n=1",
        "trained n=1",
        "untrained n=2",
        "trained n=2",
    ]
    assert all(
        {"acc_code", "acc_math", "turns_code"} <= set(m) for m in results.values()
    )
    printed = capsys.readouterr().out
    assert (
        "| metric | untrained, 2 agents | untrained, 4 agents | trained, 2 agents | trained, 4 agents |"
        in printed
    )
    assert (
        "wall time" in printed
        and open(os.path.join(out, "scaling.png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    )
    assert "data:image/png;base64," in open(os.path.join(out, "report.html")).read()


@pytest.mark.parametrize(
    "command, first",
    [
        (ablation.main, "mas_opd_seed0"),
        (scaling.main, "n_1_seed0"),
        (baselines.main, "mas_opd_seed0"),
    ],
    ids=["ablation", "scaling", "baselines"],
)
def test_a_study_refuses_a_run_folder_that_holds_a_run_before_training_any(
    command, first, tmp_path, small_toy, error_line, monkeypatch
):
    cache, held = small_toy
    run = tmp_path / "study" / first
    run.mkdir(parents=True)
    # a run stopped before its first checkpoint
    (run / "metrics.jsonl").write_text('{"step": 0}\n')
    monkeypatch.setattr(
        toy_build,
        "build_toy",
        lambda *a, **k: pytest.fail("the toy world loaded before the refusal"),
    )
    with pytest.raises(SystemExit) as e:
        command(
            [
                "--out",
                str(tmp_path / "study"),
                "--train-seeds",
                "0",
                "--cache",
                cache,
                "--eval-problems",
                held,
            ]
        )
    assert e.value.code == 2
    error_line(
        f"{run} holds a train.py run (no checkpoint, 1 step(s) in metrics.jsonl): --reuse keeps it (and "
        f"finishes it if it stopped early), or give another --out (--overwrite discards it)"
    )
    assert (run / "metrics.jsonl").read_text() == '{"step": 0}\n'


def test_over_runs_is_mean_and_std_over_training_runs():
    runs = [
        {"acc_code": {"mean": 10.0, "std": 3.0}},
        {"acc_code": {"mean": 20.0, "std": 1.0}},
    ]
    assert ablation.over_runs(runs) == {
        "acc_code": {"mean": 15.0, "std": pytest.approx(7.0710678)}
    }


# ---------------------------------------------------------------------------------- the start of a toy command


class Built(Exception):
    """Raised by a stand-in build: the command stops there, as nothing after the build is under test."""


@pytest.mark.parametrize(
    "command",
    [toy_main, ablation.main, contexts_main, scaling.main],
    ids=["toy", "ablation", "contexts", "scaling"],
)
def test_each_toy_command_sets_the_threads_then_says_what_it_builds_before_the_build(
    command, tmp_path, monkeypatch, capsys
):
    """torch's default thread count on a busy machine slowed the build ~20x: --threads (train.py's flag, 0 = the
    free cores) is applied before the build starts, and the line saying what is built is out before it too."""
    calls = []
    monkeypatch.setattr(
        toy_build,
        "cpu_threads",
        lambda n: calls.append(("threads", n)) or "threads: chosen",
    )

    def build(cache, rebuild=False):
        calls.append(("build", cache, capsys.readouterr().out.splitlines()[-2:]))
        raise Built

    monkeypatch.setattr(toy_build, "build_toy", build)
    cache = str(tmp_path)
    with pytest.raises(Built):
        command(["--cache", cache, "--threads", "1"])
    assert calls == [
        ("threads", 1),
        ("build", cache, ["threads: chosen", build_line(cache)]),
    ]


def test_the_build_line_says_what_is_copied_or_built_and_where_or_that_it_is_cached(
    tmp_path, monkeypatch
):
    cache = str(tmp_path)
    root = os.path.join(cache, TOY_VERSION)
    line = build_line(cache)
    assert "\n" not in line and line.startswith(
        "toy world: the toy student is the one shipped in toy/student/ "
        "(4,000 SFT steps, built in "
    )
    assert line.endswith(
        f"python -m toy --rebuild trains it here), copied with the toy problems to {root}/"
    )
    assert build_line(cache, rebuild=True).startswith(
        "toy world: building the toy student (a tokenizer, 4,000 SFT"
    )
    monkeypatch.setattr(toy_build, "shipped_record", lambda *a: None)
    line = build_line(cache)
    assert line.startswith(
        "toy world: building the toy student (the shipped toy/student/ was trained from other "
        "data or settings) (a tokenizer, 4,000 SFT steps"
    )
    assert line.endswith(f"cached in {root}/")
    os.makedirs(os.path.join(root, "student"))
    assert (
        build_line(cache)
        == f"toy world: the toy student and problems are loaded from the cache, {root}/"
    )


def test_the_shipped_student_is_what_this_code_would_build():
    """toy/student/ is used only while its build.json fingerprint is this code's: a change of the world, the
    prompts, the tokenizer or the build's settings must come with a new shipped student."""
    assert toy_build.shipped_record() is not None, (
        "toy/student/ is not what build_toy would train from this code: run python -m toy --rebuild --build-only "
        f"--cache C and copy C/{TOY_VERSION}/student/ over toy/student/"
    )


def test_the_shipped_student_is_refused_for_other_settings_weights_or_data(
    tmp_path, monkeypatch
):
    assert toy_build.shipped_record(student_steps=3999) is None  # other settings
    shipped = tmp_path / "student"
    shutil.copytree(toy_build.SHIPPED, shipped)
    monkeypatch.setattr(toy_build, "SHIPPED", str(shipped))
    assert toy_build.shipped_record() is not None
    weights = shipped / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of one weight
    weights.write_bytes(bytes(data))
    assert toy_build.shipped_record() is None
    monkeypatch.undo()
    monkeypatch.setattr(
        toy_build, "ROLE_BLIND", dataclasses.replace(ROLE_BLIND, err=0.2)
    )
    toy_build.shipped_fingerprint.cache_clear()
    try:
        # other data: the simulated students slip more often
        assert toy_build.shipped_record() is None
    finally:
        monkeypatch.undo()
        toy_build.shipped_fingerprint.cache_clear()


@pytest.mark.parametrize(
    "shipped, pins, constant",
    [
        (toy_build.SHIPPED, toy_build.STUDENT_FILES, "toy/build.py's STUDENT_FILES"),
        (learned.SHIPPED, learned.TEACHER_FILES, "toy/learned.py's TEACHER_FILES"),
    ],
    ids=["student", "teacher"],
)
def test_the_pinned_hashes_are_the_shipped_files_and_python_m_toy_build_prints_them(
    capsys, shipped, pins, constant
):
    """The pins are every file of toy/student/ and toy/teacher/ as shipped: whoever ships another model
    pastes what `python -m toy.build toy/student` (or toy/teacher) prints."""
    toy_build.main([shipped])
    printed = ast.literal_eval("{" + capsys.readouterr().out + "}")
    assert printed == pins, (
        f"{shipped} is not what {constant} pins: paste the lines of python -m toy.build into it"
    )


@pytest.mark.parametrize(
    "name, named",
    [
        # build.json rewritten too: its sha256 names the new weights
        ("model.safetensors", "build.json, model.safetensors"),
        ("chat_template.jinja", "chat_template.jinja"),
    ],
)
def test_a_changed_shipped_file_is_not_used_though_its_build_json_matches_it(
    name, named, tmp_path, monkeypatch
):
    """One byte of the weights or of the chat template, with build.json rewritten to name the weights' hash: the
    build line names the files that are not the pinned ones, and the student is trained, not copied."""
    shipped = tmp_path / "student"
    shutil.copytree(toy_build.SHIPPED, shipped)
    monkeypatch.setattr(toy_build, "SHIPPED", str(shipped))
    data = bytearray((shipped / name).read_bytes())
    data[-2] ^= 1
    (shipped / name).write_bytes(bytes(data))
    record = json.loads((shipped / "build.json").read_text())
    weights = (shipped / "model.safetensors").read_bytes()
    record["sha256"] = hashlib.sha256(weights).hexdigest()
    (shipped / "build.json").write_text(json.dumps(record, indent=1) + "\n")
    assert toy_build.shipped_record() is None
    assert build_line(str(tmp_path / "cache")).startswith(
        "toy world: building the toy student (the shipped toy/student/ holds other bytes than this "
        f"code pins ({named}), so it is not used) (a tokenizer"
    )

    def trained(*a, **k):
        raise RuntimeError("trained")

    monkeypatch.setattr(toy_build, "tiny_model", trained)
    with pytest.raises(RuntimeError, match="trained"):
        build_toy(str(tmp_path / "cache"))


def test_only_the_pinned_files_are_copied_and_each_is_checked_as_it_is(
    tmp_path, monkeypatch
):
    """A file added beside the shipped student (an added_tokens.json would change its tokenizer) is not copied,
    and bytes that differ from the pins when they are copied are refused."""
    shipped = tmp_path / "student"
    shutil.copytree(toy_build.SHIPPED, shipped)
    (shipped / "added_tokens.json").write_text('{"<evil>": 5000}')
    monkeypatch.setattr(toy_build, "SHIPPED", str(shipped))
    monkeypatch.setattr(
        toy_build,
        "sft",
        lambda *a, **k: pytest.fail("trained although a student is shipped"),
    )
    root = build_toy(str(tmp_path / "cache"))
    assert sorted(os.listdir(os.path.join(root, "student"))) == sorted(
        toy_build.STUDENT_FILES
    )
    pins = {**toy_build.STUDENT_FILES, "config.json": "0" * 64}
    with pytest.raises(
        ValueError, match=r"student/config.json: other bytes than this code pins"
    ):
        toy_build.copy_pinned(str(shipped), str(tmp_path / "copy"), pins)


def test_an_empty_cache_gets_the_shipped_student_without_training_and_it_is_the_one_shipped(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(
        toy_build,
        "sft",
        lambda *a, **k: pytest.fail("trained although a student is shipped"),
    )
    root = build_toy(str(tmp_path))
    for name in os.listdir(toy_build.SHIPPED):
        assert (tmp_path / TOY_VERSION / "student" / name).read_bytes() == open(
            os.path.join(toy_build.SHIPPED, name), "rb"
        ).read()
    assert sorted(os.listdir(root)) == [
        "student",
        "test.jsonl",
        "train.jsonl",
        "valid.jsonl",
    ]
    model, tok = load_model(os.path.join(root, "student"))
    ex = sft_examples(tok, toy_problems("valid"), 64, 99, progress=False)
    with torch.no_grad():
        nll = -torch.cat(sequence_logprobs(model, *zip(*ex))).mean().item()
    # the trained student (0.40 nats on held-out responses), not a fresh model (7)
    assert nll < 0.5


def test_a_build_is_followed_by_the_time_it_took_here_and_a_copied_or_cached_one_by_nothing(
    tmp_path, monkeypatch, capsys
):
    """No promised time: after a build, one line says how long it took on this machine and at what load, and
    after --rebuild whether it wrote the shipped student's bytes."""
    monkeypatch.setattr(toy_build, "cpu_threads", lambda n: "threads: chosen")
    monkeypatch.setattr(toy_build.os, "getloadavg", lambda: (3.31, 2.0, 1.0))
    root = os.path.join(str(tmp_path), TOY_VERSION)

    def build(cache, rebuild=False, weights=b"other"):
        os.makedirs(os.path.join(root, "student"), exist_ok=True)
        with open(os.path.join(root, "student", "model.safetensors"), "wb") as f:
            f.write(weights)
        return root

    monkeypatch.setattr(toy_build, "build_toy", build)
    monkeypatch.setattr(
        toy_build,
        "time",
        SimpleNamespace(monotonic=iter([100.0, 321.5, 0, 0, 0, 0, 0, 0]).__next__),
    )
    assert toy_build.start_toy(str(tmp_path), rebuild=True) == root
    said = capsys.readouterr().out.splitlines()
    assert said[2:] == [
        f"toy world: built in 3 min 41 s here (load average 3.3), cached in {root}/; other bytes "
        "than the shipped toy/student/ (another CPU's float kernels, or other code: docs/toy.md)"
    ]
    shipped = open(os.path.join(toy_build.SHIPPED, "model.safetensors"), "rb").read()
    monkeypatch.setattr(toy_build, "build_toy", partial(build, weights=shipped))
    toy_build.start_toy(str(tmp_path), rebuild=True)
    assert (
        capsys.readouterr()
        .out.splitlines()[2]
        .endswith("; the same bytes as the shipped toy/student/")
    )
    toy_build.start_toy(str(tmp_path))  # cached
    assert capsys.readouterr().out.splitlines()[1:] == [build_line(str(tmp_path))]
    shutil.rmtree(root)
    toy_build.start_toy(str(tmp_path))  # copied from toy/student/
    said = capsys.readouterr().out.splitlines()
    assert (
        said[1].startswith("toy world: the toy student is the one shipped")
        and said[2:] == []
    )
    shutil.rmtree(root)
    monkeypatch.setattr(toy_build, "shipped_record", lambda *a: None)
    toy_build.start_toy(str(tmp_path))  # trained: the shipped one is for other data
    assert (
        capsys.readouterr().out.splitlines()[2]
        == f"toy world: built in 0 min 0 s here (load average 3.3), cached in {root}/"
    )


def test_rebuild_trains_and_replaces_a_cached_build(tmp_path):
    cache = str(tmp_path)
    root = build_toy(cache, student_steps=2, examples=16)
    before = open(os.path.join(root, "student", "model.safetensors"), "rb").read()
    with open(os.path.join(root, "student", "build.json")) as f:
        assert json.load(f)["sha256"] == hashlib.sha256(before).hexdigest()
    assert build_toy(cache, student_steps=3, examples=16, rebuild=True) == root
    assert (
        open(os.path.join(root, "student", "model.safetensors"), "rb").read() != before
    )
    assert os.listdir(cache) == [TOY_VERSION]


def test_build_only_builds_and_stops_and_rollout_names_that_build_where_it_lies(
    small_toy, tmp_path, capsys
):
    cache, _ = small_toy
    out = tmp_path / "run"
    toy_main(["--cache", cache, "--out", str(out), "--build-only"])
    assert (
        capsys.readouterr().out.splitlines()[-1] == build_line(cache)
        and not out.exists()
    )


# ---------------------------------------------------------------------------------- learning, in direction


@pytest.fixture(scope="module")
def taught(tmp_path_factory):
    """The toy world with the shipped student, which has learnt the formats and the role-blind habits, and the
    hand-written teacher over its tokenizer: (root, teacher)."""
    root = build_toy(str(tmp_path_factory.mktemp("taught")))
    return root, HandTeacher(load_model(os.path.join(root, "student"))[1])


def _tester_states(n=24, seed=0):
    """(problem, earlier turns) at second turns of role-blind code episodes of training problems where the Tester's
    test case was wrong and the program right: the verdict blames the test case."""
    rng, out = random.Random(seed), []
    problems = [p for p in toy_problems("train") if p["domain"] == "code"]
    while len(out) < n:
        p = rng.choice(problems)
        turns = simulate(p, ROLE_BLIND, rng)
        if (
            len(turns) > 1
            and turns[0].checks["coder"]
            and not turns[0].checks["tester"]
        ):
            out.append((p, turns[:1]))
    return out


def _prob(model, tok, role, states, text):
    """Mean probability that `model` in `role`'s seat writes `text` first (teacher-forced)."""
    ids = tok(text, add_special_tokens=False)["input_ids"]
    ctxs = [
        [
            i
            for s in build_context(tok, p, role, [x.artefacts for x in earlier])
            for i in s.ids
        ]
        for p, earlier in states
    ]
    with torch.no_grad():
        return sum(
            lp.sum().exp().item()
            for lp in sequence_logprobs(model, ctxs, [ids] * len(ctxs))
        ) / len(ctxs)


def _train(root, teacher, out, flags):
    """A short MAS-OPD run on the toy's code problems through train.main (two turns: the first one decision each);
    -> its policies."""
    code = os.path.join(out + "-problems.jsonl")
    with open(code, "w") as f:
        f.writelines(
            json.dumps(p) + "\n" for p in toy_problems("train") if p["domain"] == "code"
        )
    args = (
        train_args(root, out)
        + [
            "--problems",
            code,
            "--steps",
            "8",
            "--batch",
            "8",
            "--mini-batch",
            "2",
            "--max-turns",
            "2",
            "--lr",
            "3e-4",
            "--max-new-tokens",
            "32",
            "--workers",
            "2",
        ]
        + flags
    )
    train.main(args, teacher=teacher)
    return {
        r: load_model(os.path.join(out, "checkpoint", r))[0]
        for r in ("coder", "tester")
    }


def test_pac_teaches_the_tester_to_revise_a_wrong_test_and_its_absence_does_not(
    taught, tmp_path
):
    """With the verdicts (PAC) the teacher revises a test case the verdict blames, so a few MAS-OPD steps raise
    the Tester's probability of opening with 'I revise' there; without them (w/o PAC) it is at chance and the
    probability does not rise as much."""
    root, teacher = taught
    base, tok = load_model(os.path.join(root, "student"))
    states, opening = _tester_states(), f"I revise my {NOUN['tester']}.\n"
    before = _prob(base, tok, "tester", states, opening)
    pac = _prob(
        _train(root, teacher, str(tmp_path / "pac"), [])["tester"],
        tok,
        "tester",
        states,
        opening,
    )
    blind = _prob(
        _train(root, teacher, str(tmp_path / "blind"), ["--no-pac"])["tester"],
        tok,
        "tester",
        states,
        opening,
    )
    assert pac > before + 0.15 and pac > blind + 0.1, (before, pac, blind)


def test_ras_makes_the_tester_leave_the_program_out_and_lambda_zero_does_not(
    taught, tmp_path
):
    """Under its own condition the teacher does the teammate's part as often as the students do (TEAMMATE_WORK), so
    plain OPD leaves the whole-job habit alone, while A^role rewards starting with one's own artefact. With a large
    lambda a few steps raise the Tester's probability of writing its test case first (rather than the Coder's
    kind of program), with lambda = 0 they do not."""
    root, teacher = taught
    base, tok = load_model(os.path.join(root, "student"))
    states, opening = _tester_states(), f"I revise my {NOUN['tester']}.\n"

    def own_first(model):
        own = _prob(model, tok, "tester", states, opening + "Test Input:\n```\n")
        return own / (
            own + _prob(model, tok, "tester", states, opening + "Code:\n```python\n")
        )

    before = own_first(base)
    ras = own_first(
        _train(root, teacher, str(tmp_path / "ras"), ["--lam", "1"])["tester"]
    )
    plain = own_first(
        _train(root, teacher, str(tmp_path / "plain"), ["--lam", "0"])["tester"]
    )
    assert ras > before + 0.15 and ras > plain + 0.15, (before, ras, plain)


def test_the_demo_refuses_a_taken_out_before_it_builds_and_the_learned_one_has_its_own(
    tmp_path, monkeypatch
):
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text("")
    monkeypatch.setattr(
        toy_demo, "start_toy", lambda *a, **k: pytest.fail("built before the refusal")
    )
    with pytest.raises(SystemExit) as e:
        toy_demo.main(["--out", str(out), "--cache", str(tmp_path / "cache")])
    assert str(e.value.code).startswith(f"error: --out {out} holds a train.py run")
    # the learned teacher's demo, typed after the demo as the README gives it, writes beside it
    learned, targv, _ = toy_demo.demo_args(["--learned-teacher"])
    assert learned.out == "runs/toy-learned" == targv[targv.index("--out") + 1]
    assert toy_demo.demo_args([])[0].out == "runs/toy"
