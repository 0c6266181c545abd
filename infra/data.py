"""The one problem schema every workflow, verifier and loader shares, and its strict loader.

A problem file is JSON Lines, one problem per line:

    {"id": "add", "domain": "math", "question": "What is 2 + 3?", "answer": "5"}
    {"id": "sum", "domain": "code", "format": "stdio", "question": "Read two integers, print their sum.",
     "tests": [{"input": "1 2\\n", "output": "3\\n"}], "solution": "print(sum(map(int, input().split())))"}
    {"id": "rev", "domain": "code", "format": "function", "entry_point": "rev", "question": "def rev(s): ...",
     "tests": [{"input": "['ab']", "output": "'ba'"}], "solution": "def rev(s):\\n    return s[::-1]"}

math: `answer` is the reference answer. code: `format` is "stdio" (a program reads stdin, prints stdout: the
paper's CodeContests/APPS/LiveCodeBench) or "function" (the program defines `entry_point`: HumanEval/MBPP);
`tests` are the golden tests: for stdio the stdin text and expected stdout, for function the Python literal of
the argument list and of the expected return value; `solution` (optional, may be null) is a reference
program. Reference answers, golden tests and solutions are read by the verifier only (App. D.6.1, App. F.6):
no agent context is ever built from them.

Benchmark and hub datasets are converted into this schema by tools/loaders.py. Also here, for every command line:
atomic writes, strict JSON, the up-front check of output paths, the argparse type of numeric flags and the response
limit of a domain (the presets themselves are config.py's).
"""
import argparse
import ast
import json
import math
import os
import random
import re
import tempfile

REQUIRED = {"math": {"id": str, "domain": str, "question": str, "answer": str},
            "code": {"id": str, "domain": str, "question": str, "format": str, "tests": list}}


def write_atomic(path, text):
    """Write `text` to `path` via a temp file and a rename, so a crash never leaves a half-written file (and a
    failed write, e.g. a full disk, no temp file either)."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def json_text(value, **kwargs):
    """json.dumps with every NaN or infinity written as null: json.dumps writes them as the bare words NaN and
    Infinity, which are no JSON, so other readers reject the file (a diverged run's metrics, a broken model's
    log-probs)."""
    return json.dumps(_finite(value), allow_nan=False, **kwargs)


def _finite(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def nearest_folder(path):
    """The path itself or, where it does not exist yet, the nearest existing folder above it (absolute)."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def check_writable(path, flag, directory=False, overwrite=True):
    """Refuse an output path before any work is spent on what could not be saved: raises ValueError naming
    `flag`. A file (written by write_atomic) must sit in an existing, writable directory, and may exist only with
    `overwrite` (the user's --overwrite); a directory (made with its parents) must not be a file, and the nearest
    existing folder on its way must be writable: a folder made there and removed at once (/proc, a read-only or
    full mount refuse it; their permission bits may not). Leaves nothing behind."""
    if os.path.exists(path) and os.path.isdir(path) != directory:
        raise ValueError(f"{flag} {path}: {'not a directory' if directory else 'is a directory'}")
    if not overwrite and os.path.exists(path):
        raise ValueError(f"{flag} {path} exists: give another path, or --overwrite to replace it")
    parent = nearest_folder(path) if directory else os.path.abspath(os.path.dirname(path) or ".")
    if not os.path.isdir(parent):
        raise ValueError(f"{flag} {path}: {parent} is not an existing directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {path}: {parent} is not writable")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".probe-", dir=parent))
    except OSError as e:
        raise ValueError(f"{flag} {path}: nothing can be written in {parent} ({e.strerror})") from None


def bounded(kind, low, high=math.inf, low_open=False):
    """An argparse type: a finite `kind` (int or float) >= low (> low if low_open) and <= high. argparse then
    refuses, at parse time with its usage line, a nan, an inf, or a count that would silently do nothing or drop
    data (--limit -1, --max-new-tokens 0)."""
    what = ("an integer" if kind is int else "a finite number") + (f" > {low}" if low_open else f" >= {low}") + (
        f" and <= {high}" if high < math.inf else "")

    def parse(text):
        try:
            value = kind(text)
            ok = math.isfinite(value) and (value > low if low_open else value >= low) and value <= high
        except (ValueError, OverflowError):  # not a number of that kind; an integer too long for a float
            ok = False
        if not ok:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value
    return parse


def negative_values(ap):
    """Let the parser `ap` read a negative number in any notation as a flag's value ("--lr -1e-3", "--lam -inf"),
    as it reads "-1" and "-.5", so that the flag's type refuses it by name (bounded): by default argparse takes
    "-1e-3" for an unknown flag and answers that --lr expected one argument. -> ap"""
    ap._negative_number_matcher = re.compile(r"^-(\d|\.\d|inf$|nan$|infinity$)", re.IGNORECASE)
    return ap


def response_limit(cfg, domain):
    """The most tokens a student response of `domain` ("code" or "math") may have under `cfg` (a RolloutConfig or
    parsed args, App. D.6.3): math_max_new_tokens for the math roles where set (not 0), else max_new_tokens."""
    return cfg.math_max_new_tokens if domain == "math" and cfg.math_max_new_tokens else cfg.max_new_tokens


def longest_response(cfg):
    """The longest response any domain may have under `cfg` (response_limit): what a memory plan or a disk check
    budgets each response for."""
    return max(response_limit(cfg, domain) for domain in ("code", "math"))


COUNT = bounded(int, 1)  # steps, batch sizes, token and turn limits, workers: 0 would do nothing
SEED = bounded(int, 0, 2**32 - 1)  # a seed every RNG we seed takes (torch refuses 2**64), seed + 1 too


class ProblemError(ValueError):
    """A malformed problem file or record; the message names the file and line."""


def check_problem(p, where="problem"):
    """Validate one problem dict in place of a schema library; raises ProblemError naming `where`."""
    if not isinstance(p, dict):
        raise ProblemError(f"{where}: expected a JSON object, got {type(p).__name__}")
    if p.get("domain") not in REQUIRED:
        raise ProblemError(f"{where}: field 'domain' must be 'code' or 'math', got {p.get('domain')!r}")
    for field, typ in REQUIRED[p["domain"]].items():
        if not isinstance(p.get(field), typ):
            raise ProblemError(f"{where}: field {field!r} must be a {typ.__name__}, got {p.get(field)!r:.60}")
    if p["domain"] == "math":
        return
    if p["format"] not in ("stdio", "function"):
        raise ProblemError(f"{where}: field 'format' must be 'stdio' or 'function', got {p['format']!r}")
    if p["format"] == "function" and not (isinstance(p.get("entry_point"), str) and p["entry_point"].isidentifier()):
        raise ProblemError(f"{where}: function problems need 'entry_point', a Python identifier")
    if not p["tests"]:
        raise ProblemError(f"{where}: field 'tests' must hold at least one golden test")
    for i, t in enumerate(p["tests"]):
        if not (isinstance(t, dict) and isinstance(t.get("input"), str) and isinstance(t.get("output"), str)):
            raise ProblemError(f"{where}: tests[{i}] must be an object with string 'input' and 'output'")
        if p["format"] == "function":
            try:
                args = ast.literal_eval(t["input"])
                ast.literal_eval(t["output"])
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                raise ProblemError(f"{where}: tests[{i}] of a function problem must hold Python literals") from None
            if not isinstance(args, (list, tuple)):
                raise ProblemError(f"{where}: tests[{i}].input must be the literal of an argument list")
    if p.get("solution") is not None and not isinstance(p["solution"], str):
        raise ProblemError(f"{where}: field 'solution' must be a string or null")


def load_problems(path):
    """Read and validate a JSONL problem file; returns a list of dicts. Raises ProblemError('file:line: ...')."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")  # not splitlines(): U+2028 inside a JSON string is no line break
    except (OSError, UnicodeDecodeError) as e:
        raise ProblemError(f"{path}: cannot read problem file ({e})") from None
    located = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            located.append((f"{path}:{n}", json.loads(line)))
        except json.JSONDecodeError as e:
            raise ProblemError(f"{path}:{n}: invalid JSON ({e.msg})") from None
    if not located:
        raise ProblemError(f"{path}: no problems in file")
    return check_all(located)


def check_all(located):
    """Validate (where, problem) pairs in order, each against the schema and all ids unique -> the problems."""
    problems, seen = [], set()
    for where, p in located:
        check_problem(p, where)
        if p["id"] in seen:
            raise ProblemError(f"{where}: duplicate id {p['id']!r}")
        seen.add(p["id"])
        problems.append(p)
    return problems


def batch_for_step(problems, step, batch, seed):
    """The problems of one step: epoch-wise shuffles derived from the seed alone, so a resumed run draws the
    same problems as an uninterrupted one without storing a data-loader state."""
    out = []
    for k in range(step * batch, (step + 1) * batch):
        epoch, i = divmod(k, len(problems))
        out.append(problems[random.Random(f"{seed}-{epoch}").sample(range(len(problems)), len(problems))[i]])
    return out
