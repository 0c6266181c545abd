"""Phase 1 of Algorithm 1 (App. C): the students' joint rollout in the two parallel, multi-turn workflows of
App. D.6.1 (code: Coder + Tester; math: Reasoner + Tool-User), sampled with sampler.generate.

    python rollout.py                  # tiny random models on examples/problems.jsonl: every step of the protocol

Top to bottom: the prompts (App. F.1-F.2) and how a student context is built from them; parsing of responses;
the environment of each workflow (Table 3); the turn loop `run_episodes`; a command line that prints transcripts.
"""
import argparse
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields

import torch
from tqdm import tqdm

from attribution import answers_equivalent, attribute_turn
from data import COUNT, SEED, ProblemError, bounded, check_writable, json_text, load_problems
from models import encode_text, load_model, longest_token_chars
from sampler import Generation, generate
from sandbox import ERROR, is_error, outputs_match, run_case, run_once, stop_on_sigterm

# ----------------------------------------------------------------------------------------------------------
# The two parallel workflows (§2.1, App. D.6.1, App. F.1-F.2)
#
# Each turn both agents answer the same state independently (neither sees the other's same-turn output); the
# environment compares their artefacts; agreement ends the episode, otherwise both see the mismatch history and
# are asked, in the same terms, to locate the fault and revise or keep their own artefact; at most T turns.
# A student prompt is one user message (our choice, §10.2) built from separately tokenized segments so that the
# teacher can swap the generic opening line for a role condition (Eq. 6) and put verdicts after the history
# entry of the turn they judge (Eq. 12) while every other token stays identical.

ROLES = {"code": ("coder", "tester"), "math": ("reasoner", "tool_user")}
ROLE_NAMES = {"coder": "Coder", "tester": "Tester", "reasoner": "Reasoner", "tool_user": "Tool-User"}

# The generic one-line persona each template opens with (App. F.1): turn 0, then later turns.
OPENING = {
    "coder": ("You are a helpful assistant that writes Python programs.",
              "You are a helpful assistant that corrects and refines Python programs."),
    "tester": ("You are a helpful assistant that writes unit tests for Python programs.",
               "You are a helpful assistant that corrects and refines unit tests for Python programs."),
    "reasoner": ("You are a helpful assistant that solves math problems by reasoning.",
                 "You are a helpful assistant that corrects and refines math solutions by reasoning."),
    "tool_user": ("You are a helpful assistant that solves math problems by writing Python programs.",
                  "You are a helpful assistant that corrects and refines Python programs that compute answers."),
}

IO_RULES = {
    "stdio": "Read all input with input() and write results with print(); never hard-code input values. "
             "First decide how many inputs there are and of which types, then implement the solution.",
    "function": "Define the function `{entry_point}` exactly as the problem describes it. The program must not "
                "read input or print; it is called with arguments and its return value is checked.",
}
TEST_RULES = {
    "stdio": "The test input must follow the problem's input format exactly, and the expected output must be "
             "exactly what a correct program prints for it.",
    "function": "The test input is the arguments of `{entry_point}` written as one Python list literal, one element "
                "per parameter in order, and the expected output is the correct return value written as a Python "
                "literal.",
}
# Answer formats (App. F.1-F.2), reworded where small instruct models took App. F's wording literally (§10.1):
# the answer line is described in words, never as a "<answer>" placeholder that reads like markup; the test rule
# gives no concrete example value that a Tester could copy for an unrelated function; and each format ends with
# the exact layout of a response, schematic ("..." stands for the model's own text) so there is nothing to copy.
# The layouts are our addition: App. F shows none.
LAYOUT = {
    "coder": "Code:\n```python\n...\n```",
    "tester": "...\nTest Input:\n```\n...\n```\nTest Output:\n```\n...\n```",
    "reasoner": "Reasoning Steps:\n...\n#### ...",
    "tool_user": "Code:\n```python\n...\nprint(...)\n```",
}
_SHOWN = ' Layout ("..." stands for your own text):\n'
FMT_CODE = ('Answer format: a line "Code:" and then the complete program in one ```python fenced block.' + _SHOWN
            + LAYOUT["coder"])
FMT_TEST = ('Answer format: after your reasoning, a line "Test Input:" and then a ``` fenced block holding the '
            'input, then a line "Test Output:" and then a ``` fenced block holding the expected output.' + _SHOWN
            + LAYOUT["tester"])
FMT_MATH = ('Answer format: a line "Reasoning Steps:" and your derivation, then a last line that starts with #### '
            'followed by the final number or expression and nothing else.' + _SHOWN + LAYOUT["reasoner"])
FMT_TOOL = ('Answer format: a line "Code:" and then one ```python fenced block; the program must print only the '
            'final answer.' + _SHOWN + LAYOUT["tool_user"])

GUIDANCE = {  # what the role does at turn 0
    "coder": "Think through the problem step by step, then write a program that solves it. {io}",
    "tester": "Think through the problem step by step, then write one test case for it. {test}",
    "reasoner": "Solve the problem step by step in words, without writing code.",
    "tool_user": "Write a short Python program that computes the answer to the problem.",
}
REVISE = {  # later turns: each role is asked in the same terms to locate the fault, then revise or keep (App. F.1)
    "coder": "Your program's output and the declared expected output disagreed. If your program crashed, fix the "
             "bug. Otherwise decide where the inconsistency comes from: if your program is wrong, refine it; if the "
             "test case is wrong, keep your program and briefly explain why it meets the specification.",
    "tester": "The program's output and your declared expected output disagreed. Decide where the inconsistency "
              "comes from: if your test case is wrong, fix it; if the program is wrong, keep your test case and "
              "briefly explain why its expected output follows from the specification.",
    "reasoner": "The answer of your derivation and the result printed by the program disagreed. Decide where the "
                "disagreement comes from: if your derivation is at fault, fix the faulty step and give the "
                "corrected answer; if it is sound, keep your answer and briefly explain why.",
    "tool_user": "The result printed by your program and the answer of the derivation disagreed. If your program "
                 "crashed, fix the bug. Otherwise decide where the disagreement comes from: if your program is at "
                 "fault, fix it; if it is sound, keep it and briefly explain why.",
}
ANSWER_FMT = {"coder": FMT_CODE, "tester": FMT_TEST, "reasoner": FMT_MATH, "tool_user": FMT_TOOL}


@dataclass
class RolloutConfig:
    max_turns: int = 4              # T (App. D.6.1)
    max_new_tokens: int = 4096      # student response limit (App. D.6.3)
    # The math roles' limit, when it differs (0: max_new_tokens). The paper has one limit for both domains; on a
    # CPU the time of a rollout is its longest response, and small models' programs need more tokens than their
    # math answers (measured in the README, "Real small models on a CPU").
    math_max_new_tokens: int = 0
    max_prompt_tokens: int = 8192   # student prompt limit (App. D.6.3)
    temperature: float = 1.0        # training sampling (App. D.6.1); eval uses 0.6 / 0.95 / 20
    top_p: float = 1.0
    top_k: int = 0
    code_timeout: float = 30.0      # sandbox wall clock (App. D.6.1)
    math_timeout: float = 20.0
    # Which answer a math episode submits when the roles never agree: the paper is silent (§10.8). Default: the
    # Reasoner's, since it exists whenever the format is followed while a crashing program prints nothing; each
    # choice falls back to the other answer when its own is missing.
    math_final: str = "reasoner"
    workers: int = 4                # episodes whose programs run at once
    rollout_chunk: int = 0          # prompts per generate call (0 = all of a turn at once); bounds the KV cache
    compile: bool = False           # the sampler's decode step through torch.compile (sampler.compiled_decode_one)
    progress: bool = False          # a live line while episodes run: turn, responses done, tokens per second


def rollout_config(args, **overrides):
    """A RolloutConfig from a command line's parsed args: every field named like one of args' attributes (e.g.
    --max-new-tokens), then `overrides` (e.g. the evaluation decoding of App. D.5); the rest keep their defaults
    (App. D.6.1, D.6.3)."""
    names = {f.name for f in fields(RolloutConfig)}
    return RolloutConfig(**{**{k: v for k, v in vars(args).items() if k in names}, **overrides})


def response_limit(cfg, domain):
    """The most tokens a student response of `domain` ("code" or "math") may have under `cfg` (App. D.6.3)."""
    return cfg.math_max_new_tokens if domain == "math" and cfg.math_max_new_tokens else cfg.max_new_tokens


@dataclass
class Segment:
    kind: str        # "head" | "opening" | "task" | "history" | "instruction" | "tail"
    ids: list[int]
    turn: int = -1   # for "history": the earlier turn this entry records


@dataclass
class Response:
    role: str
    context: list[Segment]  # the student's input x_i^t, exactly as the student saw it
    tokens: list[int]       # y_i^t, as sampled (never re-tokenized)
    logprobs: list[float]   # log pi_theta_i(y_k | x, y_<k) per token, from the sampler (Eq. 8)
    text: str
    truncated: bool = False  # cut by the response limit: it reached the limit without a stop token

    @property
    def context_ids(self):
        return [i for s in self.context for i in s.ids]


@dataclass
class Turn:
    t: int
    responses: dict         # role -> Response
    artefacts: dict         # what the environment read and observed (see code_env / math_env)
    agree: bool


@dataclass
class Episode:
    problem: dict
    turns: list
    final: str | None = None     # the submitted program (code) or answer (math)
    stopped: str = ""            # "agreed", "max_turns" or "prompt_too_long"


NO_PROGRAM = "(no program found in the response)"
NO_TEST = "(no test case found in the response)"
NO_ANSWER = '(no "####" answer found in the response)'
NO_CODE_BLOCK = ERROR + "no ```python code block found in the response"  # the outcome when there is no program
NOT_RUN = "(not run: there was no test case)"
PLACEHOLDERS = (NO_PROGRAM, NO_TEST, NO_ANSWER, NO_CODE_BLOCK, NOT_RUN)  # never parsed as an artefact


def _fence(text, lang=""):
    """`text` as a fenced block whose fence is longer than any run of backticks inside it, so that what a program
    prints cannot close the block and write unfenced text (e.g. a fake verification result) into a prompt."""
    ticks = "`" * max(3, 1 + max(map(len, re.findall("`+", text)), default=0))
    return f"{ticks}{lang}\n" + text.rstrip("\n") + f"\n{ticks}"


def history_entry(role, t, artefacts):
    """The mismatch-history entry of earlier turn t as `role` sees it: its own artefact in full and what the
    environment observed of its partner (App. F.1: the Coder sees its programs, the test inputs, expected and
    actual outputs; the Tester its test cases and the differing program output). Every past turn is shown."""
    program, answer = artefacts.get("program") or NO_PROGRAM, artefacts.get("derivation_answer") or NO_ANSWER
    if role in ("coder", "tester"):
        test_in, test_out = artefacts["test_input"], artefacts["test_output"]
        shown = {"test input": _fence(NO_TEST if test_in is None else test_in),
                 "expected output": _fence(NO_TEST if test_out is None else test_out),
                 "program output": _fence(artefacts["program_output"] or NOT_RUN)}
        if role == "coder":
            lines = ["Your program:", _fence(program, "python"), "Test input:", shown["test input"], "Expected output:",
                     shown["expected output"], "Your program's output:", shown["program output"]]
        else:
            lines = ["Your test input:", shown["test input"], "Your expected output:", shown["expected output"],
                     "The program's output:", shown["program output"]]
    elif role == "reasoner":  # App. F.2: prior derivation and answer, the teammate's program and its output
        lines = ["Your derivation:", artefacts["derivation"].strip(), f"Your answer: {answer}", "The program:",
                 _fence(program, "python"), f"It printed: {artefacts['program_answer']}"]
    else:
        lines = ["Your program:", _fence(program, "python"), f"It printed: {artefacts['program_answer']}",
                 f"The derivation's answer: {answer}"]
    return f"Turn {t + 1}:\n" + "\n".join(lines) + "\n\n"


def build_context(tokenizer, problem, role, turns):
    """x_i^t as segments: chat head | opening line | guidance + problem | one entry per earlier turn | revise
    instruction + answer format | chat tail with Qwen3's empty think block (no-thinking mode, App. D.5)."""
    t = len(turns)
    fill = {"entry_point": problem.get("entry_point", ""), "io": "", "test": ""}
    if problem["domain"] == "code":
        fill["io"] = IO_RULES[problem["format"]].format(**fill)
        fill["test"] = TEST_RULES[problem["format"]].format(**fill)
    sentinel = "\x00"
    chat = tokenizer.apply_chat_template([{"role": "user", "content": sentinel}], tokenize=False,
                                         add_generation_prompt=True, enable_thinking=False)
    head, tail = chat.split(sentinel)
    task = "\n\n" + GUIDANCE[role].format(**fill) + "\n\nProblem:\n" + problem["question"].strip() + "\n\n"
    pieces = [("head", head, -1), ("opening", OPENING[role][min(t, 1)], -1), ("task", task, -1)]
    if t:
        pieces.append(("history", "History of the earlier turns:\n\n", -1))
        pieces += [("history", history_entry(role, i, turn.artefacts), i) for i, turn in enumerate(turns)]
        pieces.append(("instruction", REVISE[role] + "\n\n" + ANSWER_FMT[role], -1))
    else:
        pieces.append(("instruction", ANSWER_FMT[role], -1))
    pieces.append(("tail", tail, -1))
    # only the chat template's own pieces may hold control tokens; problem and history text is read as text
    return [Segment(k, tokenizer(s, add_special_tokens=False)["input_ids"] if k in ("head", "tail")
                    else encode_text(tokenizer, s), i) for k, s, i in pieces]


def fit_context(segments, limit):
    """Enforce the student prompt limit by dropping the oldest history entries (the latest mismatch matters most);
    returns None when even the history-free prompt is too long (the episode then stops)."""
    segs = list(segments)
    while sum(len(s.ids) for s in segs) > limit:
        entries = [j for j, s in enumerate(segs) if s.kind == "history" and s.turn >= 0]
        if not entries:
            return None
        del segs[entries[0]]
    return segs


def check_prompt_limit(problems, tokenizer, limit):
    """Refuse, naming the problem, any question that alone exceeds the student prompt limit of App. D.6.3 (its
    episode would stop as prompt_too_long at once). Run when the problems are loaded: a question longer than limit
    tokens of the longest spelling cannot fit and is refused by its length, so a 50 MB line costs no tokenizing."""
    most_chars = limit * longest_token_chars(tokenizer)
    for p in problems:
        if len(p["question"]) > most_chars or len(encode_text(tokenizer, p["question"])) > limit:
            raise ProblemError(f"problem {p['id']!r}: the question alone is over the student prompt limit of "
                               f"{limit} tokens")


# Parsing rules (§10.5, our choices), tolerant of what small instruct models write; each parsed artefact also
# names the rule that read it, so that metrics can tell format failures from wrong work (format_counts).
# A program is the last ```python block, so a revised program written after an old one wins and an
# example-output block after the program is not taken for it; without a python-tagged block, the first fenced
# block after the last "Code:" (the answer format's label); without that either, the last fenced block of any
# tag. A "Code:" label repeated as the block's first line is not code. An unclosed fence (truncated response)
# yields no program. A test case is read after the last "Test Input:" and the following "Test Output:": fenced
# blocks when there are any, else the text after each label (unfenced). Only one test case is read per turn.
# The Reasoner's answer: the last "####" line with markup stripped, else the last \boxed{...}, else the last
# number outside code blocks, in ASCII digits ("٣" is no number, as for sandbox.NUMBER). The placeholders this
# project writes into histories (NO_PROGRAM ...) and the prompts' schematic layouts are removed before any rule
# runs, so a student that copies one from its history or its prompt has written no artefact.
_FENCE = re.compile(r"```([\w+-]*)[ \t]*\n(.*?)```", re.S)
_LABEL_LINE = re.compile(r"\A(\s*Code:[ \t]*\n)+")
_MARKUP = re.compile(r"</?[A-Za-z][\w-]*>|\*\*|__|`")
_LAST_NUMBER = re.compile(r"-?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?(?:/[0-9]+)?")


def _without_placeholders(text):
    for p in PLACEHOLDERS + tuple(LAYOUT.values()):
        text = text.replace(p, "")
    return text


def extract_program(text):
    """(program, rule) of a Coder or Tool-User response, written after "Code:" in a fenced block as the answer
    format of App. F.1 asks (rules above, §10.5); (None, None) when there is none."""
    text = _without_placeholders(text)
    blocks = list(_FENCE.finditer(text))
    python = [b for b in blocks if b.group(1).lower() in ("python", "py", "python3")]
    after_label = [b for b in blocks if b.start() > text.rfind("Code:") >= 0]
    chosen, rule = next(((b[-1] if r != "after_code_label" else b[0], r) for b, r in
                         ((python, "python_block"), (after_label, "after_code_label"), (blocks, "any_block")) if b),
                        (None, None))
    program = chosen and _LABEL_LINE.sub("", chosen.group(2))
    return (program, rule) if program and program.strip() else (None, None)


def _after_label(text, start, end):
    """The first fenced block in text[start:end] ("fenced"), else the unfenced text there up to the first blank
    line ("unfenced"), as (value, rule) or (None, None)."""
    block = _FENCE.search(text, start, end)
    if block:
        return block.group(2), "fenced"
    value = text[start:end].strip().split("\n\n")[0].strip()
    return (value + "\n", "unfenced") if value and "```" not in value else (None, None)


def extract_test_case(text):
    """((input, expected_output), rule) of a Tester response, or (None, None). rule: "fenced" when both are
    fenced blocks, else "unfenced"."""
    text = _without_placeholders(text)
    i = text.rfind("Test Input:")
    j = text.find("Test Output:", i + 1) if i >= 0 else -1
    if j < 0:
        return None, None
    (inp, r_in), (out, r_out) = _after_label(text, i + len("Test Input:"), j), \
        _after_label(text, j + len("Test Output:"), len(text))
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
            return text[i + len("\\boxed{"):k].strip() or None
    return None


def extract_answer(text):
    """(answer, rule) of a Reasoner response: the rest of the line after the last '####' (App. D.6.1) with markup
    such as <answer> tags or ** stripped ("hash_line"), else the last \\boxed{} ("boxed"), else the last number
    outside code blocks ("last_number"); (None, None) when none applies."""
    text = _without_placeholders(text)
    i = text.rfind("####")
    if i >= 0:
        line = _MARKUP.sub("", text[i + 4:].strip().split("\n")[0]).strip()
        if re.search(r"\w", line):  # a copied "#### ..." of the layout is no answer
            return line, "hash_line"
    if boxed := _last_boxed(text):
        return boxed, "boxed"
    numbers = _LAST_NUMBER.findall(_FENCE.sub("", text))  # a number inside a program is no answer
    return (numbers[-1], "last_number") if numbers else (None, None)


def printed_answer(result):
    """The Tool-User's answer: the last non-empty line its program printed, or its error string."""
    if not result.ok:
        return result.error
    lines = [ln.strip() for ln in result.stdout.splitlines() if ln.strip()]
    return lines[-1] if lines else ERROR + "the program printed nothing"


def code_env(problem, texts, cfg):
    """Run the Coder's program on the Tester's case (Table 3, run 1: the only outcome agents see). Golden tests
    are not run here: they belong to the verifier (attribution.py)."""
    (program, by_coder), (case, by_tester) = extract_program(texts["coder"]), extract_test_case(texts["tester"])
    artefacts = {"program": program, "test_input": case and case[0], "test_output": case and case[1],
                 "program_output": None, "parsed_by": {"coder": by_coder, "tester": by_tester}}
    if program is None:
        artefacts["program_output"] = NO_CODE_BLOCK
    elif case is not None:
        r = run_case(problem, program, case[0], timeout=cfg.code_timeout)
        artefacts["program_output"] = r.stdout if r.ok else r.error
        return artefacts, r.ok and outputs_match(problem["format"], r.stdout, case[1])
    return artefacts, False


def math_env(problem, texts, cfg):
    """Parse the derivation's answer, run the program, compare the two with the symbolic verifier (App. D.6.1)."""
    (program, by_tool_user), (answer, by_reasoner) = extract_program(texts["tool_user"]), \
        extract_answer(texts["reasoner"])
    artefacts = {"derivation": texts["reasoner"], "derivation_answer": answer, "program": program,
                 "parsed_by": {"reasoner": by_reasoner, "tool_user": by_tool_user}}
    if program is None:
        artefacts["program_answer"] = NO_CODE_BLOCK
    else:
        artefacts["program_answer"] = printed_answer(run_once(program, timeout=cfg.math_timeout))
    printed = artefacts["program_answer"]
    return artefacts, not is_error(printed) and answers_equivalent(artefacts["derivation_answer"], printed)


def final_answer(episode, cfg):
    """Eq. 17's submitted answer: the Coder's last program; for math see RolloutConfig.math_final."""
    artefacts = episode.turns[-1].artefacts if episode.turns else {}
    if episode.problem["domain"] == "code":
        return artefacts.get("program")
    deriv = artefacts.get("derivation_answer")
    prog = artefacts.get("program_answer")
    prog = None if is_error(prog) else prog
    if cfg.math_final not in ("reasoner", "tool_user"):
        raise ValueError(f"RolloutConfig.math_final must be 'reasoner' or 'tool_user', got {cfg.math_final!r}")
    first, second = (deriv, prog) if cfg.math_final == "reasoner" else (prog, deriv)
    return first if first is not None else second


def format_counts(episodes):
    """Per role, how its responses were parsed under the rules of §10.5 (above): {role: {"responses": n, rule:
    count, ..., "truncated": count, "unparsed": count}}, rule as named by extract_program / extract_test_case /
    extract_answer. A response with no readable artefact is "truncated" when the response limit cut it (e.g.
    inside its opened code block: a length problem) and "unparsed" when it ended by itself (a format problem)."""
    out = {}
    for e in episodes:
        for turn in e.turns:
            for role, rule in turn.artefacts.get("parsed_by", {}).items():
                c = out.setdefault(role, {"responses": 0, "truncated": 0, "unparsed": 0})
                c["responses"] += 1
                rule = rule or ("truncated" if turn.responses[role].truncated else "unparsed")
                c[rule] = c.get(rule, 0) + 1
    return out


def format_shares(counts):
    """format_counts' counts (or their sums over ranks) as % of each role's responses: {role: {rule: %}}."""
    return {role: {k: 100 * v / c["responses"] for k, v in sorted(c.items()) if k != "responses"}
            for role, c in sorted(counts.items()) if c["responses"]}


def stop_ids_of(tokenizer):
    """Token ids that end a turn: <|im_end|> (Qwen3's end of turn) and the tokenizer's eos."""
    ids = {tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.eos_token_id}
    return tuple(sorted(i for i in ids if i is not None and i != tokenizer.unk_token_id))


@dataclass
class TurnProgress:
    """The figures of run_episodes' progress line for one turn: what runs (a generate call's prefill reads its
    prompts in one forward, on a CPU for minutes), responses done and tokens per second, updated at each of the
    sampler's host reads (generate's on_check) and exactly as each generate call returns."""
    bar: tqdm
    turn: str              # "turn t/T"
    start: float = field(default_factory=time.perf_counter)
    tokens: int = 0        # of the generate calls that returned
    rows: int = 0
    call_tokens: int = 0   # of the call under way, as far as its host reads tell
    call_rows: int = 0

    def reading(self, n_prompts):
        self.bar.set_description_str(f"{self.turn}: reading {n_prompts} prompts")

    def check(self, new_tokens, rows_done):
        self.bar.set_description_str(f"{self.turn}: sampling", refresh=False)
        self.call_tokens += new_tokens
        self.call_rows = rows_done
        self.show()

    def call_done(self, gen):
        self.tokens += sum(map(len, gen.tokens))
        self.rows += len(gen.tokens)
        self.call_tokens = self.call_rows = 0
        self.show()

    def show(self):
        tokens = self.tokens + self.call_tokens
        self.bar.n = self.rows + self.call_rows
        self.bar.set_postfix_str(f"{tokens:,} tokens, {tokens / (time.perf_counter() - self.start):.1f} tok/s")


def run_episodes(problems, policies, tokenizer, cfg=None, generator=None, on_done=None):
    """Algorithm 1, Phase 1: joint rollouts of a batch of problems, all episodes advancing turn by turn.

    policies: role -> model, e.g. {"coder": m1, "tester": m2}; one model may sit in both seats. All prompts of a
    turn that go to the same model with the same response limit (response_limit) are sampled in one `generate`
    call (cfg.rollout_chunk at most). A policy may also be any function list[list[int]] -> Generation (scripted
    agents in tests). on_done: called with each episode as soon as it stops (its transcript can be written while
    the others go on). With cfg.progress a line shows the turn, responses done and tokens per second.
    Returns one Episode per problem.
    """
    cfg = cfg or RolloutConfig()
    for p in problems:
        missing = [r for r in ROLES[p["domain"]] if r not in policies]
        if missing:
            raise ValueError(f"run_episodes: problem {p['id']!r} needs a policy for {missing}")
    episodes = [Episode(p, []) for p in problems]
    stops = stop_ids_of(tokenizer)
    pool = ThreadPoolExecutor(max(1, cfg.workers))
    for t in range(cfg.max_turns):
        active = [e for e in episodes if not e.stopped]
        jobs = []  # (episode, role, context)
        for e in active:
            ctxs = {r: fit_context(build_context(tokenizer, e.problem, r, e.turns), cfg.max_prompt_tokens)
                    for r in ROLES[e.problem["domain"]]}
            if any(c is None for c in ctxs.values()):
                _finish(e, "prompt_too_long", cfg, on_done)
                continue
            jobs += [(e, r, c) for r, c in ctxs.items()]
        if not jobs:
            break
        head = f"turn {t + 1}/{cfg.max_turns}"
        bar = tqdm(total=len(jobs), desc=head, leave=False, disable=not cfg.progress,
                   bar_format="{desc}: {n}/{total} responses{postfix} [{elapsed}]")
        out, live = {}, TurnProgress(bar, head)
        group = lambda job: (id(policies[job[1]]), response_limit(cfg, job[0].problem["domain"]))
        for key in dict.fromkeys(map(group, jobs)):  # each (model, limit) once, in the order of the jobs
            mine = [j for j in jobs if group(j) == key]
            model, limit = policies[mine[0][1]], key[1]
            prompts = [[i for s in c for i in s.ids] for _, _, c in mine]
            step = cfg.rollout_chunk or len(prompts)
            gen = Generation([], [])
            for lo in range(0, len(prompts), step):  # in rounds of at most rollout_chunk prompts
                if isinstance(model, torch.nn.Module):
                    live.reading(len(prompts[lo:lo + step]))
                    part = generate(model, prompts[lo:lo + step], limit, temperature=cfg.temperature,
                                    top_p=cfg.top_p, top_k=cfg.top_k, stop_ids=stops, generator=generator,
                                    compiled=cfg.compile, on_check=live.check)
                else:  # a scripted agent or another sampler: prompts -> Generation
                    part = model(prompts[lo:lo + step])
                live.call_done(part)
                gen.tokens += part.tokens
                gen.logprobs += part.logprobs
            for (e, r, c), toks, lps in zip(mine, gen.tokens, gen.logprobs):
                text = tokenizer.decode(toks, skip_special_tokens=True)
                cut = bool(toks) and len(toks) >= limit and toks[-1] not in stops
                out.setdefault(id(e), {})[r] = Response(r, c, toks, lps, text, cut)
        bar.set_description_str(f"{head}: running programs")
        stepped = [e for e in active if id(e) in out]
        env = {"code": code_env, "math": math_env}
        results = pool.map(lambda e: env[e.problem["domain"]](e.problem, {r: x.text for r, x in out[id(e)].items()},
                                                               cfg), stepped)
        for e, (artefacts, agree) in zip(stepped, results):
            e.turns.append(Turn(t, out[id(e)], artefacts, agree))
            if agree:
                _finish(e, "agreed", cfg, on_done)
        bar.close()
    pool.shutdown()
    for e in episodes:
        if not e.stopped:
            _finish(e, "max_turns", cfg, on_done)
    return episodes


def _finish(e, stopped, cfg, on_done):
    e.stopped, e.final = stopped, final_answer(e, cfg)
    if on_done:
        on_done(e)


# ----------------------------------------------------------------------------------------------------------
# 3. Command line: run episodes and print their transcripts (every step of the protocol, tiny models)


def episode_record(e):
    """A JSON-ready record of one episode: everything the teacher needs later, nothing recomputed."""
    turns = [{"t": t.t, "agree": t.agree, "artefacts": t.artefacts,
              "responses": {r: {"context": [[s.kind, s.turn, s.ids] for s in x.context], "tokens": x.tokens,
                                "logprobs": x.logprobs, "text": x.text, "truncated": x.truncated}
                            for r, x in t.responses.items()}}
             for t in e.turns]
    return {"id": e.problem["id"], "stopped": e.stopped, "final": e.final, "turns": turns}


def append_episodes(path, episodes, **fields):
    """Append one JSONL line per episode of Phase 1 (App. C; episode_record plus `fields`, e.g. its step or seed)
    and close the file, so that a crash loses no episode already written."""
    with open(path, "a") as f:
        f.writelines(json_text({**fields, **episode_record(e)}) + "\n" for e in episodes)


def print_transcript(e, attributions, width=400):
    cut = lambda s: s if len(s) <= width else s[:width] + f" ...[{len(s) - width} more chars]"
    print(f"=== {e.problem['id']} ({e.problem['domain']}) -- {len(e.turns)} turn(s), {e.stopped}")
    for turn, att in zip(e.turns, attributions):
        for role, resp in turn.responses.items():
            print(f"--- turn {turn.t + 1} · {ROLE_NAMES[role]} ({len(resp.tokens)} tokens)\n{cut(resp.text)}")
        shown = {k: v for k, v in turn.artefacts.items() if k != "derivation"}
        print(f"--- environment: {'AGREE' if turn.agree else 'MISMATCH'} {shown}")
        print(f"--- verifier, teacher-only ({att.outcome}):\n{att.description}")
    print(f"=== submitted: {e.final!r}\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description="Run two-agent episodes with the student models and print them.")
    ap.add_argument("--problems", default="examples/problems.jsonl", help="JSONL problem file (schema: data.py)")
    ap.add_argument("--model", default="tiny-qwen3", help="tiny-qwen3 | tiny-llama | local dir | .gguf | hub id "
                    "(in every seat)")
    ap.add_argument("--max-turns", type=COUNT, default=4)
    ap.add_argument("--max-new-tokens", type=COUNT, default=96)
    ap.add_argument("--temperature", type=bounded(float, 0), default=1.0, help="0 = greedy")
    ap.add_argument("--top-p", type=bounded(float, 0, 1, low_open=True), default=1.0)
    ap.add_argument("--top-k", type=bounded(int, 0), default=0, help="0 = off")
    ap.add_argument("--math-final", choices=("reasoner", "tool_user"), default="reasoner")
    ap.add_argument("--seed", type=SEED, default=0)
    ap.add_argument("--out", help="also write the episodes as JSONL here")
    args = ap.parse_args(argv)
    print("config:", vars(args))
    stop_on_sigterm()
    cfg = rollout_config(args, progress=True)
    try:
        if args.out:
            check_writable(args.out, "--out")  # before the run, not after it
        problems = load_problems(args.problems)
        model, tok = load_model(args.model, seed=args.seed)
        check_prompt_limit(problems, tok, cfg.max_prompt_tokens)
    except (ProblemError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    torch.manual_seed(args.seed)
    gen = torch.Generator(device=next(model.parameters()).device).manual_seed(args.seed)
    roles = {r for p in problems for r in ROLES[p["domain"]]}
    if args.out:
        open(args.out, "w").close()

    def done(e):  # each transcript as its episode stops, while the others go on (the progress line cleared)
        with tqdm.external_write_mode():
            print_transcript(e, [attribute_turn(e.problem, t.artefacts, timeout=cfg.code_timeout) for t in e.turns])
        if args.out:
            append_episodes(args.out, [e])
    episodes = run_episodes(problems, {r: model for r in roles}, tok, cfg, generator=gen, on_done=done)
    if args.out:
        print(f"wrote {len(episodes)} episodes to {args.out}")


if __name__ == "__main__":
    main()
