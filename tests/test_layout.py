"""The architecture as the README states it: the paper's files alone at the top level (PAPER), every
support in the package infra/, the Table 1 baselines in baselines/ and the teams of 2n agents in teams/ (beside
the paper's files: only eval.py and train.py dispatch to them, DISPATCHERS), the toy world in toy/ and the commands
in tools/. Imports run one way: the paper's files, infra/, baselines/ and teams/ import neither the toy world nor
the tools; infra/ imports none of the paper's files but the few leaves INFRA_READS names; config.py, the one table
of values, imports no other file of the project and no model library; train.py's start-up is imported by train.py
alone; no cycles, and only at the top of a file. Each paper file can be copied with few others (COPY), computed
from its import statements; its lines are read as a reader reads them (at most one in twenty over 100 characters,
none over 120); no file outgrows its size, counted in the characters a reader reads (MOST_CHARS); the decisions the
paper leaves open are numbered in DECISIONS.md and cited by those numbers; every relative link of the README and of
docs/ resolves."""

import ast
import os
import re
import subprocess
import sys

import prompts
from sandbox import outcomes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The top level, in the README's reading order: Phase 1 (and the prompts it shows the students), PAC, RAS, the
# loss, Algorithm 1 with its table of values, the evaluation, and the sampler every phase decodes with.
PAPER = [
    "rollout",
    "prompts",
    "attribution",
    "teacher",
    "loss",
    "train",
    "config",
    "eval",
    "sampler",
]
# What infra/ may read of the paper's files, each a leaf of them: the step's A^OPD and A^role means and the roles of
# the seats (metrics, report), the sampler's cache bucket (footprint), the roles of a workflow and, for the plan's
# defaults, the paper preset's lengths and batches (memory and eval_memory), the prompt limit, the precisions and the
# attribution model's greedy decoding (launch), the roles a team's seats play (team), the response limits of a
# checkpoint's disk check (checkpoint), the verifier's timeout for judging golden tests at load (data) and the
# force-decoding the FSDP2 root runs (sharding).
INFRA_READS = {
    "infra.metrics": {"loss", "prompts"},
    "infra.report": {"prompts"},
    "scaling.footprint": {"sampler"},
    "scaling.memory": {"prompts", "config"},
    "scaling.eval_memory": {"config"},
    "infra.launch": {"prompts", "sampler", "config"},
    "infra.seats": {"prompts"},
    "infra.checkpoint": {"config"},
    "infra.data": {"config"},
    "scaling.sharding": {"sampler"},
}
# train.py's plumbing, apart so that train.py reads as Algorithm 1: what a run starts from. (config.py, the table of
# values, is read by every paper file; it imports none of them.)
TRAIN_PARTS = ["infra.launch"]
# The paper's files that may import the variants beside them (baselines/, teams/), to dispatch a flag to them:
# eval.py a single agent's evaluation (--single-agent) and a team's verdicts, train.py a team's Phase 2a.
DISPATCHERS = {"train", "eval"}
VARIANTS = ("baselines", "teams")
# A file's size in the characters a reader reads (each line without its indentation), so that wrapping a line costs
# nothing and packing two ideas into one saves nothing: about 400 lines of 60 characters for one concept, train.py's
# Algorithm 1 in about 300.
MOST_CHARS = {"train": 18_000}
MAX_CHARS = 24_500
# What a paper file may bring when it is copied alone (its project imports followed transitively, package __init__
# files included): at most this many files; prompts.py and teacher.py none that runs programs (RUNNER); rollout.py
# besides the program runner and the answer checker its environments need (Table 3), and neither attribution.py nor
# teacher.py; attribution.py the runner, but nothing of the teacher or the rollout.
COPY = {"loss": 0, "sampler": 0, "prompts": 3, "teacher": 3, "rollout": 5}
NOT_IN = {
    "prompts": {"RUNNER"},
    "teacher": {"RUNNER"},
    "rollout": {"attribution", "teacher"},
    "attribution": {"teacher", "rollout", "train", "eval"},
}


def project_modules():
    """module name -> path, for every Python file of the project outside tests/."""
    out = {}
    for folder in ("", "infra", "baselines", "teams", "toy", "tools"):
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            if name.endswith(".py"):
                module = (
                    name[:-3]
                    if not folder
                    else f"{folder}.{name[:-3]}".replace(".__init__", "")
                )
                out[module] = os.path.join(ROOT, folder, name)
    return out


def infra_modules():
    return sorted(m for m in project_modules() if m.startswith("infra."))


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
    assert folders == ["baselines", "infra", "teams", "tests", "tools", "toy"], (
        f"folders of Python files: {folders}"
    )


def test_papers_files_and_infra_import_neither_toy_nor_tools_and_only_at_the_top():
    modules = project_modules()
    for name in PAPER + infra_modules() + variant_modules():
        top, nested = imports(modules[name], modules)
        assert not nested, f"{name} imports {nested} inside a function"
        assert not {m for m in top if m.split(".")[0] in ("toy", "tools")}, (
            f"{name} imports {top}"
        )
    assert all(not imports(modules[n], modules)[1] for n in modules), (
        "a function-level import of a project module"
    )


def test_infra_imports_no_paper_file_but_the_leaves_it_reads():
    modules = project_modules()
    for name in infra_modules():
        paper = {
            m for m in imports(modules[name], modules)[0] if m in PAPER
        } - INFRA_READS.get(name, set())
        assert not paper, (
            f"{name}, a support, imports the paper's file(s) {sorted(paper)}"
        )
    for name, leaves in INFRA_READS.items():
        for leaf in leaves:
            inner = {m for m in imports(modules[leaf], modules)[0] if m in PAPER}
            assert not inner, (
                f"{leaf}.py, read by {name}, imports the paper's {sorted(inner)}: no longer a leaf"
            )


def variant_modules():
    return sorted(m for m in project_modules() if m.split(".")[0] in VARIANTS)


def test_only_the_dispatchers_import_the_variants():
    modules = project_modules()
    assert {m.split(".")[0] for m in variant_modules()} == set(VARIANTS), (
        "baselines/ or teams/ is missing"
    )
    for name in PAPER + infra_modules():
        found = {
            m for m in imports(modules[name], modules)[0] if m.split(".")[0] in VARIANTS
        }
        assert name in DISPATCHERS or not found, (
            f"{name} imports the variants {sorted(found)}"
        )
    train = imports(modules["train"], modules)[0]
    assert not {m for m in train if m.startswith("baselines")}, (
        "train.py knows a baseline: its step belongs there"
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
    # the sandbox and its parts
    runner = closure("sandbox.cases", modules) | {"sandbox.cases"}
    answers = closure("infra.answers", modules) | {"infra.answers"}
    for name in PAPER:
        brings = closure(name, modules)
        for banned in NOT_IN.get(name, ()):
            found = sorted(brings & (runner if banned == "RUNNER" else {banned}))
            assert not found, (
                f"{name}.py brings {found} when copied: {banned} is not its concept"
            )
        if name in COPY:
            extra = (
                sorted(brings - runner - answers)
                if name == "rollout"
                else sorted(brings)
            )
            assert len(extra) <= COPY[name], (
                f"{name}.py brings {len(extra)} files when copied ({extra}), "
                f"at most {COPY[name]}"
            )


def test_a_closure_follows_every_import_and_its_packages():
    modules = project_modules()
    assert closure("loss", modules) == set() and closure("sampler", modules) == set()
    assert {"infra", "sandbox.cases", "sandbox.jail"} <= closure(
        "infra.answers", modules
    )


def test_only_train_py_imports_its_start_up():
    modules = project_modules()
    for name in PAPER + infra_modules():
        parts = {m for m in imports(modules[name], modules)[0] if m in TRAIN_PARTS}
        assert name == "train" or not parts, (
            f"{name} imports train.py's part(s) {sorted(parts)}"
        )


def reading_size(text):
    """The characters a reader reads: every line's, its indentation left out."""
    return sum(len(line.strip()) for line in text.splitlines())


def test_no_file_outgrows_its_size():
    modules = project_modules()
    assert set(PAPER + TRAIN_PARTS) <= set(modules), (
        "a paper's file or a part of train.py is missing"
    )
    sizes = {n: reading_size(open(p).read()) for n, p in modules.items()}
    over = {
        n: f"{k} characters, more than {MOST_CHARS.get(n, MAX_CHARS)}"
        for n, k in sizes.items()
        if k > MOST_CHARS.get(n, MAX_CHARS)
    }
    assert not over, f"split by concept: {over}"
    assert reading_size("    a = 1\n\n    b = (\n        2)\n") == len("a = 1b = (2)")


def test_the_papers_files_read_line_by_line():
    """At most one line in twenty over 100 characters and none over 120: lines as a reader reads them."""
    modules = project_modules()
    for name in PAPER:
        lines = open(modules[name]).read().splitlines()
        long = [k for k, line in enumerate(lines, 1) if len(line) > 100]
        assert len(long) <= len(lines) / 20, (
            f"{name}.py: {len(long)} of {len(lines)} lines over 100 characters"
        )
        longest = max(range(len(lines)), key=lambda k: len(lines[k]))
        assert len(lines[longest]) <= 120, (
            f"{name}.py:{longest + 1} is {len(lines[longest])} characters long"
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
        "('transformers', 'math_verify', 'attribution', 'rollout', 'teacher', 'models', 'sandbox', 'cases')); "
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


def test_a_name_repeated_so_that_a_file_copies_alone_agrees_with_its_source():
    # prompts.py repeats the sandbox's prefix of a failed run rather than import the sandbox for one string
    assert prompts.ERROR == outcomes.ERROR
