"""PAC for a team of 2n agents (App. E.1.3): each agent's own check against the reference (the
pair's checks of attribution.py, run once per agent) rendered as one verdict line per agent, and
the attribution model's route, a model that writes the same a^t. train.py and eval.py take Phase 2a
from here (teams/phases.py) for a team or under --attribution model; a pair with the verifier never
comes here.

    a^t = (a_1^t, ..., a_2n^t)   each agent's own check (ROLE_CHECK) of its own output   (Eq. 24)
    c^t = header + one line per agent, in seat order, naming that agent's output only (D15)
"""

import re

from attribution import (
    CODE_OUTCOMES,
    HEADER,
    MATH_OUTCOMES,
    ROLE_CHECK,
    Attribution,
    attribute_turn,
    over_turns,
    render_code,
    render_math,
    show,
)
from infra.seats import number_of, role_of
from prompts import ROLE_NAMES, ROLES, encode_text
from teams.workflow import TeamTurn, diagonal, pairs_of, seat_order

# One line per agent (Eq. 24): what that agent produced and its own check, facts only.
AGENT_LINES = {
    "coder": (
        "printed {shown}; the program passes the reference tests.",
        "printed {shown}; the program does not pass the reference tests.",
    ),
    "tester": (
        "declared the expected output {shown}; it agrees with the reference behaviour on "
        "that input.",
        "declared the expected output {shown}; it does not agree with the reference "
        "behaviour on that input.",
    ),
    "reasoner": (
        "reported {shown}; the derived answer agrees with the reference answer.",
        "reported {shown}; the derived answer does not agree with the reference answer.",
    ),
    "tool_user": (
        "printed {shown}; the printed result agrees with the reference answer.",
        "printed {shown}; the printed result does not agree with the reference answer.",
    ),
}


def agent_line(name: str, pairs: dict, ok: bool | None) -> str:
    """The verdict line of agent `name` (Eq. 24): it names that agent's own output only, never a
    teammate's, and its check ok (None: the check could not be decided, DECISIONS.md D6). pairs:
    the turn's pairings (D15)."""
    role, mine = role_of(name), pairs_of(name, pairs)
    who = f"{ROLE_NAMES[role]} {number_of(name)}"
    if role == "coder":
        shown = ", ".join(show(a.program_output or "") for a in mine)
        shown += " on the declared test inputs"
        missing = mine[0].program is None and "no program was produced"
    elif role == "tester":
        shown = f"{show(mine[0].test_output or '')} for the test input {show(mine[0].test_input or '')}"
        missing = mine[0].test_input is None and "no test case was declared"
    elif role == "reasoner":
        shown = show(mine[0].derivation_answer or "")
        missing = (
            mine[0].derivation_answer is None and "no answer after '####' was given"
        )
    else:
        shown = show(mine[0].program_answer or "")
        missing = mine[0].program is None and "no program was produced"
    if missing:
        return f"{who}: {missing}."
    if ok is None:
        said = AGENT_LINES[role][0].format(shown=shown).split(";")[0]
        return f"{who}: {said}; whether it is correct could not be checked."
    return f"{who}: " + AGENT_LINES[role][0 if ok else 1].format(shown=shown)


def team_attribution(problem: dict, pairs: dict, agents: dict) -> Attribution:
    """a^t = (a_1^t, ..., a_2n^t) of a turn rendered into one c^t (Eq. 24), from the agents' checks
    (agents: seat -> ok). A larger team's c^t is the header and one line per agent (agent_line), in
    seat order (DECISIONS.md D15); a pair's, App. F.6's three lines (the attribution model judging
    a pair). outcome and checks sum the agents up per role: a check fails when any agent of its
    role fails it, and is undecided when none fails and one is."""
    code = problem["domain"] == "code"
    if len(pairs) == 1:
        (first, second), art = next(iter(pairs.items()))
        if code:
            case = None if art.test_input is None else (art.test_input, art.test_output)
            pair = render_code(
                art.program is not None,
                case,
                art.program_output,
                agents[first],
                agents[second],
            )
        else:
            pair = render_math(
                art.derivation_answer, art.program_answer, agents[first], agents[second]
            )
        pair.agents = agents
        return pair
    checks = {}
    for name, ok in agents.items():
        key = ROLE_CHECK[role_of(name)]
        before = checks.get(key, True)
        checks[key] = (
            False if False in (before, ok) else None if None in (before, ok) else True
        )
    table = CODE_OUTCOMES if code else MATH_OUTCOMES
    first, second = (
        ("program_correct", "test_correct")
        if code
        else ("derivation_correct", "program_correct")
    )
    lines = [
        agent_line(name, pairs, agents[name])
        for name in sorted(agents, key=seat_order(pairs))
    ]
    return Attribution(
        table[(checks[first], checks[second])][0],
        "\n".join([HEADER] + ["- " + x for x in lines]),
        checks,
        agents=agents,
    )


def attribute_team(problem: dict, turn, *, timeout: float) -> Attribution:
    """a^t of one completed turn of a team (teams.workflow.TeamTurn, Eq. 11 and 24): each agent's own check,
    run once per agent on the pairings (agent m, agent m) that hold every agent's artefact once
    (teams.workflow.diagonal), and c^t (team_attribution)."""
    agents = {}
    for key, artefacts in diagonal(turn.pairs).items():
        checks = attribute_turn(problem, artefacts, timeout=timeout).checks
        agents.update({name: checks[ROLE_CHECK[role_of(name)]] for name in key})
    return team_attribution(problem, turn.pairs, agents)


# The attribution model's route (App. E.1.3, E.1.5): a model, not an agent of the team and never
# trained, reads the turn's outputs beside the reference and says, one line per agent, whose
# output agrees with it. Its answers are a^t in the verifier's form (the agents' checks), rendered
# by team_attribution alike.
JUDGE_PROMPT = (
    "Here is a problem, its reference {reference}, and what each agent of a team produced for it in "
    "one turn. For every agent, say whether its output is consistent with the reference. Answer with "
    'one line per agent, exactly "<agent>: consistent" or "<agent>: inconsistent", and nothing '
    "else.\n\nProblem:\n{question}\n\nReference {reference}:\n{shown}\n\nOutputs:\n{outputs}"
)

# What the attribution model reads of each agent: its own output, as the verifier checks it.
JUDGED = {
    "coder": lambda a: "the program\n" + (a.program or "[none]").rstrip("\n"),
    "tester": lambda a: (
        f"the test input {show(a.test_input or '')} with expected output "
        f"{show(a.test_output or '')}"
    ),
    "reasoner": lambda a: f"the answer {show(a.derivation_answer or '')}",
    "tool_user": lambda a: f"the printed result {show(a.program_answer or '')}",
}


def judge_prompt(problem: dict, pairs: dict) -> str:
    """The attribution model's prompt for one turn (pairs: its pairings, D15): the problem, its
    reference (math: the answer; code: the reference solution, else the golden tests) and each
    agent's own output."""
    code = problem["domain"] == "code"
    reference = (
        "solution"
        if code and problem.get("solution")
        else "tests"
        if code
        else "answer"
    )
    shown = {"solution": problem.get("solution"), "answer": problem.get("answer")}.get(
        reference
    )
    shown = shown or "\n".join(
        f"input {show(t['input'])} -> output {show(t['output'])}"
        for t in problem.get("tests", [])
    )
    names = sorted({n for key in pairs for n in key}, key=seat_order(pairs))
    outputs = "\n".join(
        f"{ROLE_NAMES[role_of(n)]} {number_of(n)}: "
        f"{JUDGED[role_of(n)](pairs_of(n, pairs)[0])}"
        for n in names
    )
    return JUDGE_PROMPT.format(
        reference=reference,
        question=problem["question"].strip(),
        shown=shown,
        outputs=outputs,
    )


def read_judgement(text: str, names: list) -> dict:
    """The attribution model's answer -> {seat: True (consistent) | False}; an agent the answer has
    no line for counts as inconsistent, since the model did not confirm it (the verifier's tables
    have no undecided program)."""
    said = {}
    for line in text.splitlines():
        m = re.match(
            r"\W*([\w-]+) (\d+)\W*:\W*(consistent|inconsistent)\b", line.strip(), re.I
        )
        if m:
            said[(m.group(1).lower(), int(m.group(2)))] = (
                m.group(3).lower() == "consistent"
            )
    return {
        n: said.get((ROLE_NAMES[role_of(n)].lower(), number_of(n)), False)
        for n in names
    }


def attribute_by_model(episodes, judge, tokenizer) -> list[list[Attribution]]:
    """a^t of every turn by the attribution model (App. E.1.3): one judge call for all turns, one
    prompt per turn (judge_prompt), answered in one line per agent (read_judgement), rendered as
    the verifier's a^t would be. judge: a function list[list[int]] -> sampler.Generation (e.g. the
    teacher, sampled greedily by the caller). Returns one list per episode, as
    attribution.attribute_episodes."""
    jobs = [(e, pairs_in(e.problem, turn)) for e in episodes for turn in e.turns]
    prompts = [
        encode_text(tokenizer, judge_prompt(e.problem, pairs)) for e, pairs in jobs
    ]
    answers = iter(judge(prompts).tokens if prompts else [])
    atts = []
    for e, pairs in jobs:
        names = sorted({n for key in pairs for n in key})
        said = read_judgement(
            tokenizer.decode(next(answers), skip_special_tokens=True), names
        )
        atts.append(team_attribution(e.problem, pairs, said))
    atts = iter(atts)
    return [[next(atts) for _ in e.turns] for e in episodes]


def pairs_in(problem, turn):
    """A turn's pairings (D15): a team's (TeamTurn), or the pair's one, the workflow's two roles (rollout.Turn)."""
    if isinstance(turn, TeamTurn):
        return turn.pairs
    return {ROLES[problem["domain"]]: turn.artefacts}


def attribute_team_episodes(episodes, *, timeout, workers):
    """a^t of every turn of every episode of a team (attribute_team), `workers` turns at a time: Phase 2a by the
    verifier, one list per episode as attribution.attribute_episodes."""
    return over_turns(
        lambda e, turn: attribute_team(e.problem, turn, timeout=timeout),
        episodes,
        workers,
    )
