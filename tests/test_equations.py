"""docs/equations.md is the one table of the paper's equations the code cites. Every `Eq. N` of the project's Python
files and of the README has a row there; each row's "computed by" is called on a small case and must give what the
equation gives, written out here by hand (CASES: a row that names another function fails); each function of
"called from" calls what its row computes; and a section cited beside an equation ("App. E.1.2, Eq. 23") is that
equation's section or one the row relates to it."""

import ast
import importlib
import re
import string
from pathlib import Path
from types import SimpleNamespace

import torch

from infra.models import make_tokenizer, tiny_model
from prompts import CodeArtefacts, MathArtefacts, build_context, encode_text
from rollout import Episode, RolloutConfig, Turn
from sampler import Generation
from teacher import KAPPA, ROLE_CONDITIONS, teacher_contexts
from teams.workflow import TeamTurn, pairings

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "docs" / "equations.md"
# what cites the paper: the project's Python files (the method at the top level, infra/, baselines/, toy/, tools/) and
# the README
SOURCES = [
    p
    for folder in ("", "infra", "baselines", "teams", "toy", "tools")
    for p in sorted((ROOT / folder).glob("*.py"))
] + [ROOT / "README.md"]

# "Eq. 8", "Eq. 8-10", "Eq. 5, 8, 9" (a number followed by ".d" is a section, not an equation)
EQ = r"Eq\. \d+(?:\s*[-–]\s*\d+|,\s*\d+\b(?!\.\d))*"
SEC = r"[A-G](?:\.\d+)*\b"
# "App. F.6", "App. F.4-F.5", "App. D.6.1, D.6.3"; "§3.3", "§4.3-4.4"
APP = rf"App\. {SEC}(?:\s*[-–]\s*{SEC})?(?:,\s*{SEC}(?:\s*[-–]\s*{SEC})?)*"
PARA = r"§\s?\d+(?:\.\d+)*(?:\s*[-–]\s*\d+(?:\.\d+)*)?"
CITATION = re.compile(rf"(?P<eq>{EQ})|(?P<app>{APP})|(?P<para>{PARA})")
# what may stand between two citations of one group: commas, a slash, spaces and the paper's other labels
SAME_GROUP = re.compile(
    r"\s*(?:[,/]\s*)?(?:(?:Table \d+|Alg\. \d+|Algorithm \d+|Figs?\. [\w-]+)\s*,?\s*)*"
)


def equation_numbers(text):
    """[8, 9, 10] of "Eq. 8-10", [5, 8, 9] of "Eq. 5, 8, 9"."""
    out = []
    for part in text[len("Eq. ") :].split(","):
        lo, _, hi = re.sub(r"\s*[-–]\s*", "-", part.strip()).partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def expand(lo, hi):
    """The sections of a range, "F.1".."F.4" -> F.1, F.2, F.3, F.4; "C".."G" -> C, D, E, F, G; else its ends."""
    (p1, _, a), (p2, _, b) = lo.rpartition("."), hi.rpartition(".")
    if p1 == p2 and a.isdigit() and b.isdigit():
        return [f"{p1}.{n}" if p1 else str(n) for n in range(int(a), int(b) + 1)]
    if lo in string.ascii_uppercase and hi in string.ascii_uppercase:
        return list(
            string.ascii_uppercase[
                string.ascii_uppercase.index(lo) : string.ascii_uppercase.index(hi) + 1
            ]
        )
    return [lo, hi]


def sections(text):
    """A cited section as a list of alternatives (a range: any of its members), each "App. F.6" or "§3.3"."""
    prefix = "App. " if text.startswith("App.") else "§"
    body = text[len("App. ") :] if prefix == "App. " else text.lstrip("§ ")
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
        if last_end is None or not SAME_GROUP.fullmatch(line[last_end : m.start()]):
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


def names(cell):
    """[(file, name)] of a cell such as "`loss.py: eq13_weights, mas_opd_loss`; `train.py: update`"."""
    return [
        (f, name.strip())
        for f, names in re.findall(r"`([\w/]+\.py): ([\w., ]+)`", cell)
        for name in names.split(",")
    ]


def table():
    """Eq. number -> (section, [related sections], [(file, name)] computing it, [(file, name)] calling it)."""
    rows = {}
    for line in TABLE.read_text().splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 6 and cells[0].isdigit():
            related = [
                s for c in filter(None, cells[2].split(", ")) for s in sections(c)[0]
            ]
            rows[int(cells[0])] = (cells[1], related, names(cells[4]), names(cells[5]))
    return rows


def agrees(cited, listed):
    """A cited section agrees with a listed one when it is that section, inside it or around it (App. D.6 / D.6.1)."""
    return (
        cited == listed
        or cited.startswith(listed + ".")
        or listed.startswith(cited + ".")
    )


def test_the_table_reads_and_names_what_it_should():
    rows = table()
    assert len(rows) >= 15 and all(
        sec and code and calls for sec, _, code, calls in rows.values()
    ), rows
    assert {8, 9, 10, 12, 13, 22, 23} <= set(rows)


def test_every_equation_the_code_or_the_readme_cites_has_a_row():
    rows = table()
    missing = sorted(
        {
            (n, f"{f}:{line}")
            for f, line, eqs, _ in citations()
            for n in eqs
            if n not in rows
        }
    )
    assert not missing, f"Eq. N cited but not a row of docs/equations.md: {missing}"
    assert any(eqs for *_, eqs, _ in citations()), (
        "no citation found: the pattern is wrong"
    )


def node_of(file, name):
    """The AST node that defines `name` in `file` ("RolloutConfig.math_final" or a top-level name), or None."""
    scope, found = ast.parse((ROOT / file).read_text()).body, None
    for part in name.split("."):
        found = next((node for node in scope if part in defined(node)), None)
        scope = getattr(found, "body", [])
    return found


def test_every_function_a_row_names_exists_in_its_file():
    for n, (_, _, code, calls) in table().items():
        for file, name in code + calls:
            assert node_of(file, name) is not None, (
                f"docs/equations.md, Eq. {n}: {file} has no {name}"
            )


def defined(node):
    """The names a statement of a module or class body defines."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets = (
        node.targets
        if isinstance(node, ast.Assign)
        else [node.target]
        if isinstance(node, ast.AnnAssign)
        else []
    )
    return {t.id for t in targets if isinstance(t, ast.Name)}


def test_each_caller_calls_what_its_row_computes():
    """A "called from" function names, in its body, one of the functions (or tables) its row computes with."""
    for n, (_, _, code, calls) in table().items():
        computed = {name for _, name in code}
        for file, name in calls:
            used = {
                x.id for x in ast.walk(node_of(file, name)) if isinstance(x, ast.Name)
            } | {
                x.attr
                for x in ast.walk(node_of(file, name))
                if isinstance(x, ast.Attribute)
            }
            assert computed & used, (
                f"docs/equations.md, Eq. {n}: {file}: {name} uses none of {sorted(computed)}"
            )


def resolve(file, name):
    """The object `name` of the module at `file` ("teams/verdicts.py" is teams.verdicts)."""
    return getattr(importlib.import_module(file[:-3].replace("/", ".")), name)


def test_each_row_names_what_computes_its_equation():
    rows = table()
    assert set(CASES) == set(rows), (
        f"rows without a case: {sorted(set(rows) - set(CASES))}, cases without a "
        f"row: {sorted(set(CASES) - set(rows))}"
    )
    for n, (_, _, code, _) in rows.items():
        try:
            CASES[n](*[resolve(f, name) for f, name in code])
        # a wrong function fails the case however it fails: say which row
        except Exception as e:
            raise AssertionError(
                f"docs/equations.md, Eq. {n}: {code} does not compute it ({e!r})"
            ) from e


# ------------------------------------------------------------------------------------------------------------------
# Each equation written out by hand on a small case: CASES[n](*the functions its row names) raises unless they
# compute Eq. n.

TOK = make_tokenizer()
MATH = {"id": "m", "domain": "math", "question": "What is 6 times 7?", "answer": "42"}
CODE = {
    "id": "c",
    "domain": "code",
    "format": "stdio",
    "question": "Read a and b; print a + b.",
    "tests": [{"input": "2 3\n", "output": "5\n"}],
    "solution": "a, b = map(int, input().split())\nprint(a + b)\n",
}
T = 10  # seconds a sandboxed run may take


def ids(text):
    return TOK(text, add_special_tokens=False)["input_ids"]


def math_turn(derivation_answer, program_answer, t=0):
    art = MathArtefacts(
        "#### " + (derivation_answer or ""),
        derivation_answer,
        "print(1)",
        program_answer,
        {"reasoner": "hash_line", "tool_user": "python_block"},
        program_ran=not program_answer.startswith("error: "),
    )
    return Turn(t, {}, art, derivation_answer == program_answer)


def close(a, b):
    return torch.allclose(
        torch.as_tensor(a, dtype=torch.float64),
        torch.as_tensor(b, dtype=torch.float64),
        atol=1e-6,
    )


def eq1(
    build_context,
):  # x^t from s^t = (q, e^{t-1}, h^t): the task, the last report and the history
    seen = [
        t.artefacts
        for t in (
            math_turn("41", "42"),
            math_turn("40", "error: timed out after 20 s", 1),
        )
    ]
    text = TOK.decode(
        [i for seg in build_context(TOK, MATH, "reasoner", seen) for i in seg.ids]
    )
    # q and h^t
    assert MATH["question"] in text and "Turn 1:" in text and "Turn 2:" in text
    # e^{t-1}, the last turn's report
    assert "error: timed out after 20 s" in text.split("Turn 2:")[1]


def eq2(
    generate,
):  # y_k ~ pi(. | x, y_<k): greedy, each token the argmax, with log pi(y_k | x, y_<k)
    model = tiny_model("qwen3", layers=1, hidden=32, seed=4)
    prompt = ids("Problem: six times seven")
    out = generate(model, [prompt], 5, temperature=0)
    seq = prompt + out.tokens[0]
    with torch.no_grad():
        logp = model(torch.tensor([seq])).logits[0].float().log_softmax(-1)
    positions = range(len(prompt) - 1, len(seq) - 1)
    assert out.tokens[0] == [int(logp[p].argmax()) for p in positions]
    assert close(out.logprobs[0], [logp[p, seq[p + 1]] for p in positions])


def eq3(
    run_episodes,
):  # one joint sample: every role answers every turn from the state of the turn before
    answers = {
        "reasoner": ["#### 41", "#### 42"],
        "tool_user": ["```python\nprint(42)\n```"] * 2,
    }
    seen = {r: [] for r in answers}

    def agent(role):
        def act(prompts):
            seen[role].append(len(prompts))
            text = answers[role][min(len(seen[role]) - 1, 1)]
            return Generation(
                [ids(text) + [TOK.convert_tokens_to_ids("<|im_end|>")]],
                [[-1.0] * (len(ids(text)) + 1)],
            )

        return act

    e = run_episodes(
        [MATH],
        {r: agent(r) for r in answers},
        TOK,
        RolloutConfig(max_turns=4, math_timeout=T),
    )[0]
    assert [sorted(t.responses) for t in e.turns] == [
        ["reasoner", "tool_user"]
    ] * 2 and e.stopped == "agreed"
    assert seen == {"reasoner": [1, 1], "tool_user": [1, 1]}


def eq5(
    rollout_counts,
):  # the reverse-KL estimate: sum over tokens of lp_student - lp_target
    item = SimpleNamespace(
        seat="coder",
        episode=0,
        response=SimpleNamespace(tokens=[1, 2]),
        ctx_target=[1],
        ctx_contrast=[1],
        lp_student=torch.tensor([-1.0, -2.0]),
        lp_target=torch.tensor([-0.5, -3.0]),
        lp_contrast=torch.tensor([-1.0, -1.0]),
    )
    assert close(
        rollout_counts([], [], [item], 0)["roles"]["coder"]["reverse_kl"],
        (-1 + 0.5) + (-2 + 3),
    )


def eq6(
    teacher_contexts,
):  # u (+) r: the opening line swapped for the role condition, every other token kept
    segs = build_context(TOK, MATH, "tool_user", [])
    got = teacher_contexts(TOK, segs, ("tool_user",), None, 10_000)[0]
    want = [
        i
        for s in segs
        for i in (
            encode_text(TOK, ROLE_CONDITIONS["tool_user"])
            if s.kind == "opening"
            else s.ids
        )
    ]
    assert got == want


def eq7(score):  # l_k = log pi_T(y_k | ctx, y_<k), the stored tokens force-decoded
    teacher = tiny_model("qwen3", layers=1, hidden=32, seed=5)
    ctx, resp = ids("context"), ids(" answer")
    got = score(teacher, [ctx], [resp], max_batch_tokens=64)[0]
    with torch.no_grad():
        logp = teacher(torch.tensor([ctx + resp])).logits[0].float().log_softmax(-1)
    assert close(got, [logp[len(ctx) - 1 + k, t] for k, t in enumerate(resp)])


LP_T, LP_C, LP_S = (
    torch.tensor([-0.5, -2.0]),
    torch.tensor([-1.5, -1.0]),
    torch.tensor([-1.0, -1.0]),
)


def eq8(
    opd_advantage,
):  # the teacher's log-prob less the student's (keywords: the two differences of
    # Eq. 8 and 9 have one form)
    assert close(
        opd_advantage(lp_teacher=LP_T, lp_student=LP_S), [-0.5 + 1.0, -2.0 + 1.0]
    )


def eq9(
    role_advantage,
):  # the teacher under the target less the teacher under the contrast
    a_role = role_advantage(lp_teacher_target=LP_T, lp_teacher_contrast=LP_C)
    assert close(a_role, [-0.5 + 1.5, -2.0 + 1.0])


def eq10(ras_advantage):
    lp_t = LP_T.clone().requires_grad_()
    adv = ras_advantage(lp_t, LP_C, LP_S, 0.1)
    assert close(
        adv, [(-0.5 + 1.0) + 0.1 * (-0.5 + 1.5), (-2.0 + 1.0) + 0.1 * (-2.0 + 1.0)]
    )
    assert not adv.requires_grad  # sg(.)


def eq11(
    attribute_turn,
):  # math: the derivation wrong, the printed result right -> the derivation's fault
    att = attribute_turn(MATH, math_turn("41", "42").artefacts, timeout=T)
    assert att.checks == {"derivation_correct": False, "program_correct": True}
    assert att.outcome == "DERIVATION_INCONSISTENT" and att.description.count("\n") == 2


def eq12(verdicts_before):  # c^{<t}: the verdicts of turns 0..t-1
    atts = [SimpleNamespace(description=f"verdict {k}") for k in range(3)]
    assert verdicts_before(atts, 0) == [] and verdicts_before(atts, 2) == [
        "verdict 0",
        "verdict 1",
    ]


def eq13(eq13_weights, mas_opd_loss):
    # episode 0: the coder twice, the tester once; episode 1: the coder once. E = 2
    roles, episodes = ["coder", "coder", "tester", "coder"], [0, 0, 0, 1]
    w = eq13_weights(roles, episodes)
    assert close(
        w, [1 / (2 * 2 * 2), 1 / (2 * 2 * 2), 1 / (2 * 2 * 1), 1 / (2 * 1 * 1)]
    )
    logps = [
        torch.tensor([-1.0, -2.0]),
        torch.tensor([-0.5]),
        torch.tensor([-3.0]),
        torch.tensor([-1.0, -1.0]),
    ]
    advs = [
        torch.tensor([1.0, 2.0]),
        torch.tensor([-1.0]),
        torch.tensor([0.5]),
        torch.tensor([2.0, 0.0]),
    ]
    want = -sum(wi * (a * lp).mean() for wi, a, lp in zip(w, advs, logps))
    assert close(mas_opd_loss(logps, advs, w), want)


def eq14(role_reward):  # R_i = R_team + alpha * R_i^local
    art, checks = (
        math_turn("42", "42").artefacts,
        {"derivation_correct": True, "program_correct": True},
    )
    assert close(
        role_reward("reasoner", MATH, art, checks, "42", T, alpha=1.0), 1 + (0.2 + 0.8)
    )
    assert close(
        role_reward("reasoner", MATH, art, checks, "41", T, alpha=0.5),
        0 + 0.5 * (0.2 + 0.8),
    )


def eq15(math_team_reward):
    assert math_team_reward(MATH, "42.0") == 1 and math_team_reward(MATH, "41") == 0


def eq16(
    answers_equivalent,
):  # |a - b| <= 1e-6, or relatively so; else symbolic equality
    assert answers_equivalent("1.0000001", "1") and answers_equivalent(
        "2000000.000001", "2000000"
    )
    assert not answers_equivalent("1.01", "1") and answers_equivalent(
        "\\frac{1}{2}", "0.5"
    )


def eq17(
    final_answer,
):  # y-hat: RolloutConfig.math_final's answer, the other's when it has none
    e = Episode(MATH, [math_turn("41", "42")])
    assert final_answer(e, RolloutConfig(math_final="reasoner")) == "41"
    assert final_answer(e, RolloutConfig(math_final="tool_user")) == "42"
    assert (
        final_answer(
            Episode(MATH, [math_turn(None, "42")]), RolloutConfig(math_final="reasoner")
        )
        == "42"
    )


def eq18(answers_equivalent):
    assert not answers_equivalent(None, "42") and not answers_equivalent(None, None)


def eq19(
    local_reward,
):  # Reasoner 0.2 format + 0.8 answer; Tool-User 0.1 run + 0.1 parse + 0.8 answer
    art = math_turn("41", "42").artefacts
    checks = {"derivation_correct": False, "program_correct": True}
    assert close(local_reward("reasoner", MATH, art, checks, T), 0.2 * 1 + 0.8 * 0)
    assert close(
        local_reward("tool_user", MATH, art, checks, T), 0.1 * 1 + 0.1 * 1 + 0.8 * 1
    )


def eq20(code_team_reward):
    assert (
        code_team_reward({"program_correct": True}) == 1
        and code_team_reward({"program_correct": False}) == 0
    )


def eq21(
    local_reward,
):  # Tester 0.2 valid + 0.8 spec (Eq. 22); a Coder without a program earns nothing
    art = CodeArtefacts(None, "2 3\n", "5\n", None, {"coder": None, "tester": "fenced"})
    assert close(
        local_reward(
            "tester", CODE, art, {"program_correct": False, "test_correct": True}, T
        ),
        1.0,
    )
    assert close(
        local_reward(
            "tester", CODE, art, {"program_correct": False, "test_correct": False}, T
        ),
        0.2,
    )
    assert (
        local_reward(
            "coder", CODE, art, {"program_correct": False, "test_correct": True}, T
        )
        == 0
    )


def eq22(
    attribute_code,
):  # the reference on the declared input reproduces the declared output
    assert (
        attribute_code(CODE, None, ("2 3\n", "5\n"), timeout=T).checks["test_correct"]
        is True
    )
    assert (
        attribute_code(CODE, None, ("2 3\n", "6\n"), timeout=T).checks["test_correct"]
        is False
    )


def eq23(kappa):
    assert kappa == {
        "coder": "tester",
        "tester": "coder",
        "reasoner": "tool_user",
        "tool_user": "reasoner",
    }


def eq24(
    attribute_team,
):  # one check per agent of its own output; one line per agent in c^t
    answers = {
        "reasoner": "42",
        "reasoner2": "41",
        "tool_user": "42",
        "tool_user2": "error: exit code 1",
    }
    pairs = {
        (a, b): math_turn(answers[a], answers[b]).artefacts
        for a, b in pairings("math", 2)
    }
    att = attribute_team(
        MATH, TeamTurn(0, {}, pairs, {k: False for k in pairs}, False), timeout=T
    )
    assert att.agents == {
        "reasoner": True,
        "reasoner2": False,
        "tool_user": True,
        "tool_user2": False,
    }
    assert (
        att.description.count("\n") == 4
        and "Reasoner 2: reported '41'" in att.description
    )


def eq25(
    teacher_inputs,
):  # two teacher contexts, target and contrast, per response: 2N for N responses
    e = Episode(MATH, [math_turn("41", "42")])
    e.turns[0].responses = {
        r: SimpleNamespace(role=r, context=build_context(TOK, MATH, r, []), tokens=[1])
        for r in ("reasoner", "tool_user")
    }
    inputs, overlong = teacher_inputs([e], [[None]], TOK, 10_000, pac=False)
    assert len(inputs) == 2 and overlong == 0
    for k, seat, resp, target, contrast in inputs:
        assert (target, contrast) == tuple(
            teacher_contexts(TOK, resp.context, (seat, KAPPA[seat]), None, 10_000)
        )


CASES = {
    1: eq1,
    2: eq2,
    3: eq3,
    5: eq5,
    6: eq6,
    7: eq7,
    8: eq8,
    9: eq9,
    10: eq10,
    11: eq11,
    12: eq12,
    13: eq13,
    14: eq14,
    15: eq15,
    16: eq16,
    17: eq17,
    18: eq18,
    19: eq19,
    20: eq20,
    21: eq21,
    22: eq22,
    23: eq23,
    24: eq24,
    25: eq25,
}


def test_a_section_cited_beside_an_equation_is_that_equations():
    """Each section of a citation group agrees with the section or a related section of one of the group's
    equations: "App. F.3, Eq. 23" is wrong, kappa being App. E.1.2 (F.3 holds the role conditions)."""
    rows, wrong = table(), []
    for f, line, eqs, secs in citations():
        listed = [s for n in eqs if n in rows for s in [rows[n][0], *rows[n][1]]]
        for alternatives in secs if eqs else []:
            if not any(agrees(c, x) for c in alternatives for x in listed):
                wrong.append(f"{f}:{line}: {alternatives[0]} beside Eq. {eqs}")
    assert not wrong, (
        "sections that docs/equations.md does not give for the equation cited beside them:\n"
        + "\n".join(wrong)
    )


def test_the_citation_reader_pairs_what_it_should():
    assert groups("the contrast map (App. E.1.2, Eq. 23).") == [
        ([23], [["App. E.1.2"]])
    ]
    assert groups("a^t [paper §3.3, Eq. 11; App. F.6]") == [
        ([11], [["§3.3"]]),
        ([], [["App. F.6"]]),
    ]
    assert groups("| Eq. 6, 12, App. F.4-F.5: u~") == [
        ([6, 12], [["App. F.4", "App. F.5"]])
    ]
    assert groups("App. D.6.1, Table 3, Eq. 16-17") == [([16, 17], [["App. D.6.1"]])]
    assert groups("(Eq. 5, 8, 9; App. D.6.4)") == [
        ([5, 8, 9], []),
        ([], [["App. D.6.4"]]),
    ]
    assert groups("(Eq. 7, twice): App. C") == [([7], []), ([], [["App. C"]])]
    rows = table()
    kappa = groups("| App. F.3, Eq. 23: role conditions r_i and the contrast map κ |")[
        0
    ]
    assert not any(
        agrees(c, x) for c in kappa[1][0] for x in [rows[23][0], *rows[23][1]]
    )


def test_the_appendix_list_names_every_appendix_section_cited():
    text = TABLE.read_text().split("## The appendix sections")[1]
    listed = {
        s
        for m in re.finditer(APP, text)
        for alternatives in sections(m[0])
        for s in alternatives
    } | {"App. " + s for s in re.findall(r"\b[A-G](?:\.\d+)+\b", text)}
    cited = {
        s
        for path in SOURCES
        for m in re.finditer(APP, path.read_text())
        for alternatives in sections(m[0])
        for s in (alternatives[0], alternatives[-1])
    }
    assert not cited - listed, (
        f"appendix sections cited, absent from the list of docs/equations.md: {cited - listed}"
    )
