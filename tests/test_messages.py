"""Every refusal is one line that names its cause, and every --help says where the flags a command passes on are
described: the lines a new user met that pointed elsewhere (a disk figure for an unwritable path, a missing value
for a negative number, the memory plan for a file that is no model)."""

import os

import pytest

import train
from infra import launch
from tests.test_train import FAST
from toy import ablation, baselines, scaling
from toy.__main__ import main as demo


@pytest.fixture
def no_model(monkeypatch):
    monkeypatch.setattr(
        launch,
        "load_model",
        lambda *a, **k: pytest.fail("a model loaded before the refusal"),
    )


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="no /proc here")
def test_an_out_where_nothing_can_be_made_is_named_as_such(
    problems, error_line, no_model
):
    with pytest.raises(SystemExit) as e:
        train.main(FAST + ["--problems", problems, "--out", "/proc/nope/run"])
    assert e.value.code == 2
    error_line("--out /proc/nope/run: nothing can be written in /proc (")


@pytest.mark.parametrize("value", ["-1e-3", "-1E+2", "-inf", "-.5"])
def test_a_negative_learning_rate_is_refused_as_a_number(value, problems, capsys):
    with pytest.raises(SystemExit) as e:
        train.main(FAST + ["--problems", problems, "--lr", value])
    assert e.value.code == 2
    assert (
        f"argument --lr: expected a finite number > 0, got '{value}'"
        in capsys.readouterr().err
    )


def test_a_student_that_is_no_model_is_refused_as_a_model_spec(
    tmp_path, problems, error_line, no_model
):
    (tmp_path / "notes.txt").write_text("not a model")
    (tmp_path / "empty").mkdir()
    for spec, line in (
        (
            tmp_path / "notes.txt",
            "unsupported file (expected a .gguf file or a transformers directory)",
        ),
        (
            tmp_path / "empty",
            "a directory without config.json is not a transformers model",
        ),
    ):
        with pytest.raises(SystemExit) as e:
            train.main(
                FAST
                + [
                    "--problems",
                    problems,
                    "--out",
                    str(tmp_path / "run"),
                    "--student",
                    str(spec),
                ]
            )
        assert e.value.code == 2
        error_line(f"model '{spec}': {line}")


@pytest.mark.parametrize(
    "command",
    [demo, ablation.main, scaling.main, baselines.main],
    ids=["toy", "toy.ablation", "toy.scaling", "toy.baselines"],
)
def test_each_toy_commands_help_says_where_the_flags_it_passes_on_are_described(
    command, capsys
):
    with pytest.raises(SystemExit) as e:
        command(["--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "passed on to train.py, and described by python train.py --help" in text
    assert all(
        flag in text for flag in ("--steps", "--eval-seeds", "--threads", "--overwrite")
    )
