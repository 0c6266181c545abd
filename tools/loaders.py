"""Benchmark loaders: the paper's datasets and local benchmark files, converted into infra/data.py's problem schema.

One pure converter per source (tools/converters.py), record -> problem, so each is testable on a hand-written
record of that source. `load_dataset_as_problems` reads a local file (.jsonl, .jsonl.gz, .json) or a hub dataset
and dispatches; `python -m tools.loaders SOURCE --out FILE.jsonl` is its command line. Function-style golden
outputs are computed by running the reference solution in the sandbox.
"""

from config import CODE_TIMEOUT, COUNT, bounded, negative_values, parser
from infra.cli import flags_first

# Hub sources: short name -> (hub id, config, default split); each one's converter: CONVERTERS. Online only, with
# `datasets`.
HUB = {
    "code_contests": ("deepmind/code_contests", None, "test"),
    "apps": ("codeparrot/apps", None, "test"),
    "livecodebench": ("livecodebench/code_generation_lite", None, "release_v6"),
    "polaris": ("POLARIS-Project/Polaris-Dataset-53K", None, "train"),
    "aime24": ("HuggingFaceH4/aime_2024", None, "train"),
    "aime25": ("MathArena/aime_2025", None, "train"),
    "olympiadbench": ("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "train"),
}


def loaders_args(argv=None):
    """python -m tools.loaders' command line."""
    ap = parser(
        description="Convert a benchmark file (.jsonl, .jsonl.gz, .json) or a hub source "
        f"({', '.join(HUB)}) into a problem file."
    )
    # --timeout -1e-3 refused as a number, not as a flag without its value
    negative_values(ap)
    ap.add_argument("source")
    ap.add_argument("--out", required=True, help="problem file to write (JSONL)")
    ap.add_argument(
        "--split", help="hub split (default per source; LiveCodeBench: release_v6)"
    )
    ap.add_argument("--limit", type=COUNT, help="convert the first N records only")
    ap.add_argument(
        "--max-tests",
        type=COUNT,
        default=100,
        help="golden tests kept per code problem (default 100)",
    )
    ap.add_argument(
        "--workers",
        type=COUNT,
        help="parallel reference runs (default: twice the CPU count)",
    )
    ap.add_argument(
        "--timeout",
        type=bounded(float, 0, low_open=True),
        default=CODE_TIMEOUT,
        help="seconds per reference run (default %(default)s, the verifier's: a slower reference is no "
        "use)",
    )
    return ap.parse_args(argv)


if __name__ == "__main__":  # flags first: --help and a refused flag answer at once
    flags_first(loaders_args)

import ast
import gzip
import itertools
import json
import os
import re
import sys
import zlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from tqdm import tqdm

from infra.data import ProblemError, check_all, check_writable, over_cap, write_atomic
from sandbox.cases import run_case
from tools.converters import (
    Skip,
    from_apps,
    from_code_contests,
    from_evalplus,
    from_gsm8k,
    from_humaneval,
    from_leetcode,
    from_livecodebench,
    from_math,
    from_mbpp,
    from_olympiadbench,
    is_literal,
    record_id,
)

# ----------------------------------------------------------------------------- golden outputs of function problems


def _count(stats, reason, n=1):
    if n:
        stats[reason] += n


def reference_tests(
    pairs, stats, *, max_tests=None, workers=None, timeout=CODE_TIMEOUT
):
    """Fill in the golden tests of function problems: for each distinct argument list (the first `max_tests`),
    the repr of what the reference solution returns on it in the sandbox, as a set literal when the benchmark
    compares results as sets (so that outputs_match does too). pairs: [(problem, [args, ...], as_set)].
    Counted and left out: an input whose repr is no literal (inf, nan, objects), a run that fails or times out,
    a result whose repr is no literal (objects, Counter). Returns the problems left with at least one test."""
    jobs = []
    for k, (p, arg_lists, _) in enumerate(pairs):
        distinct = list(dict.fromkeys(repr(list(a)) for a in arg_lists))
        literals = [s for s in distinct if is_literal(s)]
        _count(stats, "inputs not a Python literal", len(distinct) - len(literals))
        if max_tests is not None:
            _count(stats, "inputs beyond max_tests", max(0, len(literals) - max_tests))
            literals = literals[:max_tests]
        jobs += [(k, s) for s in literals]

    def run(job):
        p = pairs[job[0]][0]
        return run_case(p, p["solution"], job[1], timeout=timeout)

    # one pool for all runs; they mostly wait on process start and clean-up, so twice the cores keeps CPUs busy
    with ThreadPoolExecutor(max_workers=workers or 2 * (os.cpu_count() or 1)) as pool:
        results = list(
            tqdm(
                pool.map(run, jobs),
                total=len(jobs),
                desc="reference outputs",
                unit="run",
                file=sys.stderr,
                disable=not jobs,
            )
        )
    for (k, s), r in zip(jobs, results):
        out = r.stdout.strip()
        if r.ok and pairs[k][2] and is_literal(out):
            out = _as_set_literal(out)
        if not r.ok:
            stats["inputs where the reference failed"] += 1
        elif not is_literal(out):
            stats["outputs not a Python literal"] += 1
        else:
            pairs[k][0]["tests"].append({"input": s, "output": out})
    return [p for p, _, _ in pairs if p["tests"]]


def _as_set_literal(text):
    """The literal of a collection as a set literal ('(4, 5)' -> '{4, 5}'); unchanged when it is no collection or
    its items are unhashable ('()' -> 'set()', which ast.literal_eval reads)."""
    value = ast.literal_eval(text)
    try:
        return repr(set(value)) if isinstance(value, (list, tuple, set)) else text
    except TypeError:
        return text


# ----------------------------------------------------------------------------- sources and dispatch

# each hub source's converter (HUB above)
CONVERTERS = {
    "code_contests": from_code_contests,
    "apps": from_apps,
    "livecodebench": from_livecodebench,
    "polaris": from_math,
    "aime24": from_math,
    "aime25": from_math,
    "olympiadbench": from_olympiadbench,
}
# a local file's converter, by the fields of its first record (checked in this order)
LAYOUTS = [
    ({"base_input"}, from_evalplus),
    ({"test_list"}, from_mbpp),
    ({"canonical_solution", "test"}, from_humaneval),
    ({"prompt", "test"}, from_leetcode),
    ({"public_tests"}, from_code_contests),
    ({"input_output"}, from_apps),
    ({"question_content"}, from_livecodebench),
    ({"final_answer"}, from_olympiadbench),
]


def detect_converter(rec, where):
    keys = set(rec) if isinstance(rec, dict) else set()
    conv = next((c for needed, c in LAYOUTS if needed <= keys), None)
    if (
        conv is None
        and keys & {"problem", "question", "Problem"}
        and keys & {"answer", "Answer"}
    ):
        conv = (
            from_gsm8k
            if "####" in str(rec.get("answer")) and "question" in keys
            else from_math
        )
    if conv is None:
        raise ProblemError(
            f"{where}: unknown record layout (fields {sorted(keys)[:8]}); see infra/data.py"
        )
    return conv


def read_records(path):
    """[(where, n, record)] of a .jsonl, .jsonl.gz or .json (one list) file; n is the line or list index."""
    try:
        with (gzip.open if path.endswith(".gz") else open)(
            path, "rt", encoding="utf-8"
        ) as f:
            text = f.read()
    # zlib.error: damaged .gz data
    except (OSError, UnicodeDecodeError, EOFError, zlib.error) as e:
        raise ProblemError(f"{path}: cannot read ({e})") from None
    if path.removesuffix(".gz").endswith(".json"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ProblemError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None
        if not isinstance(data, list):
            raise ProblemError(f"{path}: expected one JSON list of records")
        return [(f"{path}: record {i}", i, r) for i, r in enumerate(data, 1)]
    records = []
    for n, line in enumerate(text.splitlines(), 1):
        try:
            records += [(f"{path}:{n}", n, json.loads(line))] if line.strip() else []
        except json.JSONDecodeError as e:
            raise ProblemError(f"{path}:{n}: invalid JSON ({e.msg})") from None
    return records


def hub_records(name, split=None, limit=None):
    """[(where, n, record)] of a hub source, streamed. Needs `datasets` (imported here only) and network. APPS and
    LiveCodeBench ship loading scripts, which current `datasets` no longer runs: their JSONL files are read."""
    hub, config, default = HUB[name]
    split = split or default
    try:
        import datasets
    except ImportError:
        raise ProblemError(
            f"{name}: hub sources need the `datasets` package "
            "(pip install datasets; needs network)"
        ) from None
    args, kw = ((hub, config) if config else (hub,)), {"split": split}
    if name == "apps":
        args, kw = (
            ("json",),
            {"data_files": f"hf://datasets/{hub}/{split}.jsonl", "split": "train"},
        )
    if name == "livecodebench":
        if not re.fullmatch(r"release_v[1-6]", split):
            raise ProblemError(
                f"{name}: split must be release_v1 ... release_v6, got {split!r}"
            )
        files = ["test.jsonl"] + [
            f"test{i}.jsonl" for i in range(2, int(split[-1]) + 1)
        ]  # releases accumulate
        args, kw = (
            ("json",),
            {
                "data_files": [f"hf://datasets/{hub}/{f}" for f in files],
                "split": "train",
            },
        )
    try:
        rows = datasets.load_dataset(*args, streaming=True, **kw)
        return [
            (f"{hub}[{split}]: row {i}", i, r)
            for i, r in enumerate(itertools.islice(rows, limit), 1)
        ]
    # offline, unknown split, a changed hub layout: one line, no traceback
    except Exception as e:
        raise ProblemError(
            f"{name}: cannot load {hub} [{split}] from the hub (needs network): "
            f"{type(e).__name__}: {str(e)[:200]}"
        ) from None


def load_dataset_as_problems(
    source,
    split=None,
    limit=None,
    *,
    max_tests=100,
    workers=None,
    timeout=CODE_TIMEOUT,
    stats=None,
):
    """Problems, each passing check_problem, from a local benchmark file or a hub source (HUB name or hub id).
    split: hub only. limit: the first N records. max_tests: golden tests kept per code problem, in source order
    (public/base first). workers, timeout: the reference runs. stats: a Counter told what was skipped and why."""
    stats = Counter() if stats is None else stats
    name = {v[0]: k for k, v in HUB.items()}.get(source, source)
    if name in HUB and not os.path.exists(source):
        records, conv, stem = hub_records(name, split, limit), CONVERTERS[name], name
    else:
        if split is not None:
            raise ProblemError(
                f"{source}: split applies to hub sources only ({', '.join(HUB)})"
            )
        records = read_records(source)[:limit]
        if not records:
            raise ProblemError(f"{source}: no records in file")
        conv = detect_converter(records[0][2], records[0][0])
        stem = re.sub(r"\.jsonl?(\.gz)?$", "", os.path.basename(source))
    converted = []
    for where, n, rec in records:
        if not isinstance(rec, dict):
            raise ProblemError(
                f"{where}: expected a JSON object, got {type(rec).__name__}"
            )
        try:
            converted.append((where, conv(rec, where, record_id(rec, stem, n), stats)))
        except Skip as e:
            stats[f"records skipped: {e}"] += 1
    if any(isinstance(c, tuple) for _, c in converted):
        kept = {
            id(p)
            for p in reference_tests(
                [c for _, c in converted],
                stats,
                max_tests=max_tests,
                workers=workers,
                timeout=timeout,
            )
        }
        _count(stats, "problems without tests", len(converted) - len(kept))
        converted = [(w, c[0]) for w, c in converted if id(c[0]) in kept]
    for where, p in converted:
        # a test the verifier cannot judge is refused at load (data.over_cap): left out
        if p["domain"] == "code":
            judged = [t for t in p["tests"] if not over_cap(p["format"], t["output"])]
            _count(
                stats,
                "tests with an expected output over the verifier's caps",
                len(p["tests"]) - len(judged),
            )
            p["tests"] = judged
        if (
            p["domain"] == "code"
            and max_tests is not None
            and len(p["tests"]) > max_tests
        ):
            stats["tests beyond max_tests"] += len(p["tests"]) - max_tests
            p["tests"] = p["tests"][:max_tests]
    untested = [w for w, p in converted if p["domain"] == "code" and not p["tests"]]
    _count(stats, "problems without tests", len(untested))
    converted = [(w, p) for w, p in converted if w not in untested]
    if not converted:
        raise ProblemError(f"{source}: no record could be converted ({dict(stats)})")
    return check_all(converted)


def main(argv=None):
    """python -m tools.loaders SOURCE --out FILE.jsonl [--limit N]: convert and write a problem file atomically."""
    args = loaders_args(argv)
    stats = Counter()
    try:
        # before the conversion, which can take minutes
        check_writable(args.out, "--out")
        problems = load_dataset_as_problems(
            args.source,
            args.split,
            args.limit,
            max_tests=args.max_tests,
            workers=args.workers,
            timeout=args.timeout,
            stats=stats,
        )
        # ASCII JSON: a raw U+2028 in a question would split the line for load_problems' splitlines()
        write_atomic(args.out, "".join(json.dumps(p) + "\n" for p in problems))
    # ValueError: ProblemError or the --out check, both naming what is wrong
    except (ValueError, OSError) as e:
        print(
            f"error: {e}" if isinstance(e, ValueError) else f"error: {args.out}: {e}",
            file=sys.stderr,
        )
        sys.exit(2)
    print(f"wrote {len(problems)} problems to {args.out}", file=sys.stderr)
    for reason, count in sorted(stats.items()):
        print(f"  {reason}: {count}", file=sys.stderr)


if __name__ == "__main__":
    main()
