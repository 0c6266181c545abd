"""The architecture as the README states it. The paper's files alone at the top level (PAPER); the supports in
packages named for what they hold: sandbox/ (where untrusted programs run), scaling/ (past one laptop), infra/ (what
a run reads, writes and shows); the variants beside the paper's files, baselines/ and teams/; the toy world in toy/
and the commands in tools/. Imports run down the LAYERS only, never back up; each package says in its docstring what
it holds and what it may import; config.py, the one table of values, imports no other file of the project and no
model library; each paper file can be copied with few others (COPY), computed from its import statements; one step
of Algorithm 1 for the pair reaches the paper's files and few supports (tools/walk.py); the paper's files read line
by line (at most one line in ten over 90 characters); no file outgrows its size (MOST_CHARS, train.py in
TRAIN_LINES); the decisions the paper leaves open are numbered in DECISIONS.md and cited by those numbers; every
relative link of the README and of docs/ resolves."""

import ast
import os
import re
import subprocess
import sys

import train
from infra import seats
from tools.walk import walk

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The top level, in the README's reading order: the loss, Algorithm 1, each phase (the rollout and the prompts it
# shows the students, PAC's verifier, the teacher), the sampler every phase decodes with, the table of values, the
# evaluation.
PAPER = [
    "loss",
    "train",
    "rollout",
    "prompts",
    "attribution",
    "teacher",
    "sampler",
    "config",
    "eval",
]
FOLDERS = ["baselines", "infra", "sandbox", "scaling", "teams", "tests", "tools", "toy"]
# Lowest first: a module imports modules of its own layer or of the layers below it, never of one above. The jail
# knows nothing else; the paper's leaves need nothing but the record of a program's run (prompts.py reads its error
# prefix); scaling/ and infra/ support the method's files, which sit above them; teams/ builds on the pair's
# functions, train.py and eval.py dispatch to it; baselines/ runs train.py's loop and eval.py's evaluation; the toy
# world and the tools use everything.
LAYERS = [
    ["sandbox"],
    ["config", "sampler", "loss", "prompts"],
    ["scaling"],
    ["infra"],
    ["rollout", "attribution", "teacher"],
    ["teams"],
    ["eval", "train"],
    ["baselines"],
    ["toy", "tools"],
]
# The modules that run programs (the sandbox's jail and its parts): what prompts.py and teacher.py never bring, and
# what the answer checker runs without.
JAIL = {
    "sandbox.jail",
    "sandbox.cases",
    "sandbox.seccomp",
    "sandbox.cgroups",
    "sandbox.namespaces",
    "sandbox.uids",
}
# A file's size in the characters a reader reads (each line without its indentation), so that wrapping a line costs
# nothing and packing two ideas into one saves nothing: about 400 lines of 60 characters for one concept, train.py's
# Algorithm 1 in about 300; train.py in TRAIN_LINES as the formatter lays it out.
MOST_CHARS = {"train": 18_000}
MAX_CHARS = 24_500
TRAIN_LINES = 330
# What a paper file may bring when it is copied alone (its project imports followed transitively, package __init__
# files included): at most this many files; prompts.py and teacher.py nothing that runs programs (JAIL); rollout.py
# besides the program runner and the judges its environments need (Table 3), and neither attribution.py nor
# teacher.py; attribution.py the runner, but nothing of the teacher or the rollout.
COPY = {"loss": 0, "sampler": 0, "prompts": 2, "teacher": 4, "rollout": 5}
NOT_IN = {
    "prompts": JAIL,
    "teacher": JAIL,
    "rollout": {"attribution", "teacher"},
    "attribution": {"teacher", "rollout", "train", "eval"},
}
# The supports one step of Algorithm 1 for the pair reaches from the paper's files (tools/walk.py): the program
# runner and the two judges (Table 3, App. F.6), the step's log and the rollout's live line, and two scaling hooks
# that are the identity in one process (the ranks' sums) or a no-op without their flag (--teacher-offload).
WALK = {"sandbox.cases", "infra.answers", "infra.metrics", "infra.progress"}
WALK |= {"scaling.distributed", "scaling.offload"}
EXAMPLES = os.path.join(ROOT, "examples", "problems.jsonl")
WALK_FLAGS = f"--problems {EXAMPLES} --student tiny-qwen3 --teacher tiny-qwen3".split()
WALK_FLAGS += "--batch 4 --mini-batch 4 --max-turns 2 --max-new-tokens 48".split()


def project_modules():
    """module name -> path, for every Python file of the project outside tests/."""
    out = {}
    for folder in [""] + [f for f in FOLDERS if f != "tests"]:
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            if name.endswith(".py"):
                module = (
                    f"{folder}.{name[:-3]}".replace(".__init__", "")
                    if folder
                    else name[:-3]
                )
                out[module] = os.path.join(ROOT, folder, name)
    return out


def imports(path, modules):
    """(project modules imported at the top level of the file, project modules imported inside a function)."""
    tree = ast.parse(open(path).read())
    top, nested = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found = {n for n in names if n in modules}
        (top if node.col_offset == 0 else nested).update(found)
    return top, nested


def layer(module):
    """The index in LAYERS of a module's group: its package's, or its own name's at the top level."""
    return next(k for k, group in enumerate(LAYERS) if module.split(".")[0] in group)


def test_the_top_level_holds_the_papers_files_alone():
    top = sorted(n[:-3] for n in os.listdir(ROOT) if n.endswith(".py"))
    assert top == sorted(PAPER), (
        f"top level: {sorted(set(top) - set(PAPER))} are not the paper's files, "
        f"{sorted(set(PAPER) - set(top))} are missing"
    )
    folders = sorted(
        n
        for n in os.listdir(ROOT)
        if os.path.isdir(os.path.join(ROOT, n))
        and not n.startswith(".")
        and any(f.endswith(".py") for f in os.listdir(os.path.join(ROOT, n)))
    )
    assert folders == FOLDERS, f"folders of Python files: {folders}"
    assert sorted(g for group in LAYERS for g in group) == sorted(
        PAPER + [f for f in FOLDERS if f != "tests"]
    )


def test_imports_run_down_the_layers_and_only_at_the_top_of_a_file():
    modules = project_modules()
    upward = []
    for name, path in modules.items():
        top, nested = imports(path, modules)
        assert not nested, f"{name} imports {nested} inside a function"
        upward += [f"{name} -> {m}" for m in top if layer(m) > layer(name)]
    assert not upward, "imports from a lower layer up to a higher one: " + ", ".join(
        sorted(upward)
    )


def test_a_lower_layer_importing_a_higher_one_is_caught():
    assert (
        layer("sandbox.jail")
        < layer("prompts")
        < layer("infra.data")
        < layer("rollout")
        < layer("teams.workflow")
    )
    assert (
        layer("teams.workflow")
        < layer("train")
        < layer("baselines.grpo")
        < layer("toy.world")
    )
    assert layer("eval") == layer("train") and layer("scaling.memory") < layer(
        "infra.launch"
    )


def test_each_package_says_what_it_holds_and_what_it_may_import():
    for folder in [f for f in FOLDERS if f != "tests"]:
        path = os.path.join(ROOT, folder, "__init__.py")
        doc = (
            ast.get_docstring(ast.parse(open(path).read()))
            if os.path.exists(path)
            else None
        )
        assert doc and "import" in doc, (
            f"{folder}/__init__.py: a docstring that says what it holds and imports"
        )


def test_the_pair_knows_nothing_of_the_variants():
    """rollout.py, attribution.py, teacher.py, prompts.py and loss.py import neither teams/ nor baselines/, and
    train.py and eval.py no baseline (each baseline runs them): the pair never pays for a variant."""
    modules = project_modules()
    for name in [
        "rollout",
        "attribution",
        "teacher",
        "prompts",
        "loss",
        "sampler",
        "config",
    ]:
        found = {
            m
            for m in imports(modules[name], modules)[0]
            if m.split(".")[0] in ("teams", "baselines")
        }
        assert not found, f"{name}.py imports the variants {sorted(found)}"
    for name in ("train", "eval"):
        found = {
            m for m in imports(modules[name], modules)[0] if m.startswith("baselines")
        }
        assert not found, (
            f"{name}.py imports a baseline {sorted(found)}: its dispatch belongs there"
        )


def test_config_the_table_of_values_imports_nothing_of_the_project_nor_a_model_library():
    modules = project_modules()
    top = imports(modules["config"], modules)[0]
    assert not top, f"config.py imports {sorted(top)}: not a leaf"
    code = (
        "import sys, config; bad = sorted(m for m in sys.modules if m.split('.')[0] in ('transformers', "
        "'tokenizers', 'huggingface_hub', 'safetensors')); assert not bad, bad"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, "config.py brings a model library: " + r.stderr[-500:]


def closure(name, modules):
    """The project files `name` brings when copied alone: every project module its top-level imports name,
    followed transitively, with the package __init__ of each (Python runs it on the way), itself left out."""
    seen, todo = set(), [name]
    while todo:
        for m in imports(modules[todo.pop()], modules)[0]:
            for part in [
                ".".join(m.split(".")[:k]) for k in range(1, m.count(".") + 2)
            ]:
                if part in modules and part != name and part not in seen:
                    seen.add(part)
                    todo.append(part)
    return seen


def test_each_paper_file_can_be_copied_with_few_others():
    modules = project_modules()
    runner = closure("sandbox.cases", modules) | {
        "sandbox.cases"
    }  # the jail and its parts
    judges = closure("infra.answers", modules) | {"infra.answers"}
    for name in PAPER:
        brings = closure(name, modules)
        for banned in NOT_IN.get(name, ()):
            assert banned not in brings, (
                f"{name}.py brings {banned} when copied: not its concept"
            )
        if name in COPY:
            extra = (
                sorted(brings - runner - judges)
                if name == "rollout"
                else sorted(brings)
            )
            assert len(extra) <= COPY[name], (
                f"{name}.py brings {len(extra)} files when copied ({extra}), at most {COPY[name]}"
            )


def test_a_closure_follows_every_import_and_its_packages():
    modules = project_modules()
    assert closure("loss", modules) == set() and closure("sampler", modules) == set()
    assert closure("sandbox.cases", modules) >= {
        "sandbox",
        "sandbox.jail",
        "sandbox.outcomes",
    }


def test_the_answer_checker_runs_without_the_jail():
    modules = project_modules()
    assert not closure("infra.answers", modules) & JAIL, (
        "infra/answers.py brings the jail"
    )
    code = (
        "import sys, infra.answers; bad = sorted(m for m in sys.modules if m in %r); assert not bad, bad"
        % JAIL
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, "importing the judges loads the jail: " + r.stderr[-500:]


def test_one_step_of_the_pair_reaches_the_papers_files_and_few_supports():
    """tools/walk.py's measure of one train_step (scripted agents whose programs run, disagree and are attributed):
    the functions of the paper's files that run, and the supports they call. No variant is on the pair's path."""
    paper, support = walk(WALK_FLAGS)
    # every phase of Algorithm 1, and nothing of the evaluation
    assert set(paper) == set(PAPER) - {"eval"}
    assert set(support) <= WALK, (
        f"the pair's step reaches {sorted(set(support) - WALK)}"
    )
    # programs ran and answers were judged
    assert {"sandbox.cases", "infra.answers"} <= set(support)
    # both workflows' verdicts, the teacher's two passes, Eq. 13
    assert {"attribute_code", "attribute_math", "render"} <= paper["attribution"]
    assert {"teacher_inputs", "score_both_passes"} <= paper["teacher"]
    assert "sequence_logprobs" in paper["sampler"] and "mas_opd_loss" in paper["loss"]


def test_the_walk_sees_a_support_the_pairs_step_would_call(monkeypatch):
    """The measure can fail: a support called from a paper file shows in it."""
    real = train.batch_for_step
    calls_seats = lambda *a: (seats.team_seats([], 1), real(*a))[1]
    monkeypatch.setattr(train, "batch_for_step", calls_seats)
    assert "infra.seats" in walk(WALK_FLAGS)[1]


def reading_size(text):
    """The characters a reader reads: every line's, its indentation left out."""
    return sum(len(line.strip()) for line in text.splitlines())


def test_no_file_outgrows_its_size():
    modules = project_modules()
    sizes = {n: reading_size(open(p).read()) for n, p in modules.items()}
    over = {
        n: f"{k} characters, more than {MOST_CHARS.get(n, MAX_CHARS)}"
        for n, k in sizes.items()
        if k > MOST_CHARS.get(n, MAX_CHARS)
    }
    assert not over, f"split by concept: {over}"
    assert reading_size("    a = 1\n\n    b = (\n        2)\n") == len("a = 1b = (2)")
    lines = len(open(modules["train"]).read().splitlines())
    assert lines <= TRAIN_LINES, f"train.py: {lines} lines, more than {TRAIN_LINES}"


def test_the_papers_files_read_line_by_line():
    """At most one line in ten over 90 characters and none over 110 (a command in a docstring, one a line)."""
    modules = project_modules()
    for name in PAPER:
        lines = open(modules[name]).read().splitlines()
        long = [k for k, line in enumerate(lines, 1) if len(line) > 90]
        assert len(long) <= len(lines) / 10, (
            f"{name}.py: {len(long)} of {len(lines)} lines over 90 characters"
        )
        longest = max(range(len(lines)), key=lambda k: len(lines[k]))
        assert len(lines[longest]) <= 110, (
            f"{name}.py:{longest + 1} is {len(lines[longest])} characters long"
        )


def test_docstrings_hold_one_command_a_line():
    """A usage line of a module docstring starts with a command and holds one: text that a rewrap ran together
    (two commands on a line, or a command continued by prose) is caught."""
    commands = r"(python3?|torchrun|\.venv/bin/python) "
    for name, path in project_modules().items():
        doc = ast.get_docstring(ast.parse(open(path).read())) or ""
        for line in doc.splitlines():
            if re.match(r"\s+" + commands, line):
                assert len(re.findall(r"(?:^|\s)" + commands, line)) == 1, (
                    f"{name}: two commands on one line: {line}"
                )


def test_project_imports_form_no_cycle():
    modules = project_modules()
    graph = {
        n: {m for m in imports(p, modules)[0] if m != n} for n, p in modules.items()
    }
    state = {}

    def visit(n, path):
        assert state.get(n) != "open", f"import cycle: {' -> '.join(path + [n])}"
        if state.get(n) is None:
            state[n] = "open"
            for m in graph[n]:
                visit(m, path + [n])
            state[n] = "done"

    for n in graph:
        visit(n, [])


def test_sampler_needs_only_torch():
    code = (
        "import sys, sampler; bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('transformers', 'math_verify', 'attribution', 'rollout', 'teacher', 'infra', 'sandbox', 'scaling')); "
        "assert not bad, bad; assert callable(sampler.generate) and callable(sampler.sequence_logprobs)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]


def markdown_pages():
    """README.md and the pages under docs/ it links to."""
    docs = os.path.join(ROOT, "docs")
    return [os.path.join(ROOT, "README.md")] + sorted(
        os.path.join(docs, n) for n in os.listdir(docs) if n.endswith(".md")
    )


def heading_anchors(text):
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    return {
        re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.*)$", text, re.M)
    }


def test_every_relative_link_in_readme_and_docs_resolves():
    # docs/report.png included: the README opens with the demo's report, so the screenshot must be committed.
    broken = []
    for page in markdown_pages():
        # links inside code are not links
        text = re.sub(r"^```.*?^```", "", open(page).read(), flags=re.M | re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # a web address, not a file of the repository
            path, _, anchor = target.partition("#")
            path = (
                os.path.normpath(os.path.join(os.path.dirname(page), path))
                if path
                else page
            )
            if not os.path.isfile(path):
                broken.append(f"{os.path.relpath(page, ROOT)}: {target} (no such file)")
            elif (
                anchor
                and path.endswith(".md")
                and anchor not in heading_anchors(open(path).read())
            ):
                broken.append(
                    f"{os.path.relpath(page, ROOT)}: {target} (no such heading)"
                )
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_open_decision_is_cited_by_its_number_and_every_citation_exists():
    numbers = re.findall(
        r"^## D(\d+)\. ", open(os.path.join(ROOT, "DECISIONS.md")).read(), re.M
    )
    assert numbers == [str(i) for i in range(1, len(numbers) + 1)], (
        f"DECISIONS.md numbers {numbers}"
    )
    tests = [
        os.path.join(ROOT, "tests", n)
        for n in os.listdir(os.path.join(ROOT, "tests"))
        if n.endswith(".py")
    ]
    in_code, in_readme = set(), set()
    for path in list(project_modules().values()) + tests + markdown_pages():
        text = open(path).read()
        assert not re.search(r"§10\.\d", text), (
            f"{path} cites an outside numbering, not a DECISIONS.md number"
        )
        (in_readme if path.endswith(".md") else in_code).update(
            re.findall(r"DECISIONS\.md`? D(\d+)", text)
        )
    unknown = sorted((in_code | in_readme) - set(numbers))
    assert not unknown, f"cited but not in DECISIONS.md: {['D' + n for n in unknown]}"
    uncited = [n for n in numbers if n not in in_code]
    assert not uncited, (
        f"decisions cited nowhere in the code: {['D' + n for n in uncited]}"
    )
