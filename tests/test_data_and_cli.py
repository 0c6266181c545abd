"""The problem schema's loader on malformed files, and the command line's behaviour on good and bad input."""
import json
import subprocess
import sys

import pytest

from data import ProblemError, load_problems
from rollout import main

MATH = {"id": "m", "domain": "math", "question": "1+1?", "answer": "2"}
STDIO = {"id": "c", "domain": "code", "format": "stdio", "question": "echo", "tests": [{"input": "a\n", "output": "a\n"}]}


def _write(path, lines):
    path.write_text("".join((l if isinstance(l, str) else json.dumps(l)) + "\n" for l in lines))
    return str(path)


def test_valid_file_with_blank_lines_loads(tmp_path):
    f = _write(tmp_path / "ok.jsonl", [MATH, "", STDIO, {**STDIO, "id": "f", "format": "function", "entry_point": "f",
                                                           "tests": [{"input": "[1, (2, 3)]", "output": "{'a': 1}"}]}])
    assert [p["id"] for p in load_problems(f)] == ["m", "c", "f"]


@pytest.mark.parametrize("bad, message", [
    ("{not json", "invalid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ({**MATH, "domain": "physics"}, "'domain'"),
    ({k: v for k, v in MATH.items() if k != "answer"}, "'answer'"),
    ({**MATH, "answer": 2}, "'answer' must be a str"),
    ({**STDIO, "format": "notebook"}, "'format'"),
    ({**STDIO, "format": "function"}, "entry_point"),
    ({**STDIO, "format": "function", "entry_point": "not an identifier"}, "entry_point"),
    ({**STDIO, "tests": []}, "at least one"),
    ({**STDIO, "tests": [{"input": 1, "output": "x"}]}, r"tests\[0\]"),
    ({**STDIO, "format": "function", "entry_point": "f", "tests": [{"input": "[os.system('x')]", "output": "1"}]},
     "Python literals"),
    ({**STDIO, "format": "function", "entry_point": "f", "tests": [{"input": "5", "output": "1"}]}, "argument list"),
    ({**STDIO, "solution": 5}, "'solution'"),
    (MATH, "duplicate id"),
])
def test_malformed_record_names_file_and_line(tmp_path, bad, message):
    f = _write(tmp_path / "bad.jsonl", [MATH, bad])
    with pytest.raises(ProblemError, match=message) as e:
        load_problems(f)
    assert str(e.value).startswith(f"{f}:2: ")


def test_empty_and_missing_files(tmp_path):
    with pytest.raises(ProblemError, match="no problems"):
        load_problems(_write(tmp_path / "empty.jsonl", ["", "  "]))
    with pytest.raises(ProblemError, match="cannot read"):
        load_problems(str(tmp_path / "absent.jsonl"))
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ProblemError, match="cannot read"):
        load_problems(str(tmp_path / "bin.jsonl"))


def test_cli_bad_input_one_line_exit_2_nothing_written(tmp_path):
    f, out = _write(tmp_path / "bad.jsonl", [MATH, {**MATH, "id": 7}]), tmp_path / "episodes.jsonl"
    r = subprocess.run([sys.executable, "rollout.py", "--problems", f, "--out", str(out)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"error: {f}:2: field 'id' must be a str, got 7"]
    assert not out.exists() and not (tmp_path / "episodes.jsonl.tmp").exists()


def test_cli_bad_model_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--model", "/no/such/dir"])
    assert e.value.code == 2 and "/no/such/dir" in capsys.readouterr().err


def test_cli_runs_episodes_and_writes_records(tmp_path, capsys):
    f, out = _write(tmp_path / "p.jsonl", [MATH, STDIO]), tmp_path / "episodes.jsonl"
    main(["--problems", f, "--max-new-tokens", "6", "--max-turns", "2", "--out", str(out)])
    printed = capsys.readouterr().out
    assert "=== m (math)" in printed and "Verification result for the previous turn:" in printed
    records = [json.loads(l) for l in out.read_text().splitlines()]
    assert [r["id"] for r in records] == ["m", "c"]
    resp = records[0]["turns"][0]["responses"]["reasoner"]
    assert len(resp["tokens"]) == len(resp["logprobs"]) == 6 and resp["context"][1][0] == "opening"


def test_unicode_line_separator_inside_a_string_is_not_a_line_break(tmp_path):
    f = tmp_path / "u.jsonl"
    f.write_text(json.dumps({**MATH, "question": "a\u2028b"}, ensure_ascii=False) + "\n", encoding="utf-8")
    assert load_problems(str(f))[0]["question"] == "a\u2028b"
