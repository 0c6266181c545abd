"""eval.py: accuracy, revise-iff-wrong and its failure modes, exchange penalty, heat map, CLI errors."""

import json
import os

import pytest
import torch

import eval as ev
import rollout
import sampler
from baselines import single
from infra.metrics import mean_std, revision_counts
from infra.models import config_of, make_tokenizer, tiny_model
from rollout import RolloutConfig, run_episodes
from scaling import eval_memory
from scaling.eval_memory import eval_plan
from scaling.memory import GiB, fits
from tests.test_workflows import APPLES, BAD, GOOD, SUM, TEST_OK, TEST_WRONG

CFG = RolloutConfig(code_timeout=5, math_timeout=5, max_turns=4)


def _team(tok, scripted, coder, tester, problems=(SUM,)):
    eps, atts = ev.play(
        list(problems),
        {"coder": scripted(coder), "tester": scripted(tester)},
        tok,
        0,
        CFG,
    )
    return eps, atts


def test_revise_iff_wrong_counts_success_and_both_failure_modes(tok, scripted):
    # turn 1: program wrong, test right -> the Coder revises (success) and the Tester keeps (success)
    eps, atts = _team(tok, scripted, [BAD, GOOD], [TEST_OK])
    s = revision_counts(ev.decisions(eps, atts))
    assert s["coder"] == {
        "n": 1,
        "success": 1,
        "revised_when_right": 0,
        "kept_when_wrong": 0,
    }
    assert s["tester"] == {
        "n": 1,
        "success": 1,
        "revised_when_right": 0,
        "kept_when_wrong": 0,
    }
    assert ev.solved(eps[0], atts[0])
    # program right, test wrong: the Coder defers (revises a right program), the Tester persists (keeps a wrong test)
    eps, atts = _team(tok, scripted, [GOOD, BAD], [TEST_WRONG])
    s = revision_counts(ev.decisions(eps, atts))
    assert s["coder"]["revised_when_right"] == 1 and s["tester"]["kept_when_wrong"] >= 1
    assert not ev.solved(eps[0], atts[0])
    m = ev.figures(eps, atts)
    assert m["acc_code"] == 0 and m["turns_code"] == 4


def test_math_accuracy_uses_the_reference(tok, scripted):
    seats = {
        "reasoner": scripted(["#### 29"]),
        "tool_user": scripted(["Code:\n```python\nprint(29)\n```"]),
    }
    eps, atts = ev.play([APPLES], seats, tok, 0, CFG)
    assert ev.figures(eps, atts) == {
        "acc_math": 100.0,
        "turns_math": 1.0,  # and how each artefact was read:
        "parse_hash_line_reasoner": 100.0,
        "parse_truncated_reasoner": 0.0,
        "parse_unparsed_reasoner": 0.0,
        "parse_python_block_tool_user": 100.0,
        "parse_truncated_tool_user": 0.0,
        "parse_unparsed_tool_user": 0.0,
    }
    # no "####" line: the last number, counted as such
    seats["reasoner"] = scripted(["so it is 30 - 1 = 29."])
    eps, atts = ev.play([APPLES], seats, tok, 0, CFG)
    m = ev.figures(eps, atts)
    assert m["acc_math"] == 100.0 and m["parse_last_number_reasoner"] == 100.0


def test_exchange_penalty_of_specialists(tok, scripted):
    # each scripted agent only knows its own job: in the partner's seat it answers with its own artefact
    coder, tester = scripted([GOOD]), scripted([TEST_OK])
    out = ev.evaluate([SUM], {"coder": coder, "tester": tester}, tok, [0, 1], CFG)
    assert out["acc_code"]["mean"] == 100 and out["exchange_penalty_code"] == {
        "mean": 100.0,
        "std": 0.0,
    }


def test_single_agent_judges_only_the_main_role(tok, scripted):
    m = single.single_agent_metrics(
        [SUM, APPLES], scripted([GOOD + "\n#### 29"]), tok, 0, CFG
    )
    assert m == {
        "acc_code": 100.0,
        "acc_math": 100.0,
        "parse_python_block_coder": 100.0,
        "parse_truncated_coder": 0.0,
        "parse_unparsed_coder": 0.0,
        "parse_hash_line_reasoner": 100.0,
        "parse_truncated_reasoner": 0.0,
        "parse_unparsed_reasoner": 0.0,
    }


def test_heatmap_is_self_contained_and_escaped(tok, qwen3):
    problem = {**SUM, "id": "<b>sum</b>"}
    eps = run_episodes(
        [problem],
        {"coder": qwen3, "tester": qwen3},
        tok,
        RolloutConfig(max_turns=1, max_new_tokens=9),
    )
    page = ev.heatmap_html(qwen3, tok, eps, [[]], 12288, block=3)
    assert (
        page.startswith("<!doctype html>")
        and "&lt;b&gt;sum&lt;/b&gt;" in page
        and "http" not in page
    )
    # two responses (Coder, Tester) of 9 tokens in blocks of 3
    assert page.count("title='") == 6
    # no context fits 20 tokens
    assert ev.heatmap_html(qwen3, tok, eps, [[]], 20, block=3).count("<span") == 0


def test_heatmap_scores_within_the_presets_teacher_limit(
    monkeypatch, tmp_path, problems
):
    """The heat map's teacher contexts are cut as training cuts them: at the preset's teacher prompt limit."""
    seen, real = [], ev.teacher_inputs
    monkeypatch.setattr(
        ev, "teacher_inputs", lambda *a, **k: seen.append(a[3]) or real(*a, **k)
    )
    ev.main(
        [
            "--student",
            "tiny-qwen3",
            "--problems",
            problems,
            "--seeds",
            "0",
            "--no-exchange",
            "--max-new-tokens",
            "2",
            "--preset",
            "gpu",
            "--heatmap",
            str(tmp_path / "h.html"),
            "--teacher",
            "tiny-qwen3",
        ]
    )
    assert seen == [3072]


def test_tables_and_cli_errors(tmp_path, capsys):
    table = ev.markdown({"a": mean_std([{"acc_code": 50.0}, {"acc_code": 70.0}])})
    assert "| acc_code | 60.0 ± 14.1 |" in table
    with pytest.raises(SystemExit) as e:
        ev.main(["--run", str(tmp_path), "--problems", "examples/problems.jsonl"])
    assert e.value.code == 2 and "no checkpoint" in capsys.readouterr().err


def test_cli_unusable_outputs_fail_before_the_run(tmp_path, error_line, monkeypatch):
    monkeypatch.setattr(
        ev,
        "load_model",
        lambda *a, **k: pytest.fail("a model loaded before the outputs were checked"),
    )
    for flag in ("--json", "--heatmap"):
        # a directory; a file in a directory that is not there
        for bad in (tmp_path, tmp_path / "missing" / "out"):
            with pytest.raises(SystemExit) as e:
                ev.main(
                    [
                        "--student",
                        "tiny-qwen3",
                        "--problems",
                        "examples/problems.jsonl",
                        "--teacher",
                        "tiny-qwen3",
                        flag,
                        str(bad),
                    ]
                )
            assert e.value.code == 2
            error_line(f"{flag} {bad}: ")
    assert os.listdir(tmp_path) == []


def test_cli_damaged_checkpoint_is_one_line(tmp_path, error_line, truncated_model):
    path = truncated_model(tmp_path / "checkpoint" / "shared")
    with pytest.raises(SystemExit) as e:
        ev.main(["--run", str(tmp_path), "--problems", "examples/problems.jsonl"])
    assert e.value.code == 2
    error_line(f"model {path!r}: cannot load")


def test_cli_reports_each_run_and_appends_its_episodes(tmp_path, problems, capsys):
    episodes = tmp_path / "episodes.jsonl"
    ev.main(
        [
            "--student",
            "tiny-qwen3",
            "--problems",
            problems,
            "--seeds",
            "0",
            "1",
            "--max-new-tokens",
            "4",
            "--episodes",
            str(episodes),
        ]
    )
    out, err = capsys.readouterr()
    assert out.startswith(
        "preset: paper (math_max_new_tokens=0, teacher_max_prompt_tokens=12288, "
        "unisolated_programs=False, threads=0 in effect;"
    )
    assert "threads: " in out
    # progress inside a run
    assert "turn 1/4: reading 4 prompts: 0/4 responses" in err and " tok/s [" in err
    assert "eval seed 1, exchanged seats: 2 episodes in" in out
    records = [json.loads(ln) for ln in episodes.read_text().splitlines()]
    assert [(r["seed"], r["seats"]) for r in records] == [(0, "own")] * 2 + [
        (0, "exchanged")
    ] * 2 + [(1, "own")] * 2 + [(1, "exchanged")] * 2
    assert all(r["turns"] and r["stopped"] for r in records)


def test_cli_heatmap_teacher_that_fails_to_load_keeps_the_json(
    tmp_path, error_line, problems, truncated_model
):
    # its tokenizer and config pass the checks at start
    teacher = truncated_model(tmp_path / "teacher")
    out = tmp_path / "r.json"
    with pytest.raises(SystemExit) as e:
        ev.main(
            [
                "--student",
                "tiny-qwen3",
                "--problems",
                problems,
                "--seeds",
                "0",
                "--no-exchange",
                "--max-new-tokens",
                "4",
                "--json",
                str(out),
                "--heatmap",
                str(tmp_path / "h.html"),
                "--teacher",
                teacher,
            ]
        )
    assert e.value.code == 2
    error_line(f"model {teacher!r}: cannot load")
    assert (
        "untrained tiny-qwen3" in json.loads(out.read_text())
        and not (tmp_path / "h.html").exists()
    )


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--max-new-tokens", "0"),
        ("--max-new-tokens", "-3"),
        ("--seeds", str(2**64)),
        ("--device", "cuda:99"),
        ("--device", "gpu"),
    ],
)
def test_cli_bad_numbers_are_refused_at_parse_time(flag, value, capsys):
    with pytest.raises(SystemExit) as e:
        ev.main(
            [
                "--student",
                "tiny-qwen3",
                "--problems",
                "examples/problems.jsonl",
                flag,
                value,
            ]
        )
    assert e.value.code == 2 and f"error: argument {flag}: " in capsys.readouterr().err


def test_cli_heatmap_of_a_single_agent_is_refused(capsys):
    # a single agent's command has no heat map: it plays no role condition
    with pytest.raises(SystemExit) as e:
        single.main(
            [
                "--model",
                "tiny-qwen3",
                "--problems",
                "examples/problems.jsonl",
                "--heatmap",
                "h.html",
            ]
        )
    assert (
        e.value.code == 2
        and "unrecognized arguments: --heatmap" in capsys.readouterr().err
    )
    with pytest.raises(SystemExit) as e:  # no teacher: none is made up
        ev.main(
            [
                "--student",
                "tiny-qwen3",
                "--problems",
                "examples/problems.jsonl",
                "--heatmap",
                "h.html",
            ]
        )
    assert e.value.code == 2 and "--heatmap needs --teacher" in capsys.readouterr().err


def test_cli_compile_reaches_every_generate_call(problems, monkeypatch, capsys):
    # recorded, then run uncompiled: compiling is the sampler tests' business
    seen, real = ([], rollout.generate)
    monkeypatch.setattr(
        rollout,
        "generate",
        lambda *a, **k: (
            seen.append(k["compiled"]) or real(*a, **{**k, "compiled": False})
        ),
    )
    ev.main(
        [
            "--student",
            "tiny-qwen3",
            "--problems",
            problems,
            "--seeds",
            "0",
            "--no-exchange",
            "--max-new-tokens",
            "4",
            "--compile",
        ]
    )
    assert seen and all(seen)


@pytest.mark.parametrize(
    "precision, dtype", [([], torch.float32), (["--precision", "bf16"], torch.bfloat16)]
)
@pytest.mark.parametrize("who", ["--student", "--single-agent", "--run"])
def test_cli_precision_is_the_dtype_of_every_decoding_model(
    who, precision, dtype, tmp_path, tok, problems, monkeypatch, capsys
):
    """bf16 on request (the default on a GPU), fp32 on the CPU by default: every model that decodes or scores, the
    heat map's teacher included, has its weights in that dtype."""
    spec = "tiny-qwen3"
    # a train.py output directory whose checkpoint has one shared fp32 policy
    if who == "--run":
        tiny_model("qwen3").save_pretrained(tmp_path / "checkpoint" / "shared")
        tok.save_pretrained(tmp_path / "checkpoint" / "shared")
        spec = str(tmp_path)
    seen, real = [], rollout.generate
    monkeypatch.setattr(
        rollout,
        "generate",
        lambda model, *a, **k: seen.append(model.dtype) or real(model, *a, **k),
    )
    monkeypatch.setattr(
        ev, "heatmap_html", lambda teacher, *a, **k: seen.append(teacher.dtype) or ""
    )
    heatmap = (
        []
        if who == "--single-agent"
        else ["--heatmap", str(tmp_path / "h.html"), "--teacher", "tiny-qwen3"]
    )
    if who == "--single-agent":
        single.main(
            [
                "--model",
                spec,
                "--problems",
                problems,
                "--seeds",
                "0",
                "--max-new-tokens",
                "2",
            ]
            + precision
        )
    else:
        ev.main(
            [
                who,
                spec,
                "--problems",
                problems,
                "--seeds",
                "0",
                "--no-exchange",
                "--max-new-tokens",
                "2",
            ]
            + heatmap
            + precision
        )
    assert (
        f'"precision": "{"bf16" if precision else "fp32"}"' in capsys.readouterr().out
    )
    assert len(seen) > len(heatmap) and set(seen) == {dtype}


def _calls(monkeypatch):
    """-> the number of prompts of every generate call eval.py makes from now on."""
    sizes, real = [], rollout.generate
    monkeypatch.setattr(
        rollout,
        "generate",
        lambda model, prompts, *a, **k: (
            sizes.append(len(prompts)) or real(model, prompts, *a, **k)
        ),
    )
    return sizes


def _free_for(chunk, precision="fp32"):
    """What a device must have free for eval.py on tiny-qwen3 (one model in every seat, the problems fixture's four
    prompts per turn, 4 new tokens) at `precision` to fit `chunk` prompts per generate call and no more."""
    at = lambda c: eval_plan(
        config_of("tiny-qwen3"),
        n_models=1,
        precision=precision,
        prompt_len=8192,
        response_len=4,
        prompts=4,
        rollout_chunk=c,
    )
    free = int(at(chunk)["total"] / 0.9) + 1
    assert not fits(at(chunk + 1), free / GiB)
    return free


def test_cli_default_chunk_is_the_most_prompts_the_memory_plan_fits(
    problems, monkeypatch, capsys
):
    monkeypatch.setattr(eval_memory, "available_bytes", lambda device: _free_for(2))
    sizes = _calls(monkeypatch)
    ev.main(
        [
            "--student",
            "tiny-qwen3",
            "--problems",
            problems,
            "--seeds",
            "0",
            "--no-exchange",
            "--max-new-tokens",
            "4",
        ]
    )
    assert (
        "rollout chunk: 2 of up to 4 prompts per generate call (the most that fit); memory: about"
        in capsys.readouterr().out
    )
    assert sizes and max(sizes) == 2  # the first turn's four prompts in two calls


def test_cli_rollout_chunk_flag_is_honoured(problems, monkeypatch, capsys):
    sizes = _calls(monkeypatch)
    ev.main(
        [
            "--student",
            "tiny-qwen3",
            "--problems",
            problems,
            "--seeds",
            "0",
            "--no-exchange",
            "--max-new-tokens",
            "4",
            "--rollout-chunk",
            "1",
        ]
    )
    assert (
        "rollout chunk: 1 of up to 4 prompts per generate call (--rollout-chunk)"
        in capsys.readouterr().out
    )
    assert sizes and set(sizes) == {1}


def test_cli_evaluation_that_cannot_fit_is_refused_before_any_weights_load_with_flags_that_fit(
    problems, monkeypatch, capsys
):
    free = _free_for(1, precision="bf16")  # one prompt fits in bf16, none in fp32
    monkeypatch.setattr(eval_memory, "available_bytes", lambda device: free)
    real = ev.load_model
    monkeypatch.setattr(
        ev, "load_model", lambda *a, **k: pytest.fail("weights were loaded")
    )
    args = [
        "--student",
        "tiny-qwen3",
        "--problems",
        problems,
        "--seeds",
        "0",
        "--no-exchange",
        "--max-new-tokens",
        "4",
    ]
    with pytest.raises(SystemExit) as e:
        ev.main(args)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1
    assert (
        err.startswith("error: memory: evaluation needs about")
        and "at 1 prompt per generate call" in err
    )
    flags = err.split("it would fit with ")[1].split()
    assert flags == ["--precision", "bf16", "--rollout-chunk", "1"]
    monkeypatch.setattr(ev, "load_model", real)
    ev.main(args + flags)  # and it does fit
    assert "rollout chunk: 1 of up to 4" in capsys.readouterr().out


def test_cli_heatmap_teacher_loads_after_the_team_decoder_is_released(
    tmp_path, problems, monkeypatch
):
    kept, real = [], ev.load_model
    monkeypatch.setattr(
        ev,
        "load_model",
        lambda spec, **k: kept.append((spec, bool(sampler._kept))) or real(spec, **k),
    )
    ev.main(
        [
            "--student",
            "tiny-qwen3",
            "--problems",
            problems,
            "--seeds",
            "0",
            "--no-exchange",
            "--max-new-tokens",
            "4",
            "--heatmap",
            str(tmp_path / "h.html"),
            "--teacher",
            "tiny-llama",
        ]
    )
    assert [spec for spec, _ in kept] == ["tiny-qwen3", "tiny-llama"] and (
        tmp_path / "h.html"
    ).exists()
    # the heat map's own episodes were just sampled: their cache is gone
    assert kept[-1] == ("tiny-llama", False)


def test_cli_heatmap_teacher_of_another_vocabulary_is_refused_before_any_weights_load(
    tmp_path, problems, capsys, monkeypatch, error_line
):
    other = make_tokenizer()
    other.add_tokens(["<extra>"])
    tiny_model("qwen3", vocab_size=len(other)).save_pretrained(tmp_path / "teacher")
    other.save_pretrained(tmp_path / "teacher")
    capsys.readouterr()  # the save's progress bar
    monkeypatch.setattr(
        ev, "load_model", lambda *a, **k: pytest.fail("weights were loaded")
    )
    with pytest.raises(SystemExit) as e:
        ev.main(
            [
                "--student",
                "tiny-qwen3",
                "--problems",
                problems,
                "--seeds",
                "0",
                "--max-new-tokens",
                "4",
                "--json",
                str(tmp_path / "r.json"),
                "--heatmap",
                str(tmp_path / "h.html"),
                "--teacher",
                str(tmp_path / "teacher"),
            ]
        )
    assert e.value.code == 2
    error_line(
        f"--teacher {tmp_path / 'teacher'} and --student tiny-qwen3 must share a tokenizer"
    )
    assert sorted(os.listdir(tmp_path)) == ["teacher"]
