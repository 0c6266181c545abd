"""tools/contexts.py on the toy world: the student's context and the teacher's two contexts are printed, the target
and the contrast differ only in the role condition, each verdict sits after the history entry of the turn it judges
and before the current turn, --no-pac prints none, and bad flags get one line and exit code 2."""

import contextlib
import io
import re

import pytest

from attribution import HEADER
from prompts import OPENING, REVISE
from teacher import ROLE_CONDITIONS
from tools.contexts import main
from toy.build import build_line, build_toy

FAST = ["--device", "cpu", "--max-new-tokens", "16", "--max-turns", "3"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A toy build of a few SFT steps: its student writes junk, so no episode ends before --max-turns."""
    path = str(tmp_path_factory.mktemp("toy") / "cache")
    build_toy(path, student_steps=3, examples=64)
    return path


def run(cache, *flags):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["--cache", cache, *FAST, *flags])
    return out.getvalue()


def sections(text):
    """The printed contexts: {'a': student, 'b': target, 'c': contrast}."""
    parts = re.split(r"^--- \((a|b|c)\) the .*\n", text, flags=re.M)
    found = dict(zip(parts[1::2], parts[2::2]))
    # up to the notes after it
    found["c"] = re.split(r"^--- ", found["c"], flags=re.M)[0]
    return found


def block(mark, text):
    return f"[{mark}]\n{text}\n[end]\n"


@pytest.fixture(scope="module")
def turn2(cache):
    return run(cache, "--turn", "2", "--role", "tester")


def test_prints_the_three_contexts_differing_as_eq_6_and_12_say(turn2):
    s = sections(turn2)
    opening = block("the student's generic opening line", OPENING["tester"][1])
    target = block("role condition r_i: tester", ROLE_CONDITIONS["tester"])
    contrast = block("role condition kappa(r_i): coder", ROLE_CONDITIONS["coder"])
    assert opening in s["a"] and target in s["b"] and contrast in s["c"]
    # only the condition passage differs
    assert s["b"].replace(target, "@") == s["c"].replace(contrast, "@")
    assert "only the role condition differs (tester:" in turn2
    assert "2 verdict(s) inserted" in turn2
    without_verdicts = re.sub(
        r"\[verdict on turn \d .*?\[end\]\n", "", s["b"], flags=re.S
    )
    # the student's tokens, all of them, in order
    assert without_verdicts.replace(target, opening) == s["a"]
    assert HEADER not in s["a"] and "[verdict" not in s["a"]
    assert "--- the response y_i^t" in turn2


def test_each_verdict_follows_the_turn_it_judges_and_precedes_the_current_turn(turn2):
    for text in (sections(turn2)["b"], sections(turn2)["c"]):
        # c^{<2}: turns 0 and 1
        assert text.count("[verdict on turn") == text.count(HEADER) == 2
        first, second = (
            text.index("[verdict on turn 0 (c^0)"),
            text.index("[verdict on turn 1 (c^1)"),
        )
        assert (
            text.index("Turn 1:")
            < first
            < text.index("Turn 2:")
            < second
            < text.index(REVISE["tester"][:40])
        )


def test_default_turn_is_the_first_with_a_verdict_and_no_pac_prints_none(cache):
    text = run(cache)
    assert "shown: t = 1, the Coder's response; PAC on: 1 verdict(s)" in text
    assert sections(text)["b"].count("[verdict on turn 0 (c^0)") == 1
    text = run(cache, "--no-pac")
    assert (
        "PAC off: no verdicts" in text and "[verdict" not in text and HEADER not in text
    )
    assert "--- (c) the teacher's contrast context" in text


@pytest.mark.parametrize(
    "flags, start",
    [
        (["--turn", "9"], "--turn 9: the episode has turns 0..2"),
        (["--role", "judge"], "--role 'judge': not a role"),
        (["--domain", "math", "--role", "coder"], "--role coder: not a role of"),
        (["--problem", "999"], "--problem 999:"),
    ],
)
def test_bad_flags_get_one_line_and_exit_code_2(cache, flags, start, error_line):
    out = io.StringIO()
    with pytest.raises(SystemExit) as e, contextlib.redirect_stdout(out):
        main(["--cache", cache, *FAST, *flags])
    # the threads and the toy build said, then nothing half-printed
    said = out.getvalue().splitlines()
    assert (
        e.value.code == 2
        and said[0].startswith("threads: ")
        and said[1:] == [build_line(cache)]
    )
    error_line(start)
