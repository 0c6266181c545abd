"""The architecture as the README states it: the method imports neither the toy world nor the tools, the supports
import no method file (metrics.py reads loss.py's advantages), train.py's command line and start-up live in files
of their own that only train.py (and what drives it) imports, imports run in one direction (no cycles), only at
the top of a file, no method file grows past its size, no support, toy or tool file outgrows one concept
(MAX_LINES), and the sampler can be copied without the rest; the decisions the paper leaves open are numbered in
DECISIONS.md and cited by those numbers; every relative link of the README and of docs/ resolves."""
import ast
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METHOD = ["rollout", "attribution", "teacher", "loss", "train", "eval"]
SUPPORTS = ["prompts", "metrics", "report", "checkpoint", "sampler", "models", "data", "sandbox", "cgroups",
            "cases", "distributed", "footprint", "memory"]
ALLOWED_METHOD_IMPORTS = {"metrics": {"loss"}}  # the step's A^OPD and A^role means, with loss.py's own functions
# train.py's plumbing, apart so that train.py reads as Algorithm 1: its command line (the rollout's defaults are
# RolloutConfig's) and what a run starts from (a resumed run's policies load as eval.py loads them)
TRAIN_PARTS = ["config", "launch"]
MOST_LINES = {"train": 300}  # Algorithm 1, its update and main; any other method file or part of train.py: 400
MAX_LINES = 420  # a support, toy or tool file: one concept, read top to bottom, ~400 lines at most


def project_modules():
    """module name -> path, for every Python file of the project outside tests/."""
    out = {}
    for folder in ("", "toy", "tools"):
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            if name.endswith(".py"):
                module = name[:-3] if not folder else f"{folder}.{name[:-3]}".replace(".__init__", "")
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


def test_method_and_supports_import_neither_toy_nor_tools_and_only_at_the_top():
    modules = project_modules()
    for name in METHOD + TRAIN_PARTS + SUPPORTS:
        top, nested = imports(modules[name], modules)
        assert not nested, f"{name}.py imports {nested} inside a function"
        assert not {m for m in top if m.split(".")[0] in ("toy", "tools")}, f"{name}.py imports {top}"
    assert all(not imports(modules[n], modules)[1] for n in modules), "a function-level import of a project module"


def test_supports_import_no_method_file():
    modules = project_modules()
    for name in SUPPORTS:
        method = {m for m in imports(modules[name], modules)[0] if m in METHOD}
        method -= ALLOWED_METHOD_IMPORTS.get(name, set())
        assert not method, f"{name}.py, a support, imports the method file(s) {sorted(method)}"


def test_only_train_py_imports_its_command_line_and_start_up():
    modules = project_modules()
    for name in METHOD + SUPPORTS:
        parts = {m for m in imports(modules[name], modules)[0] if m in TRAIN_PARTS}
        assert name == "train" or not parts, f"{name}.py imports train.py's part(s) {sorted(parts)}"


def most_lines(name):
    """The size limit of a module: MOST_LINES, else 400 for the method and train.py's parts, else MAX_LINES."""
    return MOST_LINES.get(name, 400 if name in METHOD + TRAIN_PARTS else MAX_LINES)


def test_no_file_outgrows_its_size():
    modules = project_modules()
    assert set(METHOD + TRAIN_PARTS) <= set(modules), "a method file or a part of train.py is missing"
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
