"""The learned toy teacher (toy/learned.py): a model that train.py loads and teacher.py scores like any other, a
cache keyed by what shapes it, and the check of what the method needs of a teacher."""

import hashlib
import json
import os
import re
import shutil

import pytest
import torch

import teacher as teacher_py
from infra.models import load_model
from sampler import sequence_logprobs
from toy import learned, learned_study
from toy.__main__ import main as toy_main
from toy.build import build_toy, sft_examples
from toy.expert import HandTeacher
from toy.world import toy_problems

TINY = dict(
    data=dict(learned.DATA, examples=32), train=dict(learned.TRAIN, steps=2, batch=8)
)
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A toy build of a few SFT steps and a learned teacher of two: (cache, toy root, teacher directory)."""
    cache = str(tmp_path_factory.mktemp("learned"))
    root = build_toy(cache, student_steps=3, examples=64)
    return cache, root, learned.build_learned(root, **TINY)


def test_the_method_has_no_branch_for_the_learned_teacher():
    """Nothing on the scoring path knows of the toy: the learned teacher is scored as any model is."""
    for name in ("teacher.py", "train.py", "sampler.py", "loss.py", "infra/launch.py"):
        with open(os.path.join(HERE, name)) as f:
            text = f.read()
        assert not re.search(r"learned|HandTeacher|\btoy\.", text), name


def test_the_demo_loads_it_and_scores_it_through_teacher_score(
    tiny, tmp_path, monkeypatch, capsys
):
    """`python -m toy --learned-teacher`: the model loaded from the teacher's directory goes to train.py, and
    teacher.score (both passes of Eq. 7) force-decodes with it, never with the hand-written teacher."""
    cache, root, path = tiny
    monkeypatch.setattr(learned, "DATA", TINY["data"])
    monkeypatch.setattr(learned, "TRAIN", TINY["train"])
    seen, real = [], teacher_py.score

    def tap(model, contexts, responses, **kw):
        seen.append(model)
        return real(model, contexts, responses, **kw)

    monkeypatch.setattr(teacher_py, "score", tap)
    out = str(tmp_path / "run")
    toy_main(
        [
            "--cache",
            cache,
            "--out",
            out,
            "--learned-teacher",
            "--steps",
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
            os.path.join(root, "valid.jsonl"),
        ]
    )
    printed = capsys.readouterr().out
    assert (
        f"teacher: the learned toy teacher, {path}" in printed
        and "teacher: Qwen3ForCausalLM" in printed
    )
    assert seen and {type(m).__name__ for m in seen} == {"Qwen3ForCausalLM"}
    # the grown teacher, not a student
    assert {m.config.num_hidden_layers for m in seen} == {2 + learned.GROW}
    assert os.path.exists(os.path.join(out, "results.json"))
    assert "The teacher's check on held-out base-student responses" in printed
    with open(os.path.join(out, "teacher_check.json")) as f:
        check = json.load(f)
    assert list(check["the right decision preferred (verdicts in context)"]) == [
        "learned",
        "hand-written",
    ]
    with open(os.path.join(out, "report.html")) as f:
        page = f.read()
    assert (
        "The teacher&#x27;s check on held-out responses" in page
        or "The teacher's check on held-out" in page
    )
    assert "PAC: a needed revision gains with the verdicts" in page


def test_its_cache_is_keyed_by_what_shapes_its_data_and_training(tiny, monkeypatch):
    cache, root, path = tiny
    assert learned.build_learned(root, **TINY) == path  # cached: not built again
    changes = [
        dict(data=dict(TINY["data"], STUDENT=0.3)),
        dict(data=dict(TINY["data"], VERDICT=0.5)),
        dict(data=dict(TINY["data"], seed=1)),
        dict(train=dict(TINY["train"], lr=1e-3)),
        dict(grow=1),
    ]
    dirs = {
        learned.teacher_dir(root, learned.cache_key(root, **{**TINY, **c}))
        for c in changes
    }
    assert len(dirs) == len(changes) and path not in dirs
    # the code that makes the data
    monkeypatch.setattr(learned, "LEARNED_VERSION", learned.LEARNED_VERSION + 1)
    assert learned.teacher_dir(root, learned.cache_key(root, **TINY)) != path
    monkeypatch.undo()
    other = learned.build_learned(
        root, data=dict(TINY["data"], STUDENT=0.0), train=TINY["train"]
    )  # rebuilt
    assert other != path and os.path.isdir(other) and os.path.isdir(path)
    assert sorted(d for d in os.listdir(root) if ".tmp" in d) == []
    weights = os.path.join(root, "student", "model.safetensors")
    data = bytearray(open(weights, "rb").read())
    data[-1] ^= 1  # another student: the teacher grows from it
    with open(weights, "wb") as f:
        f.write(bytes(data))
    try:
        assert learned.teacher_dir(root, learned.cache_key(root, **TINY)) != path
    finally:
        data[-1] ^= 1
        with open(weights, "wb") as f:
            f.write(bytes(data))


def test_the_grown_teacher_starts_as_the_student_and_is_larger(tiny):
    """Before its training the grown copy computes the student's log-probs (its new layers pass the residual
    stream on), and it has more parameters and layers than the student."""
    _, root, _ = tiny
    student, tok = load_model(os.path.join(root, "student"))
    model = learned.grown(student, 2, 7)
    assert model.config.num_hidden_layers == student.config.num_hidden_layers + 2
    assert sum(p.numel() for p in model.parameters()) > sum(
        p.numel() for p in student.parameters()
    )
    ex = sft_examples(tok, toy_problems("valid"), 8, 3, progress=False)
    with torch.no_grad():
        a = torch.cat(sequence_logprobs(student, *zip(*ex)))
        b = torch.cat(sequence_logprobs(model, *zip(*ex)))
    assert torch.equal(a, b)
    assert all(
        p.abs().sum() > 0
        for n, p in model.named_parameters()
        if "layers.3.self_attn.q_proj" in n
    )


def test_the_shipped_teacher_is_what_this_code_would_build_and_is_copied_not_trained(
    tmp_path, monkeypatch
):
    """toy/teacher/ is used only while its build.json records this code's cache key (the settings, the shipped
    student's weights, the first training examples): a change of any must come with a new shipped teacher."""
    root = build_toy(str(tmp_path / "cache"))  # the shipped student
    key = learned.cache_key(root)
    assert learned.shipped(learned.SHIPPED, key, learned.TEACHER_FILES) is not None, (
        "toy/teacher/ is not what build_learned would train from this code: run python -m toy.learned --rebuild "
        "and copy the teacher-* directory it names over toy/teacher/"
    )
    monkeypatch.setattr(
        learned,
        "sft",
        lambda *a, **k: pytest.fail("trained although a teacher is shipped"),
    )
    out = learned.build_learned(root)
    for name in os.listdir(learned.SHIPPED):
        assert (
            open(os.path.join(out, name), "rb").read()
            == open(os.path.join(learned.SHIPPED, name), "rb").read()
        )
    copy = tmp_path / "teacher"
    shutil.copytree(learned.SHIPPED, copy)
    assert learned.shipped(str(copy), key, learned.TEACHER_FILES) is not None
    data = bytearray((copy / "model.safetensors").read_bytes())
    data[100] ^= 1
    (copy / "model.safetensors").write_bytes(bytes(data))
    assert learned.shipped(str(copy), key, learned.TEACHER_FILES) is None


@pytest.mark.parametrize(
    "name, named",
    [
        # build.json rewritten too: its sha256 names the new weights
        ("model.safetensors", "build.json, model.safetensors"),
        ("chat_template.jinja", "chat_template.jinja"),
    ],
)
def test_a_changed_shipped_teacher_file_is_not_used_though_its_build_json_matches_it(
    name, named, tmp_path, monkeypatch, capsys
):
    """One byte of the teacher's weights or chat template, with build.json rewritten to name the weights' hash:
    the build says which files are not the pinned ones and trains the teacher rather than copy it."""
    root = build_toy(str(tmp_path / "cache"))  # the shipped student
    shipped = tmp_path / "teacher"
    shutil.copytree(learned.SHIPPED, shipped)
    monkeypatch.setattr(learned, "SHIPPED", str(shipped))
    data = bytearray((shipped / name).read_bytes())
    data[-2] ^= 1
    (shipped / name).write_bytes(bytes(data))
    record = json.loads((shipped / "build.json").read_text())
    weights = (shipped / "model.safetensors").read_bytes()
    record["sha256"] = hashlib.sha256(weights).hexdigest()
    (shipped / "build.json").write_text(json.dumps(record, indent=1) + "\n")
    key = learned.cache_key(root)
    assert learned.shipped(str(shipped), key, learned.TEACHER_FILES) is None

    def trained(*a, **k):
        raise RuntimeError("trained")

    monkeypatch.setattr(learned, "grown", trained)
    with pytest.raises(RuntimeError, match="trained"):
        learned.build_learned(root)
    assert capsys.readouterr().out.startswith(
        "toy world: building the learned teacher (the shipped toy/teacher/ holds other bytes than this code "
        f"pins ({named}), so it is not used) (the student grown by"
    )


def test_the_check_runs_on_a_small_build_and_the_hand_teacher_passes_it(tiny):
    """check_table on a few held-out episodes: every row for both teachers, and the hand-written teacher, which
    reads verdicts by rule, prefers the right decision and gains on it with the verdicts."""
    _, root, path = tiny
    model, tok = load_model(path)
    student = load_model(os.path.join(root, "student"))[0]
    cases = learned.check_cases(tok, toy_problems("valid"), 6, 901)
    hand = learned.check(HandTeacher(tok), tok, cases, student)
    mine = learned.check(model, tok, cases, student)
    assert set(hand) == set(mine) and len(hand) == 8
    assert all(0 <= v <= 100 for v in list(hand.values())[:5] + list(mine.values())[:5])
    assert hand["the right decision preferred (verdicts in context)"] >= 90
    assert hand["PAC: a needed revision gains with the verdicts"] >= 90
    assert hand["A^role < 0 on the teammate's part"] >= 80
    table = learned.check_table(
        learned.check_rows({"learned": model}, tok, toy_problems("valid"), 2, 901)
    )
    assert table.startswith("| % of held-out cases | learned |") and "PAC" in table
    json.dumps(mine)  # plain numbers and text, for the study's record


def test_the_study_trains_its_rows_per_teacher_and_tables_them(
    tiny, tmp_path, monkeypatch, capsys
):
    cache, root, path = tiny
    monkeypatch.setattr(learned, "DATA", TINY["data"])
    monkeypatch.setattr(learned, "TRAIN", TINY["train"])
    out = str(tmp_path / "study")
    learned_study.main(
        [
            "--cache",
            cache,
            "--out",
            out,
            "--split",
            "valid",
            "--teachers",
            "learned",
            "hand",
            "--rows",
            "opd",
            "--train-seeds",
            "0",
            "--steps",
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
            "--jobs",
            "1",
        ]
    )
    printed = capsys.readouterr().out
    assert "The teachers' check" in printed and "Table 2 analogue" in printed
    with open(os.path.join(out, "learned_study.json")) as f:
        results = json.load(f)
    assert list(results) == [
        "untrained",
        "learned: OPD (neither)",
        "hand: OPD (neither)",
    ]
    for t in ("learned", "hand"):
        assert os.path.isdir(os.path.join(out, t, "opd_seed0", "checkpoint", "coder"))


class Proc:
    def __init__(self, code):
        self.code = code

    def wait(self):
        return self.code


def test_the_study_deals_its_rows_to_processes_and_stops_with_one_that_fails(
    monkeypatch, capsys
):
    started = []
    monkeypatch.setattr(
        learned_study.subprocess, "Popen", lambda cmd: started.append(cmd) or Proc(0)
    )
    rows = list(learned_study.ROWS)
    learned_study.train_in_processes(["--out", "O"], rows, 2)
    assert [c[c.index("--rows") + 1 : c.index("--threads")] for c in started] == [
        ["mas-opd", "no-pac"],
        ["no-ras", "opd"],
    ]
    assert all(
        c[1:3] == ["-m", "toy.learned_study"]
        and c[3:5] == ["--out", "O"]
        and "--train-only" in c
        and c[-2:] == ["--threads", "1"]
        for c in started
    )
    codes = iter([0, 130])
    monkeypatch.setattr(
        learned_study.subprocess, "Popen", lambda cmd: Proc(next(codes))
    )
    with pytest.raises(SystemExit) as e:
        learned_study.train_in_processes(["--out", "O"], rows, 2)
    assert e.value.code == 130 and "with --reuse" in capsys.readouterr().err
