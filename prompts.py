"""The students' prompts and how their responses are read: the role templates of
App. F.1-F.2, a student context x_i^t built from separately tokenized segments (so that
the teacher can swap the opening line for a role condition, Eq. 6, and put verdicts
after the turn they judge, Eq. 12), the prompt limit of App. D.6.3, and the parsing
rules that read each role's artefact from its response (our choices, DECISIONS.md D5).

Top to bottom: the templates; the placeholders written into histories; the artefacts a
turn's responses yield (CodeArtefacts, MathArtefacts); context building and the prompt
limit; the parsing rules.
"""

import re
from dataclasses import dataclass

from sandbox.outcomes import ERROR

# --------------------------------------------------------------------------------------
# The role templates of the two parallel workflows (§2.1, App. D.6.1, App. F.1-F.2)
#
# A student prompt is one user message (our choice, DECISIONS.md D1) built from
# separately tokenized segments so that the teacher can swap the generic opening line
# for a role condition (Eq. 6) and put verdicts after the history entry of the turn they
# judge (Eq. 12) while every other token stays identical.

ROLES = {"code": ("coder", "tester"), "math": ("reasoner", "tool_user")}
ROLE_NAMES = {
    "coder": "Coder",
    "tester": "Tester",
    "reasoner": "Reasoner",
    "tool_user": "Tool-User",
}


def teammate(role):
    """The other role of its workflow ("coder" -> "tester"): whose seat a policy takes
    when the two are exchanged (Fig. 3a)."""
    first, second = next(roles for roles in ROLES.values() if role in roles)
    return second if role == first else first


# The generic one-line persona each template opens with (App. F.1): turn 0, then later
# turns.
OPENING = {
    "coder": (
        "You are a helpful assistant that writes Python programs.",
        "You are a helpful assistant that corrects and refines Python programs.",
    ),
    "tester": (
        "You are a helpful assistant that writes unit tests for Python programs.",
        "You are a helpful assistant that corrects and refines unit tests for Python "
        "programs.",
    ),
    "reasoner": (
        "You are a helpful assistant that solves math problems by reasoning.",
        "You are a helpful assistant that corrects and refines math solutions by "
        "reasoning.",
    ),
    "tool_user": (
        "You are a helpful assistant that solves math problems by writing Python "
        "programs.",
        "You are a helpful assistant that corrects and refines Python programs that "
        "compute answers.",
    ),
}

IO_RULES = {
    "stdio": "Read all input with input() and write results with print(); never hard-code input "
    "values. First decide how many inputs there are and of which types, then implement "
    "the solution.",
    "function": "Define the function `{entry_point}` exactly as the problem describes it. The "
    "program must not read input or print; it is called with arguments and its return "
    "value is checked.",
}
TEST_RULES = {
    "stdio": "The test input must follow the problem's input format exactly, and the expected "
    "output must be exactly what a correct program prints for it.",
    "function": "The test input is the arguments of `{entry_point}` written as one Python list "
    "literal, one element per parameter in order, and the expected output is the "
    "correct return value written as a Python literal.",
}
# Answer formats (App. F.1-F.2), reworded where small instruct models took App. F's
# wording literally (DECISIONS.md D1): the answer line is described in words, never as a
# "<answer>" placeholder that reads like markup; the test rule gives no concrete example
# value that a Tester could copy for an unrelated function; and each format ends with
# the exact layout of a response, schematic ("..." stands for the model's own text) so
# there is nothing to copy. The layouts are our addition: App. F shows none.
LAYOUT = {
    "coder": "Code:\n```python\n...\n```",
    "tester": "...\nTest Input:\n```\n...\n```\nTest Output:\n```\n...\n```",
    "reasoner": "Reasoning Steps:\n...\n#### ...",
    "tool_user": "Code:\n```python\n...\nprint(...)\n```",
}
_SHOWN = ' Layout ("..." stands for your own text):\n'
FMT_CODE = (
    'Answer format: a line "Code:" and then the complete program in one ```python fenced '
    "block." + _SHOWN + LAYOUT["coder"]
)
FMT_TEST = (
    'Answer format: after your reasoning, a line "Test Input:" and then a ``` fenced block '
    'holding the input, then a line "Test Output:" and then a ``` fenced block holding the '
    "expected output." + _SHOWN + LAYOUT["tester"]
)
FMT_MATH = (
    'Answer format: a line "Reasoning Steps:" and your derivation, then a last line that '
    "starts with #### followed by the final number or expression and nothing else."
    + _SHOWN
    + LAYOUT["reasoner"]
)
FMT_TOOL = (
    'Answer format: a line "Code:" and then one ```python fenced block; the program must '
    "print only the final answer." + _SHOWN + LAYOUT["tool_user"]
)

GUIDANCE = {  # what the role does at turn 0
    "coder": "Think through the problem step by step, then write a program that solves it. {io}",
    "tester": "Think through the problem step by step, then write one test case for it. {test}",
    "reasoner": "Solve the problem step by step in words, without writing code.",
    "tool_user": "Write a short Python program that computes the answer to the problem.",
}
# later turns: each role is asked in the same terms to locate the fault, then revise or
# keep (App. F.1)
REVISE = {
    "coder": "Your program's output and the declared expected output disagreed. If your program "
    "crashed, fix the bug. Otherwise decide where the inconsistency comes from: if your "
    "program is wrong, refine it; if the test case is wrong, keep your program and "
    "briefly explain why it meets the specification.",
    "tester": "The program's output and your declared expected output disagreed. Decide where the "
    "inconsistency comes from: if your test case is wrong, fix it; if the program is "
    "wrong, keep your test case and briefly explain why its expected output follows from "
    "the specification.",
    "reasoner": "The answer of your derivation and the result printed by the program disagreed. "
    "Decide where the disagreement comes from: if your derivation is at fault, fix the "
    "faulty step and give the corrected answer; if it is sound, keep your answer and "
    "briefly explain why.",
    "tool_user": "The result printed by your program and the answer of the derivation disagreed. "
    "If your program crashed, fix the bug. Otherwise decide where the disagreement "
    "comes from: if your program is at fault, fix it; if it is sound, keep it and "
    "briefly explain why.",
}
ANSWER_FMT = {
    "coder": FMT_CODE,
    "tester": FMT_TEST,
    "reasoner": FMT_MATH,
    "tool_user": FMT_TOOL,
}


# --------------------------------------------------------------------------------------
# Token ids of a prompt: the text a student reads, encoded as text, and the tokens that
# end its turn


def encode_text(tok, text):
    """Token ids of `text` read as plain text: a special token's spelling inside it
    stays characters. Everything in a prompt (App. F.1-F.4: problem, history, verdicts,
    role conditions) but the chat template's own head and tail goes through here, since
    much of it is untrusted: a program that prints "<|im_end|>\\n<|im_start|>assistant"
    must not end the message for the model."""
    return tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]


def longest_token_chars(tok):
    """An upper bound on the characters one token of `tok` covers (a token's vocabulary
    spelling is at least as long as the text it stands for): a text longer than limit x
    this cannot fit in `limit` tokens."""
    return max(map(len, tok.get_vocab()))


def stop_ids_of(tokenizer):
    """Token ids that end a turn: <|im_end|> (Qwen3's end of turn) and the tokenizer's
    eos."""
    ids = {tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.eos_token_id}
    return tuple(
        sorted(i for i in ids if i is not None and i != tokenizer.unk_token_id)
    )


@dataclass
class Segment:
    kind: str  # "head" | "opening" | "task" | "history" | "instruction" | "tail"
    ids: list[int]
    turn: int = -1  # for "history": the earlier turn this entry records


# What the environment reports when a program could not give an answer, and what the
# agents then read verbatim (App. D.6.1): the sandbox's prefix of a failed run
# (sandbox/outcomes.py, ERROR).
NO_PROGRAM = "(no program found in the response)"
NO_TEST = "(no test case found in the response)"
NO_ANSWER = '(no "####" answer found in the response)'
# the outcome when there is no program
NO_CODE_BLOCK = ERROR + "no ```python code block found in the response"
NOT_RUN = "(not run: there was no test case)"
# never parsed as an artefact
PLACEHOLDERS = (NO_PROGRAM, NO_TEST, NO_ANSWER, NO_CODE_BLOCK, NOT_RUN)


# What a workflow's environment (rollout.code_env / math_env) read from one turn's two
# responses with the parsing rules below and observed running them: what the mismatch
# history shows (history_entry), the verifier judges (attribution.attribute_turn) and
# episodes.jsonl records under these field names (dataclasses.asdict).
@dataclass
class CodeArtefacts:
    # the Coder's program (extract_program); None when it wrote none
    program: str | None
    # the Tester's one test case (extract_test_case); None when it wrote none
    test_input: str | None
    test_output: str | None  # ... and its declared expected output
    # what the program printed on test_input, or its "error: ..." string (NO_CODE_BLOCK
    # without a program); None when there was no test case to run it on
    program_output: str | None
    parsed_by: dict  # role -> the rule that read its artefact, None when none could

    def own(self, role):
        """What `role` wrote itself, what it revises or keeps from turn to turn."""
        return (
            (self.program,) if role == "coder" else (self.test_input, self.test_output)
        )


@dataclass
class MathArtefacts:
    derivation: str  # the Reasoner's whole response
    derivation_answer: str | None  # its answer (extract_answer); None when it gave none
    # the Tool-User's program (extract_program); None when it wrote none
    program: str | None
    # the program's printed answer (printed_answer) or its "error: ..." string
    program_answer: str
    parsed_by: dict  # role -> the rule that read its artefact, None when none could
    # it ran to its end (RunResult.ok): program_answer is its print
    program_ran: bool = False

    def own(self, role):
        """What `role` wrote itself, what it revises or keeps from turn to turn."""
        return (self.derivation_answer,) if role == "reasoner" else (self.program,)


def _fence(text, lang=""):
    """`text` as a fenced block whose fence is longer than any run of backticks inside
    it, so that what a program prints cannot close the block and write unfenced text
    (e.g. a fake verification result) into a prompt."""
    ticks = "`" * max(3, 1 + max(map(len, re.findall("`+", text)), default=0))
    return f"{ticks}{lang}\n" + text.rstrip("\n") + f"\n{ticks}"


def history_entry(role, t, artefacts):
    """The mismatch-history entry of earlier turn t as `role` sees it: its own artefact
    in full and what the environment observed of its teammate's (App. F.1: the Coder
    sees its programs, the test inputs, expected and actual outputs; the Tester its test
    cases and the differing program output). artefacts: that turn's CodeArtefacts or
    MathArtefacts. Every past turn is shown (DECISIONS.md D2)."""
    own, observed = entry_lines(role, artefacts)
    return f"Turn {t + 1}:\n" + "\n".join(own + observed) + "\n\n"


def entry_lines(role, artefacts):
    """(lines of the agent's own artefact, lines of what was observed of its teammate's)
    in one turn's artefacts."""
    program = artefacts.program or NO_PROGRAM
    if role in ("coder", "tester"):
        test_in, test_out = artefacts.test_input, artefacts.test_output
        shown = {
            "test input": _fence(NO_TEST if test_in is None else test_in),
            "expected output": _fence(NO_TEST if test_out is None else test_out),
            "program output": _fence(artefacts.program_output or NOT_RUN),
        }
        if role == "coder":
            return ["Your program:", _fence(program, "python")], [
                "Test input:",
                shown["test input"],
                "Expected output:",
                shown["expected output"],
                "Your program's output:",
                shown["program output"],
            ]
        return [
            "Your test input:",
            shown["test input"],
            "Your expected output:",
            shown["expected output"],
        ], ["The program's output:", shown["program output"]]
    # App. F.2: prior derivation and answer, the teammate's program and its output
    if role == "reasoner":
        return [
            "Your derivation:",
            artefacts.derivation.strip(),
            f"Your answer: {artefacts.derivation_answer or NO_ANSWER}",
        ], [
            "The program:",
            _fence(program, "python"),
            f"It printed: {artefacts.program_answer}",
        ]
    return [
        "Your program:",
        _fence(program, "python"),
        f"It printed: {artefacts.program_answer}",
    ], [f"The derivation's answer: {artefacts.derivation_answer or NO_ANSWER}"]


def build_context(tokenizer, problem, role, seen, entry=history_entry):
    """x_i^t as segments: chat head | opening line | guidance + problem | one entry per
    earlier turn | revise instruction + answer format | chat tail with Qwen3's empty
    think block (no-thinking mode, App. D.5). seen: the artefacts of each earlier turn.
    entry: how one is written (history_entry; a team of 2n agents writes its own,
    teams/workflow.py)."""
    t = len(seen)
    fill = {"entry_point": problem.get("entry_point", ""), "io": "", "test": ""}
    if problem["domain"] == "code":
        fill["io"] = IO_RULES[problem["format"]].format(**fill)
        fill["test"] = TEST_RULES[problem["format"]].format(**fill)
    sentinel = "\x00"
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": sentinel}],
        tokenize=False,
        add_generation_prompt=True,
        enable_thinking=False,
    )
    head, tail = chat.split(sentinel)
    question = problem["question"].strip()
    task = "\n\n" + GUIDANCE[role].format(**fill) + "\n\nProblem:\n" + question + "\n\n"
    pieces = [
        ("head", head, -1),
        ("opening", OPENING[role][min(t, 1)], -1),
        ("task", task, -1),
    ]
    if t:
        pieces.append(("history", "History of the earlier turns:\n\n", -1))
        pieces += [
            ("history", entry(role, i, artefacts), i)
            for i, artefacts in enumerate(seen)
        ]
        pieces.append(("instruction", REVISE[role] + "\n\n" + ANSWER_FMT[role], -1))
    else:
        pieces.append(("instruction", ANSWER_FMT[role], -1))
    pieces.append(("tail", tail, -1))
    # only the chat template's own pieces may hold control tokens; problem and history
    # text is read as text
    return [
        Segment(
            k,
            tokenizer(s, add_special_tokens=False)["input_ids"]
            if k in ("head", "tail")
            else encode_text(tokenizer, s),
            i,
        )
        for k, s, i in pieces
    ]


def fit_context(segments, limit):
    """Enforce the student prompt limit by dropping the oldest history entries (the
    latest mismatch matters most); returns None when even the history-free prompt is too
    long (the episode then stops). DECISIONS.md D2."""
    segs = list(segments)
    while sum(len(s.ids) for s in segs) > limit:
        entries = [j for j, s in enumerate(segs) if s.kind == "history" and s.turn >= 0]
        if not entries:
            return None
        del segs[entries[0]]
    return segs


def check_prompt_limit(problems, tokenizer, limit):
    """Refuse, naming the problem, any question that alone exceeds the student prompt
    limit of App. D.6.3 (its episode would stop as prompt_too_long at once). Run when
    the problems are loaded: a question longer than limit tokens of the longest spelling
    cannot fit and is refused by its length, so a 50 MB line costs no tokenizing."""
    most_chars = limit * longest_token_chars(tokenizer)
    for p in problems:
        if (
            len(p["question"]) > most_chars
            or len(encode_text(tokenizer, p["question"])) > limit
        ):
            raise ValueError(
                f"problem {p['id']!r}: the question alone is over the student prompt "
                f"limit of {limit} tokens"
            )


# Parsing rules (our choices, DECISIONS.md D5), tolerant of what small instruct models
# write; each parsed artefact also names the rule that read it, so that metrics can tell
# format failures from wrong work (format_counts). A program is the last ```python
# block, so a revised program written after an old one wins and an example-output block
# after the program is not taken for it; without a python-tagged block, the first fenced
# block after the last "Code:" (the answer format's label); without that either, the
# last fenced block of any tag. A "Code:" label repeated as the block's first line is
# not code. An unclosed fence (truncated response) yields no program. A test case is
# read after the last "Test Input:" and the following "Test Output:": fenced blocks when
# there are any, else the text after each label (unfenced). Only one test case is read
# per turn. The Reasoner's answer: the last "####" line with markup stripped, else the
# last \boxed{...}, else the last number outside code blocks, in ASCII digits ("٣" is no
# number, as for answers.NUMBER). The placeholders this project writes into histories
# (NO_PROGRAM ...) and the prompts' schematic layouts are removed before any rule runs,
# so a student that copies one from its history or its prompt has written no artefact.
_FENCE = re.compile(r"```([\w+-]*)[ \t]*\n(.*?)```", re.S)
_LABEL_LINE = re.compile(r"\A(\s*Code:[ \t]*\n)+")
_MARKUP = re.compile(r"</?[A-Za-z][\w-]*>|\*\*|__|`")
_LAST_NUMBER = re.compile(
    r"-?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?(?:/[0-9]+)?"
)


def _without_placeholders(text):
    for p in PLACEHOLDERS + tuple(LAYOUT.values()):
        text = text.replace(p, "")
    return text


def extract_program(text):
    """(program, rule) of a Coder or Tool-User response, written after "Code:" in a
    fenced block as the answer format of App. F.1 asks (rules above, DECISIONS.md D5);
    (None, None) when there is none."""
    text = _without_placeholders(text)
    blocks = list(_FENCE.finditer(text))
    python = [b for b in blocks if b.group(1).lower() in ("python", "py", "python3")]
    after_label = [b for b in blocks if b.start() > text.rfind("Code:") >= 0]
    rules = (
        (python, "python_block"),
        (after_label, "after_code_label"),
        (blocks, "any_block"),
    )
    chosen, rule = next(
        ((b[-1] if r != "after_code_label" else b[0], r) for b, r in rules if b),
        (None, None),
    )
    program = chosen and _LABEL_LINE.sub("", chosen.group(2))
    return (program, rule) if program and program.strip() else (None, None)


def _after_label(text, start, end):
    """The first fenced block in text[start:end] ("fenced"), else the unfenced text
    there up to the first blank line ("unfenced"), as (value, rule) or (None, None)."""
    block = _FENCE.search(text, start, end)
    if block:
        return block.group(2), "fenced"
    value = text[start:end].strip().split("\n\n")[0].strip()
    return (value + "\n", "unfenced") if value and "```" not in value else (None, None)


def extract_test_case(text):
    """((input, expected_output), rule) of a Tester response, or (None, None). rule:
    "fenced" when both are fenced blocks, else "unfenced"."""
    text = _without_placeholders(text)
    i = text.rfind("Test Input:")
    j = text.find("Test Output:", i + 1) if i >= 0 else -1
    if j < 0:
        return None, None
    (inp, r_in), (out, r_out) = (
        _after_label(text, i + len("Test Input:"), j),
        _after_label(text, j + len("Test Output:"), len(text)),
    )
    if inp is None or out is None:
        return None, None
    return (inp, out), "fenced" if r_in == r_out == "fenced" else "unfenced"


def _last_boxed(text):
    """The content of the last \\boxed{...}, braces balanced, or None."""
    i = text.rfind("\\boxed{")
    if i < 0:
        return None
    depth, k = 0, i + len("\\boxed")
    for k in range(k, len(text)):
        depth += {"{": 1, "}": -1}.get(text[k], 0)
        if depth == 0:
            return text[i + len("\\boxed{") : k].strip() or None
    return None


def extract_answer(text):
    """(answer, rule) of a Reasoner response: the rest of the line after the last '####'
    (App. D.6.1) with markup such as <answer> tags or ** stripped ("hash_line"), else
    the last \\boxed{} ("boxed"), else the last number outside code blocks
    ("last_number"); (None, None) when none applies."""
    text = _without_placeholders(text)
    i = text.rfind("####")
    if i >= 0:
        line = _MARKUP.sub("", text[i + 4 :].strip().split("\n")[0]).strip()
        if re.search(r"\w", line):  # a copied "#### ..." of the layout is no answer
            return line, "hash_line"
    if boxed := _last_boxed(text):
        return boxed, "boxed"
    # a number inside a program is no answer
    numbers = _LAST_NUMBER.findall(_FENCE.sub("", text))
    return (numbers[-1], "last_number") if numbers else (None, None)


def printed_answer(result):
    """The Tool-User's answer: the last non-empty line its program printed, or its error
    string."""
    if not result.ok:
        return result.error
    lines = [ln.strip() for ln in result.stdout.splitlines() if ln.strip()]
    return lines[-1] if lines else ERROR + "the program printed nothing"
