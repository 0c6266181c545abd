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
atomic writes, strict JSON, the episodes' JSONL records and the up-front check of output paths (the flags' types
and values are config.py's).
"""

import ast
import hashlib
import json
import math
import os
import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, fields, is_dataclass

from config import CODE_TIMEOUT
from infra.answers import LITERAL_CHARS, outputs_match
from sandbox.cases import run_case
from sandbox.outcomes import MAX_STDOUT, NOT_RUN, TIMED_OUT

REQUIRED = {
    "math": {"id": str, "domain": str, "question": str, "answer": str},
    "code": {"id": str, "domain": str, "question": str, "format": str, "tests": list},
}


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


def episode_record(e):
    """A JSON-ready record of one episode of Phase 1 (rollout.Episode): everything the teacher needs later,
    nothing recomputed. Each turn: its fields (rollout.Turn's t, artefacts, agree; a team's pairings,
    teams.workflow.TeamTurn, keyed "first seat|second seat") and every response. episodes.jsonl (train.py
    --save-episodes, eval.py --episodes) holds one per line."""
    response = lambda x: {
        "context": [[s.kind, s.turn, s.ids] for s in x.context],
        "tokens": x.tokens,
        "logprobs": x.logprobs,
        "text": x.text,
        "truncated": x.truncated,
    }
    turns = [
        {
            **{
                f.name: _plain(getattr(t, f.name))
                for f in fields(t)
                if f.name != "responses"
            },
            "responses": {seat: response(x) for seat, x in t.responses.items()},
        }
        for t in e.turns
    ]
    return {
        "id": e.problem["id"],
        "stopped": e.stopped,
        "final": e.final,
        "turns": turns,
    }


def _plain(value):
    """A turn's field as JSON: a record as its fields, a pairing's key as "first|second"."""
    if is_dataclass(value):
        return asdict(value)
    if isinstance(value, dict):
        return {
            "|".join(k) if isinstance(k, tuple) else k: _plain(v)
            for k, v in value.items()
        }
    return value


def append_episodes(path, episodes, **fields):
    """Append one JSONL line per episode of Phase 1 (App. C; episode_record plus `fields`, e.g. its step or seed)
    and close the file, so that a crash loses no episode already written."""
    with open(path, "a") as f:
        f.writelines(
            json_text({**fields, **episode_record(e)}) + "\n" for e in episodes
        )


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
        raise ValueError(
            f"{flag} {path}: {'not a directory' if directory else 'is a directory'}"
        )
    if not overwrite and os.path.exists(path):
        raise ValueError(
            f"{flag} {path} exists: give another path, or --overwrite to replace it"
        )
    parent = (
        nearest_folder(path)
        if directory
        else os.path.abspath(os.path.dirname(path) or ".")
    )
    if not os.path.isdir(parent):
        raise ValueError(f"{flag} {path}: {parent} is not an existing directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {path}: {parent} is not writable")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".probe-", dir=parent))
    except OSError as e:
        raise ValueError(
            f"{flag} {path}: nothing can be written in {parent} ({e.strerror})"
        ) from None


class ProblemError(ValueError):
    """A malformed problem file or record; the message names the file and line."""


def over_cap(fmt, output):
    """Why the verifier cannot judge a program on this expected output of a code problem of format `fmt`, or
    None. It compares (answers.outputs_match) a function result as a literal up to LITERAL_CHARS, beyond as text,
    where the reference's own result does not match; a printed output up to what a run returns (MAX_STDOUT
    bytes), beyond which no program's output matches, the reference's neither."""
    size, cap, unit = (
        (len(output.strip()), LITERAL_CHARS, "characters")
        if fmt == "function"
        else (len(output.encode("utf-8")), MAX_STDOUT, "bytes")
    )
    return (
        f"its expected output of {size:,} {unit} is over the verifier's cap of {cap:,}"
        if size > cap
        else None
    )


def check_problem(p, where="problem"):
    """Validate one problem dict in place of a schema library; raises ProblemError naming `where`."""
    if not isinstance(p, dict):
        raise ProblemError(f"{where}: expected a JSON object, got {type(p).__name__}")
    if not isinstance(p.get("domain"), str) or p["domain"] not in REQUIRED:
        raise ProblemError(
            f"{where}: field 'domain' must be 'code' or 'math', got {p.get('domain')!r}"
        )
    for field, typ in REQUIRED[p["domain"]].items():
        if not isinstance(p.get(field), typ):
            raise ProblemError(
                f"{where}: field {field!r} must be a {typ.__name__}, got {p.get(field)!r:.60}"
            )
    if p["domain"] == "math":
        return
    if p["format"] not in ("stdio", "function"):
        raise ProblemError(
            f"{where}: field 'format' must be 'stdio' or 'function', got {p['format']!r}"
        )
    if p["format"] == "function" and not (
        isinstance(p.get("entry_point"), str) and p["entry_point"].isidentifier()
    ):
        raise ProblemError(
            f"{where}: function problems need 'entry_point', a Python identifier"
        )
    if not p["tests"]:
        raise ProblemError(f"{where}: field 'tests' must hold at least one golden test")
    for i, t in enumerate(p["tests"]):
        if not (
            isinstance(t, dict)
            and isinstance(t.get("input"), str)
            and isinstance(t.get("output"), str)
        ):
            raise ProblemError(
                f"{where}: tests[{i}] must be an object with string 'input' and 'output'"
            )
        if p["format"] == "function":
            try:
                args = ast.literal_eval(t["input"])
                ast.literal_eval(t["output"])
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                raise ProblemError(
                    f"{where}: tests[{i}] of a function problem must hold Python literals"
                ) from None
            if not isinstance(args, (list, tuple)):
                raise ProblemError(
                    f"{where}: tests[{i}].input must be the literal of an argument list"
                )
        if why := over_cap(p["format"], t["output"]):
            raise ProblemError(
                f"{where}: problem {p['id']!r}, tests[{i}]: {why}, so no program could be judged "
                "right on it"
            )
    if p.get("solution") is not None and not isinstance(p["solution"], str):
        raise ProblemError(f"{where}: field 'solution' must be a string or null")


def load_problems(path, judge=True):
    """Read and validate a JSONL problem file; returns a list of dicts. Raises ProblemError('file:line: ...').
    judge: also run the references on the golden tests (judge_tests) unless this very file was judged whole
    before (JUDGED remembers it by its bytes); False where the file is read without any program being run (a
    memory plan)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ProblemError(f"{path}: cannot read problem file ({e})") from None
    # split as bytes, before decoding, so that a decoding error names its line; not splitlines(): U+2028 inside
    # a JSON string is no break
    located = [
        (f"{path}:{n}", parse_json(line, f"{path}:{n}"))
        for n, line in enumerate(data.split(b"\n"), 1)
        if line.strip()
    ]
    if not located:
        raise ProblemError(f"{path}: no problems in file")
    problems = check_all(located)
    marker = os.path.join(
        JUDGED, hashlib.sha256(f"{JUDGE_RULES}\n".encode() + data).hexdigest()
    )
    if judge and not os.path.exists(marker) and judge_tests(located):
        remember(marker)
    return problems


# How deep a line may nest: a problem needs three levels (the record, its tests, one test), and Python's JSON
# parser, which recurses once a level, ends a thousand levels down in a RecursionError that names no line.
MAX_DEPTH = 32
# a JSON string (a key with its colon) or a bracket: what _locate follows, valid JSON or not
# (the string unrolled, each character matched one way only: a nested quantifier took seconds per 25 characters
# of an unclosed string)
TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"(?:\s*:)?|[\[\]{}]')


def parse_json(data, where):
    """One line of a JSONL file (bytes) -> its value, read strictly: UTF-8, JSON, nested at most MAX_DEPTH deep,
    every string Unicode text (no lone surrogate such as "\\ud800", which no tokenizer and no UTF-8 file takes)
    and every number finite (no NaN or Infinity, which are no JSON, and no integer too long for Python to
    convert). Anything else raises ProblemError, one line naming `where` (file:line) and the field it is in, so
    that every command refuses it as it refuses a wrong field (exit 2), not with a traceback."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        good = data[: e.start].decode("utf-8")
        raise ProblemError(
            f"{where}: {_field(_locate(good)[0])}invalid UTF-8 at column {len(good) + 1} "
            f"(byte 0x{data[e.start]:02x})"
        ) from None
    # only a line with that many brackets can nest that deep: the others skip the scan
    if text.count("[") + text.count("{") > MAX_DEPTH:
        key, deep = _locate(text)
        if deep:
            raise ProblemError(
                f"{where}: {_field(key)}nested deeper than {MAX_DEPTH} levels"
            )
    try:
        value = json.loads(text, parse_int=_integer)
    except json.JSONDecodeError as e:
        raise ProblemError(
            f"{where}: {_field(_locate(text, e.pos)[0])}invalid JSON at column "
            f"{e.colno} ({e.msg})"
        ) from None
    # every string and number of the value, keys included, with its field: a list that grows as it is read
    queue = [("", value)]
    for field, v in queue:
        if isinstance(v, dict):
            for k, x in v.items():
                name = f"{field}.{k}" if field else k
                queue += [(name, k), (name, x)]
        elif isinstance(v, list):
            queue += [(f"{field}[{i}]", x) for i, x in enumerate(v)]
        elif isinstance(v, float) and not math.isfinite(v):
            raise ProblemError(
                f"{where}: {_field(field)}not a finite number (NaN, Infinity, or an "
                "integer of more digits than Python converts)"
            )
        elif isinstance(v, str) and not v.isascii():
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ProblemError(
                    f"{where}: {_field(field)}a lone surrogate ({v[e.start]!r}), which is "
                    "no character"
                ) from None
    return value


def _integer(digits):
    try:
        return int(digits)
    # over sys.get_int_max_str_digits(): its ValueError names neither line nor field, the refusal of an
    # infinity above does
    except ValueError:
        return math.inf


def _field(key):
    """How a refusal names the field `key` of a line ('' where none is known: the line is no object, or the
    fault lies before its first field)."""
    return f"field {key!r}: " if key else ""


def _locate(text, end=None):
    """(the top-level field of a JSON object line that position `end` lies in, or None before the first; whether
    the line nests deeper than MAX_DEPTH before `end`, the field then being the one where it does), found by
    following its strings and brackets only, so that a line that is no valid JSON has its fault located too."""
    depth, key = 0, None
    for m in TOKENS.finditer(text):
        if end is not None and m.start() >= end:
            break
        token = m.group()
        depth += (token in "[{") - (token in "]}")
        if depth > MAX_DEPTH:
            return key, True
        if depth == 1 and token.endswith(":"):
            key = token[1 : token.rindex('"')]
    return key, False


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


# A file whose every golden test its reference passed is remembered by its bytes (and the rules it was judged by:
# bump JUDGE_RULES when what judge_tests accepts changes), so that a run, a resume or a study's next run loads it
# without running its references again.
JUDGED = os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
    "mas-opd",
    "judged",
)
JUDGE_RULES = 1


def remember(marker):
    """Note a problem file judged whole; a cache that cannot be written costs the next load a judgment only."""
    try:
        os.makedirs(os.path.dirname(marker), exist_ok=True)
        open(marker, "w").close()
    except OSError:
        pass


def judge_tests(located):
    """Run each code problem's reference solution on its golden tests in the sandbox, all at once, and refuse
    (ProblemError naming the problem and the test) the first test it fails by its own outcome: a crash, an output
    over the cap or one that does not match. Such a test judges every program wrong, the reference included. A
    reference that times out or is not run (the trainer's reasons) leaves its test unjudged, not refused: under
    load it may finish next time. located: (where, problem) pairs, as check_all takes them. Returns whether
    every test was judged."""
    jobs = [
        (where, p, i)
        for where, p in located
        if p["domain"] == "code" and p.get("solution")
        for i in range(len(p["tests"]))
    ]
    # runs mostly wait on process start
    with ThreadPoolExecutor(max_workers=2 * (os.cpu_count() or 1)) as pool:
        results = list(
            pool.map(
                lambda job: run_case(
                    job[1],
                    job[1]["solution"],
                    job[1]["tests"][job[2]]["input"],
                    timeout=CODE_TIMEOUT,
                ),
                jobs,
            )
        )
    for (where, p, i), r in zip(jobs, results):
        if r.condition not in (TIMED_OUT, NOT_RUN) and not (
            r.ok and outputs_match(p["format"], r.stdout, p["tests"][i]["output"])
        ):
            raise ProblemError(
                f"{where}: problem {p['id']!r}, tests[{i}]: its reference solution fails it "
                f"({r.error or 'its output is not the expected one'})"
            )
    return all(r.condition not in (TIMED_OUT, NOT_RUN) for r in results)
