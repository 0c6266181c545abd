"""The problem schema's loader on malformed files, and the command line's behaviour on good and bad input."""

import json
import os
import signal
import struct
import subprocess
import sys
import types

import pytest
import torch

import train
from config import longest_response, response_limit
from infra.data import ProblemError, load_problems, write_atomic
from infra.models import make_tokenizer, tiny_model
from sandbox import jail
from tools.transcripts import TOY, main

MATH = {"id": "m", "domain": "math", "question": "1+1?", "answer": "2"}
STDIO = {
    "id": "c",
    "domain": "code",
    "format": "stdio",
    "question": "echo",
    "tests": [{"input": "a\n", "output": "a\n"}],
}
# with --model, so that no test depends on a toy build being in .cache
EXAMPLES = "examples/problems.jsonl"


def _write(path, lines):
    path.write_text(
        "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)
    )
    return str(path)


def test_valid_file_with_blank_lines_loads(tmp_path):
    f = _write(
        tmp_path / "ok.jsonl",
        [
            MATH,
            "",
            STDIO,
            {
                **STDIO,
                "id": "f",
                "format": "function",
                "entry_point": "f",
                "tests": [{"input": "[1, (2, 3)]", "output": "{'a': 1}"}],
            },
        ],
    )
    assert [p["id"] for p in load_problems(f)] == ["m", "c", "f"]


@pytest.mark.parametrize(
    "bad, message",
    [
        ("{not json", "invalid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ({**MATH, "domain": "physics"}, "'domain'"),
        ({k: v for k, v in MATH.items() if k != "answer"}, "'answer'"),
        ({**MATH, "answer": 2}, "'answer' must be a str"),
        ({**STDIO, "format": "notebook"}, "'format'"),
        ({**STDIO, "format": "function"}, "entry_point"),
        (
            {**STDIO, "format": "function", "entry_point": "not an identifier"},
            "entry_point",
        ),
        ({**STDIO, "tests": []}, "at least one"),
        ({**STDIO, "tests": [{"input": 1, "output": "x"}]}, r"tests\[0\]"),
        (
            {
                **STDIO,
                "format": "function",
                "entry_point": "f",
                "tests": [{"input": "[os.system('x')]", "output": "1"}],
            },
            "Python literals",
        ),
        (
            {
                **STDIO,
                "format": "function",
                "entry_point": "f",
                "tests": [{"input": "5", "output": "1"}],
            },
            "argument list",
        ),
        ({**STDIO, "solution": 5}, "'solution'"),
        (MATH, "duplicate id"),
    ],
)
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
    with pytest.raises(ProblemError, match=r"bin.jsonl:1: invalid UTF-8 at column 1"):
        load_problems(str(tmp_path / "bin.jsonl"))


def test_cli_bad_input_one_line_exit_2_nothing_written(tmp_path):
    f, out = (
        _write(tmp_path / "bad.jsonl", [MATH, {**MATH, "id": 7}]),
        tmp_path / "episodes.jsonl",
    )
    r = subprocess.run(
        [sys.executable, "-m", "tools.transcripts", "--problems", f, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"error: {f}:2: field 'id' must be a str, got 7"
    ]
    assert not out.exists() and not (tmp_path / "episodes.jsonl.tmp").exists()


# line 2 of a problem file (after a good one) in each hostile shape, and what train.py says of it after "error: "
# and the file's name; each once ended in a traceback (exit 1), a message without file, line or field, or a run
SHAPES = {
    "lone surrogate": (
        b'{"id": "s", "domain": "math", "question": "a\\ud800b", "answer": "2"}',
        ":2: field 'question': a lone surrogate ('\\ud800'), which is no character",
    ),
    "lone surrogate in a test": (
        b'{"id": "c", "domain": "code", "format": "stdio", "question": "echo", '
        b'"tests": [{"input": "\\udc00", "output": "a"}]}',
        ":2: field 'tests[0].input': a lone surrogate ('\\udc00'), which is no character",
    ),
    "lone surrogate in a key": (
        b'{"id": "s", "domain": "math", "question": "q", "answer": "2", "\\ud800": 1}',
        ":2: field '\\ud800': a lone surrogate ('\\ud800'), which is no character",
    ),
    "deep nesting": (
        b'{"id": "n", "domain": "math", "question": ' + b"[" * 100_000,
        ":2: field 'question': nested deeper than 32 levels",
    ),
    "5,000-digit number": (
        b'{"id": "b", "domain": "math", "question": "q", "answer": '
        + b"9" * 5000
        + b"}",
        ":2: field 'answer': not a finite number (NaN, Infinity, or an integer of more "
        "digits than Python converts)",
    ),
    "NaN": (
        b'{"id": "b", "domain": "math", "question": "q", "answer": "2", "x": NaN}',
        ":2: field 'x': not a finite number (NaN, Infinity, or an integer of more digits "
        "than Python converts)",
    ),
    "invalid UTF-8": (
        b'{"id": "u", "domain": "math", "question": "\xc3\xa9\xff", "answer": "2"}',
        ":2: field 'question': invalid UTF-8 at column 45 (byte 0xff)",
    ),
    "UTF-16": (
        '{"id": "u"}'.encode("utf-16"),
        ":2: invalid UTF-8 at column 1 (byte 0xff)",
    ),
    "byte order mark": (
        b"\xef\xbb\xbf" + json.dumps({**MATH, "id": "bom"}).encode(),
        ":2: invalid JSON at column 1 (Unexpected UTF-8 BOM (decode using utf-8-sig))",
    ),
    "NUL byte in a string": (
        b'{"id": "z", "domain": "math", "question": "a\x00b", "answer": "2"}',
        ":2: field 'question': invalid JSON at column 45 (Invalid control character at)",
    ),
    "NUL bytes for a line": (
        b"\x00\x00",
        ":2: invalid JSON at column 1 (Expecting value)",
    ),
    # the field found in linear time: a pattern with a nested quantifier took seconds per 25 characters
    "an unclosed string": (
        b'{"id": "u", "domain": "math", "question": "' + b"a" * 100_000,
        ":2: field 'question': invalid JSON at column 43 (Unterminated string starting at)",
    ),
    "no object": (b'"a string"', ":2: expected a JSON object, got str"),
    "a list for the domain": (
        b'{"id": "d", "domain": ["math"], "question": "q", "answer": "2"}',
        ":2: field 'domain' must be 'code' or 'math', got ['math']",
    ),
    "a list for the question": (
        b'{"id": "q", "domain": "math", "question": ["q"], "answer": "2"}',
        ":2: field 'question' must be a str, got ['q']",
    ),
}


@pytest.mark.parametrize("line, said", SHAPES.values(), ids=list(SHAPES))
def test_a_hostile_problem_line_is_refused_in_one_line_naming_file_line_and_field(
    tmp_path, error_line, line, said
):
    """train.py's own exit path (its main): exit 2, one line naming the file, the line and the field, before any
    model loads, and nothing written to --out."""
    f, out = tmp_path / "bad.jsonl", tmp_path / "run"
    f.write_bytes(json.dumps(MATH).encode() + b"\n" + line + b"\n")
    with pytest.raises(SystemExit) as e:
        train.main(["--problems", str(f), "--student", "tiny-qwen3", "--out", str(out)])
    assert e.value.code == 2
    error_line(f"{f}{said}")
    assert os.listdir(tmp_path) == ["bad.jsonl"]


def test_a_lone_surrogate_ends_train_py_in_one_line_and_exit_2(tmp_path):
    """The shape that reached the tokenizer (a TypeError, exit 1), through the real process."""
    f, out = tmp_path / "bad.jsonl", tmp_path / "run"
    line, said = SHAPES["lone surrogate"]
    f.write_bytes(json.dumps(MATH).encode() + b"\n" + line + b"\n")
    r = subprocess.run(
        [sys.executable, "train.py", "--problems", str(f), "--student", "tiny-qwen3"]
        + ["--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"error: {f}{said}"]
    assert os.listdir(tmp_path) == ["bad.jsonl"]


def test_cli_bad_model_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--model", "/no/such/dir", "--problems", EXAMPLES])
    assert e.value.code == 2 and "/no/such/dir" in capsys.readouterr().err


def test_cli_runs_episodes_and_writes_records(tmp_path, capsys):
    f, out = _write(tmp_path / "p.jsonl", [MATH, STDIO]), tmp_path / "episodes.jsonl"
    default = signal.getsignal(signal.SIGTERM)
    try:
        main(
            [
                "--problems",
                f,
                "--model",
                "tiny-qwen3",
                "--max-new-tokens",
                "6",
                "--max-turns",
                "2",
                "--out",
                str(out),
            ]
        )
        # a SIGTERM cleans up the sandboxed runs
        assert signal.getsignal(signal.SIGTERM) is jail._on_sigterm
    finally:
        signal.signal(signal.SIGTERM, default)
    printed = capsys.readouterr().out
    assert (
        "=== m (math)" in printed
        and "Verification result for the previous turn:" in printed
    )
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in records] == ["m", "c"]
    resp = records[0]["turns"][0]["responses"]["reasoner"]
    assert (
        len(resp["tokens"]) == len(resp["logprobs"]) == 6
        and resp["context"][1][0] == "opening"
    )
    # the artefacts under the field names episodes.jsonl has always had, so older files read the same, and
    # whether the Tool-User's program ran to its end (the sandbox's word, not its printed text)
    assert set(records[0]["turns"][0]["artefacts"]) == {
        "derivation",
        "derivation_answer",
        "program",
        "program_answer",
        "parsed_by",
        "program_ran",
    }
    assert set(records[1]["turns"][0]["artefacts"]) == {
        "program",
        "test_input",
        "test_output",
        "program_output",
        "parsed_by",
    }
    assert set(records[1]["turns"][0]["artefacts"]["parsed_by"]) == {"coder", "tester"}


def test_cli_without_the_toy_build_names_the_command_that_builds_it(
    tmp_path, monkeypatch, error_line
):
    monkeypatch.chdir(tmp_path)  # no .cache here
    monkeypatch.setattr(
        "tools.transcripts.load_model",
        lambda *a, **k: pytest.fail("a model loaded without the toy build"),
    )
    f = _write(tmp_path / "p.jsonl", [MATH])
    # the problems given, not the model
    for flags, missing in (([], "test.jsonl"), (["--problems", f], "student")):
        with pytest.raises(SystemExit) as e:
            main(flags)
        assert e.value.code == 2
        error_line(
            f"{os.path.join(TOY, missing)} is not built yet: build the toy student once with "
            f"`python -m toy --build-only`, or pass --model and --problems"
        )


def test_cli_runs_the_toy_build_by_default(tmp_path, monkeypatch, capsys):
    """A stand-in for the toy build where `python -m toy` caches it: a tiny model directory and a problem file."""
    monkeypatch.chdir(tmp_path)
    tiny_model("qwen3", layers=1, hidden=32).save_pretrained(
        os.path.join(TOY, "student")
    )
    make_tokenizer().save_pretrained(os.path.join(TOY, "student"))
    _write(
        tmp_path / TOY / "test.jsonl",
        [MATH, STDIO, {**MATH, "id": "m2"}, {**MATH, "id": "m3"}],
    )
    capsys.readouterr()
    main(["--max-new-tokens", "4", "--max-turns", "1"])
    printed = capsys.readouterr().out
    assert f"'model': '{os.path.join(TOY, 'student')}'" in printed
    assert (
        "=== m (math) -- 1 turn(s)" in printed
        and "=== c (code) -- 1 turn(s)" in printed
    )
    # a walk-through: the first two problems of each domain, not the whole file
    assert "=== m2 (math)" in printed and "=== m3 (math)" not in printed


def test_unicode_line_separator_inside_a_string_is_not_a_line_break(tmp_path):
    f = tmp_path / "u.jsonl"
    f.write_text(
        json.dumps({**MATH, "question": "a\u2028b"}, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    assert load_problems(str(f))[0]["question"] == "a\u2028b"


def test_cli_unusable_out_fails_before_the_run(tmp_path, error_line, monkeypatch):
    monkeypatch.setattr(
        "tools.transcripts.load_model",
        lambda *a, **k: pytest.fail("a model loaded before --out was checked"),
    )
    # a directory; a file in a directory that is not there
    for bad in (tmp_path, tmp_path / "missing" / "e.jsonl"):
        with pytest.raises(SystemExit) as e:
            main(["--out", str(bad)])
        assert e.value.code == 2
        error_line(f"--out {bad}: ")
    assert os.listdir(tmp_path) == []


def test_cli_damaged_model_files_exit_2(tmp_path, error_line, truncated_model):
    gguf = tmp_path / "m.gguf"
    # version 3, no tensors, one metadata entry: cut off
    gguf.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1))
    for model in (str(gguf), truncated_model(tmp_path / "dir")):
        with pytest.raises(SystemExit) as e:
            main(["--model", model, "--problems", EXAMPLES])
        assert e.value.code == 2
        error_line(f"model {model!r}: ")


def test_cli_writes_nan_logprobs_as_json_null(tmp_path):
    model = tiny_model("qwen3", layers=1, hidden=32)
    with torch.no_grad():
        model.lm_head.weight.fill_(float("nan"))
    model.save_pretrained(tmp_path / "nan")
    make_tokenizer().save_pretrained(tmp_path / "nan")
    f, out = _write(tmp_path / "p.jsonl", [MATH]), tmp_path / "episodes.jsonl"
    main(
        [
            "--problems",
            f,
            "--model",
            str(tmp_path / "nan"),
            "--temperature",
            "0",
            "--max-new-tokens",
            "3",
            "--max-turns",
            "1",
            "--out",
            str(out),
        ]
    )
    record = json.loads(
        out.read_text(), parse_constant=lambda word: pytest.fail(f"{word} is not JSON")
    )
    assert record["turns"][0]["responses"]["reasoner"]["logprobs"] == [None] * 3


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--max-turns", "0"),
        ("--max-new-tokens", "0"),
        ("--max-new-tokens", "-5"),
        ("--temperature", "nan"),
        ("--temperature", "-1"),
        ("--temperature", "inf"),
        ("--top-p", "0"),
        ("--top-p", "nan"),
        ("--top-p", "1.01"),
        ("--top-k", "-1"),
        ("--seed", str(2**64)),
    ],
)
def test_cli_bad_numbers_are_refused_at_parse_time(flag, value, capsys):
    with pytest.raises(SystemExit) as e:
        main([flag, value])
    assert e.value.code == 2 and f"error: argument {flag}: " in capsys.readouterr().err


def test_write_atomic_leaves_no_temp_file_when_it_fails(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(OSError):
        # the rename onto a directory fails after the temp file is written
        write_atomic(str(tmp_path / "d"), "text")
    assert os.listdir(tmp_path) == ["d"]


def test_the_math_limit_is_its_own_only_where_set_and_the_longest_covers_both_domains():
    limits = lambda code, math: types.SimpleNamespace(
        max_new_tokens=code, math_max_new_tokens=math
    )
    assert [response_limit(limits(512, 256), d) for d in ("code", "math")] == [512, 256]
    # 0: the same limit
    assert [response_limit(limits(512, 0), d) for d in ("code", "math")] == [512, 512]
    assert [
        longest_response(limits(c, m)) for c, m in ((512, 256), (512, 0), (256, 1024))
    ] == [512, 512, 1024]
