"""docs/equations.md is the one table of the paper's equations the code cites. Every `Eq. N` of the project's Python
files and of the README has a row there; every function a row names exists in the file it names; and a section
cited beside an equation ("App. E.1.2, Eq. 23") is that equation's section or one the row relates to it."""
import ast
import re
import string
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "docs" / "equations.md"
# what cites the paper: the project's Python files (the method at the top level, infra/, baselines/, toy/, tools/) and
# the README
SOURCES = [p for folder in ("", "infra", "baselines", "toy", "tools") for p in sorted((ROOT / folder).glob("*.py"))] + \
    [ROOT / "README.md"]

# "Eq. 8", "Eq. 8-10", "Eq. 5, 8, 9" (a number followed by ".d" is a section, not an equation)
EQ = r"Eq\. \d+(?:\s*[-–]\s*\d+|,\s*\d+\b(?!\.\d))*"
SEC = r"[A-G](?:\.\d+)*\b"
# "App. F.6", "App. F.4-F.5", "App. D.6.1, D.6.3"; "§3.3", "§4.3-4.4"
APP = rf"App\. {SEC}(?:\s*[-–]\s*{SEC})?(?:,\s*{SEC}(?:\s*[-–]\s*{SEC})?)*"
PARA = r"§\s?\d+(?:\.\d+)*(?:\s*[-–]\s*\d+(?:\.\d+)*)?"
CITATION = re.compile(rf"(?P<eq>{EQ})|(?P<app>{APP})|(?P<para>{PARA})")
# what may stand between two citations of one group: commas, a slash, spaces and the paper's other labels
SAME_GROUP = re.compile(r"\s*(?:[,/]\s*)?(?:(?:Table \d+|Alg\. \d+|Algorithm \d+|Figs?\. [\w-]+)\s*,?\s*)*")


def equation_numbers(text):
    """[8, 9, 10] of "Eq. 8-10", [5, 8, 9] of "Eq. 5, 8, 9"."""
    out = []
    for part in text[len("Eq. "):].split(","):
        lo, _, hi = re.sub(r"\s*[-–]\s*", "-", part.strip()).partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def expand(lo, hi):
    """The sections of a range, "F.1".."F.4" -> F.1, F.2, F.3, F.4; "C".."G" -> C, D, E, F, G; else its ends."""
    (p1, _, a), (p2, _, b) = lo.rpartition("."), hi.rpartition(".")
    if p1 == p2 and a.isdigit() and b.isdigit():
        return [f"{p1}.{n}" if p1 else str(n) for n in range(int(a), int(b) + 1)]
    if lo in string.ascii_uppercase and hi in string.ascii_uppercase:
        return list(string.ascii_uppercase[string.ascii_uppercase.index(lo):string.ascii_uppercase.index(hi) + 1])
    return [lo, hi]


def sections(text):
    """A cited section as a list of alternatives (a range: any of its members), each "App. F.6" or "§3.3"."""
    prefix = "App. " if text.startswith("App.") else "§"
    body = text[len("App. "):] if prefix == "App. " else text.lstrip("§ ")
    out = []
    for part in body.split(","):
        lo, _, hi = re.sub(r"\s*[-–]\s*", "-", part.strip()).partition("-")
        out.append([prefix + s for s in (expand(lo, hi) if hi else [lo])])
    return out


def groups(line):
    """The citation groups of one line: citations with nothing but separators between them, e.g. "(App. E.1.2,
    Eq. 23)" is one group and "[§3.3, Eq. 11; App. F.6]" two. Each group: (equation numbers, cited sections)."""
    out, last_end = [], None
    for m in CITATION.finditer(line):
        if last_end is None or not SAME_GROUP.fullmatch(line[last_end:m.start()]):
            out.append(([], []))
        eqs, secs = out[-1]
        if m["eq"]:
            eqs += equation_numbers(m["eq"])
        else:
            secs += sections(m[0])
        last_end = m.end()
    return out


def citations():
    """(file, line number, equation numbers, cited sections) of every citation group in SOURCES."""
    for path in SOURCES:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for eqs, secs in groups(line):
                yield path.relative_to(ROOT), n, eqs, secs


def table():
    """Eq. number -> (section, [related sections], [(file, name)]) from the rows of docs/equations.md."""
    rows = {}
    for line in TABLE.read_text().splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 5 and cells[0].isdigit():
            related = [s for c in filter(None, cells[2].split(", ")) for s in sections(c)[0]]
            code = [(f, name.strip()) for f, names in re.findall(r"`([\w/]+\.py): ([\w., ]+)`", cells[4])
                    for name in names.split(",")]
            rows[int(cells[0])] = (cells[1], related, code)
    return rows


def agrees(cited, listed):
    """A cited section agrees with a listed one when it is that section, inside it or around it (App. D.6 / D.6.1)."""
    return cited == listed or cited.startswith(listed + ".") or listed.startswith(cited + ".")


def test_the_table_reads_and_names_what_it_should():
    rows = table()
    assert len(rows) >= 15 and all(sec and code for sec, _, code in rows.values()), rows
    assert {8, 9, 10, 12, 13, 22, 23} <= set(rows)


def test_every_equation_the_code_or_the_readme_cites_has_a_row():
    rows = table()
    missing = sorted({(n, f"{f}:{line}") for f, line, eqs, _ in citations() for n in eqs if n not in rows})
    assert not missing, f"Eq. N cited but not a row of docs/equations.md: {missing}"
    assert any(eqs for *_, eqs, _ in citations()), "no citation found: the pattern is wrong"


def test_every_function_a_row_names_exists_in_its_file():
    for n, (_, _, code) in table().items():
        for file, name in code:
            tree = ast.parse((ROOT / file).read_text())
            scope, found = tree.body, None
            for part in name.split("."):  # "RolloutConfig.math_final" or a plain top-level name
                found = next((node for node in scope if part in defined(node)), None)
                scope = getattr(found, "body", [])
            assert found is not None, f"docs/equations.md, Eq. {n}: {file} has no {name}"


def defined(node):
    """The names a statement of a module or class body defines."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return {t.id for t in targets if isinstance(t, ast.Name)}


def test_a_section_cited_beside_an_equation_is_that_equations():
    """Each section of a citation group agrees with the section or a related section of one of the group's
    equations: "App. F.3, Eq. 23" is wrong, kappa being App. E.1.2 (F.3 holds the role conditions)."""
    rows, wrong = table(), []
    for f, line, eqs, secs in citations():
        listed = [s for n in eqs if n in rows for s in [rows[n][0], *rows[n][1]]]
        for alternatives in secs if eqs else []:
            if not any(agrees(c, l) for c in alternatives for l in listed):
                wrong.append(f"{f}:{line}: {alternatives[0]} beside Eq. {eqs}")
    assert not wrong, "sections that docs/equations.md does not give for the equation cited beside them:\n" + \
        "\n".join(wrong)


def test_the_citation_reader_pairs_what_it_should():
    assert groups("the contrast map (App. E.1.2, Eq. 23).") == [([23], [["App. E.1.2"]])]
    assert groups("a^t [paper §3.3, Eq. 11; App. F.6]") == [([11], [["§3.3"]]), ([], [["App. F.6"]])]
    assert groups("| Eq. 6, 12, App. F.4-F.5: u~") == [([6, 12], [["App. F.4", "App. F.5"]])]
    assert groups("App. D.6.1, Table 3, Eq. 16-17") == [([16, 17], [["App. D.6.1"]])]
    assert groups("(Eq. 5, 8, 9; App. D.6.4)") == [([5, 8, 9], []), ([], [["App. D.6.4"]])]
    assert groups("(Eq. 7, twice): App. C") == [([7], []), ([], [["App. C"]])]
    rows = table()
    kappa = groups("| App. F.3, Eq. 23: role conditions r_i and the contrast map κ |")[0]
    assert not any(agrees(c, l) for c in kappa[1][0] for l in [rows[23][0], *rows[23][1]])


def test_the_appendix_list_names_every_appendix_section_cited():
    text = TABLE.read_text().split("## The appendix sections")[1]
    listed = {s for m in re.finditer(APP, text) for alternatives in sections(m[0]) for s in alternatives} | \
        {"App. " + s for s in re.findall(r"\b[A-G](?:\.\d+)+\b", text)}
    cited = {s for path in SOURCES for m in re.finditer(APP, path.read_text())
             for alternatives in sections(m[0]) for s in (alternatives[0], alternatives[-1])}
    assert not cited - listed, f"appendix sections cited, absent from the list of docs/equations.md: {cited - listed}"
