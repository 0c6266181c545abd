"""The architecture as the README states it: the paper's files alone at the top level (PAPER), every support in
the package infra/, the Table 1 baselines that replace the teacher in baselines/ (train.py and eval.py dispatch to
them, DISPATCHERS; no other paper file nor infra/ imports them), the toy world in toy/ and the commands in tools/.
Imports run one way: the paper's files, infra/ and baselines/ import neither the toy world nor the tools; infra/
imports none of the paper's files but the few leaves INFRA_READS names; config.py, the one table of values, imports
none of the paper's files, so that every file may read it; train.py's start-up is imported by train.py alone; no
cycles, and only at the top of a file. No method file grows past its size, no support, toy or tool file outgrows
one concept (MAX_LINES), and the sampler can be copied without the rest; the decisions the paper leaves open are
numbered in DECISIONS.md and cited by those numbers; every relative link of the README and of docs/ resolves."""
import ast
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The top level, in the README's reading order: Phase 1 (and the prompts it shows the students), PAC, RAS, the
# loss, Algorithm 1 with its table of values, the evaluation, and the sampler every phase decodes with.
PAPER = ["rollout", "prompts", "attribution", "teacher", "loss", "train", "config", "eval", "sampler"]
# What infra/ may read of the paper's files, each a leaf of them: the step's A^OPD and A^role means (metrics), the
# sampler's cache bucket (footprint), the roles of a workflow and, for the plan's defaults, the paper preset's lengths
# and batches (memory and eval_memory), the prompt limit and the attribution model's greedy decoding (launch), and
# the roles a team's seats play (team).
INFRA_READS = {"infra.metrics": {"loss"}, "infra.footprint": {"sampler"}, "infra.memory": {"prompts", "config"},
               "infra.eval_memory": {"config"}, "infra.launch": {"prompts", "sampler"}, "infra.team": {"prompts"},
               "infra.sharding": {"sampler"}}
# train.py's plumbing, apart so that train.py reads as Algorithm 1: what a run starts from. (config.py, the table of
# values, is read by every paper file; it imports none of them.)
TRAIN_PARTS = ["infra.launch"]
# The paper's files that may import the baselines, to dispatch a flag to them (--objective grpo, --multi-turn).
DISPATCHERS = {"train", "eval"}
MOST_LINES = {"train": 300, "sampler": 420}  # any other method file or part of train.py: 400
MAX_LINES = 420  # a support, toy or tool file: one concept, read top to bottom, ~400 lines at most


def project_modules():
    """module name -> path, for every Python file of the project outside tests/."""
    out = {}
    for folder in ("", "infra", "baselines", "toy", "tools"):
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            if name.endswith(".py"):
                module = name[:-3] if not folder else f"{folder}.{name[:-3]}".replace(".__init__", "")
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
    assert top == sorted(PAPER), f"top level: {sorted(set(top) - set(PAPER))} are not the paper's files, " \
                                 f"{sorted(set(PAPER) - set(top))} are missing"
    folders = sorted(n for n in os.listdir(ROOT) if os.path.isdir(os.path.join(ROOT, n)) and not n.startswith(".")
                     and any(f.endswith(".py") for f in os.listdir(os.path.join(ROOT, n))))
    assert folders == ["baselines", "infra", "tests", "tools", "toy"], f"folders of Python files: {folders}"


def test_papers_files_and_infra_import_neither_toy_nor_tools_and_only_at_the_top():
    modules = project_modules()
    for name in PAPER + infra_modules() + baseline_modules():
        top, nested = imports(modules[name], modules)
        assert not nested, f"{name} imports {nested} inside a function"
        assert not {m for m in top if m.split(".")[0] in ("toy", "tools")}, f"{name} imports {top}"
    assert all(not imports(modules[n], modules)[1] for n in modules), "a function-level import of a project module"


def test_infra_imports_no_paper_file_but_the_leaves_it_reads():
    modules = project_modules()
    for name in infra_modules():
        paper = {m for m in imports(modules[name], modules)[0] if m in PAPER} - INFRA_READS.get(name, set())
        assert not paper, f"{name}, a support, imports the paper's file(s) {sorted(paper)}"
    for name, leaves in INFRA_READS.items():
        for leaf in leaves:
            inner = {m for m in imports(modules[leaf], modules)[0] if m in PAPER}
            assert not inner, f"{leaf}.py, read by {name}, imports the paper's {sorted(inner)}: no longer a leaf"


def baseline_modules():
    return sorted(m for m in project_modules() if m.startswith("baselines"))


def test_only_the_dispatchers_import_the_baselines():
    modules = project_modules()
    assert baseline_modules(), "baselines/ is missing"
    for name in PAPER + infra_modules():
        found = {m for m in imports(modules[name], modules)[0] if m.startswith("baselines")}
        assert name in DISPATCHERS or not found, f"{name} imports the baselines {sorted(found)}"


def test_config_the_table_of_values_imports_no_paper_file():
    modules = project_modules()
    top = imports(modules["config"], modules)[0]
    assert top and all(m.startswith("infra.") for m in top), f"config.py imports {sorted(top)}: not a leaf"


def test_only_train_py_imports_its_start_up():
    modules = project_modules()
    for name in PAPER + infra_modules():
        parts = {m for m in imports(modules[name], modules)[0] if m in TRAIN_PARTS}
        assert name == "train" or not parts, f"{name} imports train.py's part(s) {sorted(parts)}"


def most_lines(name):
    """The size limit of a module: MOST_LINES, else 400 for the paper's files, else MAX_LINES."""
    return MOST_LINES.get(name, 400 if name in PAPER else MAX_LINES)


def test_no_file_outgrows_its_size():
    modules = project_modules()
    assert set(PAPER + TRAIN_PARTS) <= set(modules), "a paper's file or a part of train.py is missing"
    lines = {n: len(open(p).read().splitlines()) for n, p in modules.items()}
    over = {n: f"{k} lines, more than {most_lines(n)}" for n, k in lines.items() if k > most_lines(n)}
    assert not over, f"split by concept: {over}"


def test_project_imports_form_no_cycle():
    modules = project_modules()
    graph = {n: {m for m in imports(p, modules)[0] if m != n} for n, p in modules.items()}
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
    code = ("import sys, sampler; bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('transformers', 'math_verify', 'attribution', 'rollout', 'teacher', 'models', 'sandbox', 'cases')); "
            "assert not bad, bad; assert callable(sampler.generate) and callable(sampler.sequence_logprobs)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def markdown_pages():
    """README.md and the pages under docs/ it links to."""
    docs = os.path.join(ROOT, "docs")
    return [os.path.join(ROOT, "README.md")] + sorted(
        os.path.join(docs, n) for n in os.listdir(docs) if n.endswith(".md"))


def heading_anchors(text):
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.*)$", text, re.M)}


def test_every_relative_link_in_readme_and_docs_resolves():
    # docs/report.png included: the README opens with the demo's report, so the screenshot must be committed.
    broken = []
    for page in markdown_pages():
        text = re.sub(r"^```.*?^```", "", open(page).read(), flags=re.M | re.S)  # links inside code are not links
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # a web address, not a file of the repository
            path, _, anchor = target.partition("#")
            path = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.isfile(path):
                broken.append(f"{os.path.relpath(page, ROOT)}: {target} (no such file)")
            elif anchor and path.endswith(".md") and anchor not in heading_anchors(open(path).read()):
                broken.append(f"{os.path.relpath(page, ROOT)}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_open_decision_is_cited_by_its_number_and_every_citation_exists():
    numbers = re.findall(r"^## D(\d+)\. ", open(os.path.join(ROOT, "DECISIONS.md")).read(), re.M)
    assert numbers == [str(i) for i in range(1, len(numbers) + 1)], f"DECISIONS.md numbers {numbers}"
    tests = [os.path.join(ROOT, "tests", n) for n in os.listdir(os.path.join(ROOT, "tests")) if n.endswith(".py")]
    in_code, in_readme = set(), set()
    for path in list(project_modules().values()) + tests + markdown_pages():
        text = open(path).read()
        assert not re.search(r"§10\.\d", text), f"{path} cites an outside numbering, not a DECISIONS.md number"
        (in_readme if path.endswith(".md") else in_code).update(re.findall(r"DECISIONS\.md`? D(\d+)", text))
    unknown = sorted((in_code | in_readme) - set(numbers))
    assert not unknown, f"cited but not in DECISIONS.md: {['D' + n for n in unknown]}"
    uncited = [n for n in numbers if n not in in_code]
    assert not uncited, f"decisions cited nowhere in the code: {['D' + n for n in uncited]}"
