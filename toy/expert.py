"""The toy world's teacher: a hand-written language model that is right on every prefix.

What it stands for. The paper's teacher is a far stronger model (Qwen3-14B) that prices *any* prefix sensibly. A
small teacher fine-tuned on oracle trajectories cannot: it has never seen the prefixes the students produce, and
distilling it made the toy students worse. This one is written by hand. It reads the teacher context exactly as
teacher.py renders it (the role condition, the problem text, the history the student saw, and the verdicts of
completed turns when PAC is on) and the response prefix, and puts its mass on what an expert of that role would
write next *from that prefix*: it knows the toy world's arithmetic and response formats. It reads nothing the
paper's teacher does not get: no reference answer, no golden test, no hidden field of the problem; the values it
prefers are computed from the question's text, as a competent model would.

How it decides. After a conflict it keeps or revises as the verdict on the previous turn says (PAC); without a
verdict it is at chance (w/o PAC): nothing in the students' own view tells it who is at fault. A revision is a
fresh artefact or, for the roles that compute (Tester, Reasoner), taking over what the program printed, which it
prefers when the verdict clears the program.

How its role conditions differ (RAS). Under the contrast condition kappa(r) it answers in seat r's format but
takes kappa(r)'s side: it answers for kappa(r)'s kind of artefact, revising when the verdict blames that one, and,
since that artefact is kappa(r)'s core duty, nearly always does that part of the work too. Under its own role's
condition it follows the condition only partly, like a language model: half its responses also do the teammate's
part (the whole job, as the role-blind students do). So A^role = l^(r) - l^(kappa r) is positive on the decision
the verdict asks of role r itself (keeping its work when the teammate is at fault, revising when it is), large and
positive where a response ends its own work without the teammate's, slightly negative where the teammate's part
begins, and zero elsewhere: plain OPD (lambda = 0) leaves the whole-job habit as it is, only RAS specialises the
roles. It is as sure as an expert (SURE, DECIDE): on-policy distillation pulls a student towards the teacher's
whole distribution.

How it is a language model. Each candidate response is a *plan*: literal text and number slots with a preferred
value. The teacher is the Bayesian mixture of its plans: each plan predicts the next characters from the prefix
(a wrong number ends its slot and the plan goes on with the text after it, so closing a program the student began
is never penalised), the plans' weights follow how well they predicted the prefix so far, and a small uniform share
keeps every token possible. What it cannot show: anything about a learned teacher's errors or about scale.

base_model() returns log-probabilities as "hidden states" and get_output_embeddings() is the identity, so
sampler.sequence_logprobs and teacher.score use it unchanged.
"""

import functools
import math
import re
import warnings
from types import SimpleNamespace

import torch
from torch import nn

from prompts import ANSWER_FMT, ROLE_NAMES
from teacher import KAPPA, ROLE_CONDITIONS
from toy.world import FIRST, NOUN, calc, question_spec, value_of

DECIDE = 0.97  # P(keep) or P(revise) when the verdict names the side at fault (PAC)
# share of its responses that also do the teammate's part: under the seat's own condition
TEAMMATE_WORK = 0.5
# ... and under the contrast condition kappa(r), whose core duty that part is
CONTRAST_WORK = 1 - 1e-4
SMOOTH = 1e-3  # share of each plan's mass spread over every token
# its confidence in a digit of its own arithmetic, and in where a number ends
SURE = 0.99
# a Tool-User's share of programs that print the value rather than compute it
PRINT_VALUE = 0.2
# P(adopt what the program printed | revise) when the verdict clears the program
ADOPT = 0.9
# share of a continuation's mass on the tokenizer's own first token for it
CANONICAL = 0.99
DIGITS = "0123456789"
FAULT = {
    "coder": ("in the program", "in both", "at least in the program"),
    "tester": ("in the test case", "in both"),
    "reasoner": ("in the derivation", "in both"),
    "tool_user": ("in the program's computation", "in both"),
}


def lit(text):
    return ("lit", text)


def num(value):
    """A number slot. value: the preferred digits, a function of the earlier slots' fills, or None (any digit)."""
    return ("num", value)


# --------------------------------------------------------------------------------------------- the plans


def fresh(role, question):
    """Parts of a right first-turn artefact of `role` for the toy question (its own arithmetic, from the text)."""
    spec = question_spec(question)
    a, op, b = spec
    side = lambda k: lit("x") if k is None else num(str(k))
    if role == "coder":
        return [
            lit("Code:\n```python\nx = int(input())\nprint("),
            side(a),
            lit(f" {op} "),
            side(b),
            lit(")\n```"),
        ]
    if role == "tester":
        out = lambda fills: (
            str(value_of(spec, int(fills[-1])))
            if fills and fills[-1].isdigit()
            else "0"
        )
        return [
            lit("Test Input:\n```\n"),
            num(None),
            lit("\n```\nTest Output:\n```\n"),
            num(out),
            lit("\n```"),
        ]
    v = str(calc(a, op, b))
    if role == "reasoner":
        return [
            lit("Reasoning Steps: "),
            num(str(a)),
            lit(f" {op} "),
            num(str(b)),
            lit(" = "),
            num(v),
            lit("\n#### "),
            num(v),
        ]
    return [
        lit("Code:\n```python\nprint("),
        num(str(a)),
        lit(f" {op} "),
        num(str(b)),
        lit(")\n```"),
    ]


def artefacts(role, question):
    """[(prior, parts)] of the artefacts an expert of `role` writes afresh; a Tool-User may also print the value
    it worked out instead of the expression (PRINT_VALUE of its mass), so closing `print(8` is never a surprise."""
    if role != "tool_user":
        return [(1.0, fresh(role, question))]
    return [
        (1 - PRINT_VALUE, fresh(role, question)),
        (
            PRINT_VALUE,
            [
                lit("Code:\n```python\nprint("),
                num(str(value_of(question_spec(question)))),
                lit(")\n```"),
            ],
        ),
    ]


def adopted(role, last):
    """The revision of a computing role that takes over what the program printed last turn, read from `last`, that
    turn's history entry: the Reasoner the printed result, the Tester the program's output for its own test input.
    None for the other roles, or when nothing usable was printed."""
    if role == "reasoner":
        m = re.search(r"It printed: (-?\d+)\n", last)
        return m and [
            lit("Reasoning Steps: I adopt the printed result.\n#### "),
            num(m.group(1)),
        ]
    if role == "tester":
        m = re.search(
            r"Your test input:\n```\n(-?\d+)\n```.*The program's output:\n```\n(-?\d+)\n```",
            last,
            re.S,
        )
        return m and [
            lit(f"Test Input:\n```\n{m.group(1)}\n```\nTest Output:\n```\n"),
            num(m.group(2)),
            lit("\n```"),
        ]
    return None


def kept(role, last):
    """The seat's own artefact of the last turn, as a literal, from `last`, that turn's history entry; None if it
    had none."""
    if role in ("coder", "tool_user"):
        m = re.search(r"Your program:\n```python\n(.*?)```", last, re.S)
        return (
            None
            if m is None or "(no program" in m.group(1)
            else [lit(f"Code:\n```python\n{m.group(1)}```")]
        )
    if role == "tester":
        m = re.search(
            r"Your test input:\n```\n(.*?)```\nYour expected output:\n```\n(.*?)```",
            last,
            re.S,
        )
        if m is None or "(no test case" in m.group(1):
            return None
        return [
            lit(
                f"Test Input:\n```\n{m.group(1)}```\nTest Output:\n```\n{m.group(2)}```"
            )
        ]
    m = re.search(r"Your derivation:\n(.*?)\nYour answer: ", last, re.S)
    if m is None or "####" not in m.group(1):
        return None
    # no appended program
    text = re.sub(r"^I (keep|revise) my answer\.\n", "", m.group(1)).split("\nCode:")[0]
    return [lit(text)]


OWN_VALUES = {  # the seat's own values in its history entry, as its line of a larger team's verdict shows them
    "coder": r"Your program's output:\n```\n(.*?)```",
    "tester": r"Your test input:\n```\n(.*?)```\nYour expected output:\n```\n(.*?)```",
    "reasoner": r"Your answer: (.*)\n",
    "tool_user": r"It printed: (.*)\n",
}


def conclusion_of(seat, verdict, last):
    """The conclusion line of a verdict as the seat reads it. A pair's c^t concludes in its last line. A larger
    team's has one line per agent (Eq. 24, DECISIONS.md D15): the seat finds its own agent's line by the values it
    produced (`last`, its history entry of that turn: the same agent has no other name in its context), and reads
    a fault in its own artefact from it and in its teammates' from the other role's lines, as a pair's conclusion
    would name them ("in the program", "in the test case", "in both")."""
    # without the header line
    lines = [x for x in verdict.split("\n") if x.startswith("- ")]
    if len(lines) == 2:
        return lines[-1]
    mate = KAPPA[seat]
    mine = [x for x in lines if x.startswith(f"- {ROLE_NAMES[seat]} ")]
    values = [
        v
        for m in re.findall(OWN_VALUES[seat], last)
        for v in ((m,) if isinstance(m, str) else m)
    ]
    own = next(
        (x for x in mine if all(repr(v) in x for v in values)), mine[0] if mine else ""
    )
    faulty = {
        r
        for r, ls in (
            (seat, [own]),
            (mate, [x for x in lines if x.startswith(f"- {ROLE_NAMES[mate]} ")]),
        )
        if any(
            "does not" in x
            or "no program" in x
            or "no test case" in x
            or "no answer" in x
            for x in ls
        )
    }
    return (
        "in both"
        if len(faulty) == 2
        else FAULT[faulty.pop()][0]
        if faulty
        else "no fault"
    )


def own_plans(seat, cond, question, history):
    """[(prior, parts)] of the seat's own artefact, after the decision line on later turns: fresh at turn 0;
    afterwards keep or revise as the last verdict says (PAC), at chance without one (Eq. 12). The decision is the
    one role `cond` would take: it revises when the verdict blames cond's own kind of artefact."""
    if history is None:
        return artefacts(seat, question)
    verdicts = history.split("Verification result for the previous turn:")
    last = history.split("\nTurn ")[-1]  # the previous turn's entry
    conclusion = (
        conclusion_of(seat, verdicts[-1].split("\n\n")[0].strip(), last)
        if len(verdicts) > 1
        else None
    )
    p_revise = (
        0.5
        if conclusion is None
        else DECIDE
        if any(f in conclusion for f in FAULT[cond])
        else 1 - DECIDE
    )
    keep, adopt = kept(seat, last), adopted(seat, last)
    if keep is None:
        p_revise = 1.0
    if adopt is None:
        p_adopt = 0.0
    elif conclusion is None:
        p_adopt = 0.5
    else:  # the verdict clears the program when it blames only this seat
        p_adopt = ADOPT if FAULT[seat][0] in conclusion else 1 - ADOPT
    opening = lambda word: [lit(f"I {word} my {NOUN[seat]}.\n")]
    out = [
        (p_revise * (1 - p_adopt) * w, opening("revise") + parts)
        for w, parts in artefacts(seat, question)
    ]
    if p_adopt:
        out.append((p_revise * p_adopt, opening("revise") + adopt))
    if keep is not None:
        out.append((1 - p_revise, opening("keep") + keep))
    return out


def plans(context):
    """[(prior, parts)] for the teacher context u~ (text, Eq. 12 / Eq. 23): who speaks, under which role
    condition, after what history and verdicts; each own plan alone or as the whole job, with the teammate's
    artefact in the workflow's order (its share depends on the role condition, see the module docstring)."""
    seat = next(r for r in ANSWER_FMT if ANSWER_FMT[r] in context)
    cond = next(r for r in ROLE_CONDITIONS if ROLE_CONDITIONS[r] in context)
    question = context.split("Problem:\n", 1)[1].split("\n\n", 1)[0]
    history = (
        context.split("History of the earlier turns:\n", 1)[1]
        if "History of the earlier turns:" in context
        else None
    )
    share = TEAMMATE_WORK if cond == seat else CONTRAST_WORK
    mate = fresh(KAPPA[seat], question)
    first = seat in FIRST.values()
    out = []
    for w, parts in own_plans(seat, cond, question, history):
        opening, body = (parts[:1], parts[1:]) if history is not None else ([], parts)
        whole = body + [lit("\n")] + mate if first else mate + [lit("\n")] + body
        out += [(w * (1 - share), parts), (w * share, opening + whole)]
    return out


def render(parts, fills):
    """The text of `parts` with each number slot at its preferred value (any digit: 0), given earlier fills."""
    done, text = list(fills), ""
    for kind, value in parts:
        if kind == "num":
            value = (value(done) if callable(value) else value) or "0"
            done.append(value)
        text += value
    return text


def continuations(parts, s):
    """Where prefix s stands in a plan -> [(the plan's text from there, or None for the end of the response,
    probability)]. The whole remaining text is returned because one token may span several literal parts."""
    i, fills = 0, []
    for pi, (kind, value) in enumerate(parts):
        rest = parts[pi + 1 :]
        if kind == "lit":
            n = 0
            while n < len(value) and i + n < len(s) and s[i + n] == value[n]:
                n += 1
            if i + n == len(s) and n < len(value):
                return [(value[n:] + render(rest, fills), 1.0)]
            if n < len(value):
                return [(recover(parts, fills, s), 1.0)]
            i += n
            continue
        j = i
        while j < len(s) and (s[j].isdigit() or (j == i and s[j] == "-")):
            j += 1
        pref = value(fills) if callable(value) else value
        if j < len(s):
            fills.append(s[i:j])
            i = j
            continue
        written = s[i:j]
        after = render(rest, fills + [written]) or None
        if pref is None:  # any digit, once
            return (
                [(d + render(rest, fills + [d]), 0.1) for d in DIGITS]
                if not written
                else [(after, 1.0)]
            )
        # its own next digit, or (arithmetic is not certain) another
        if pref.startswith(written) and written != pref:
            go_on = pref[len(written) :] + render(rest, fills + [pref])
            return [(go_on, SURE)] + [
                (d, (1 - SURE) / 9) for d in DIGITS if d != go_on[0]
            ]
        # done, or wrong: the plan goes on after it
        return [(after, SURE)] + [(d, (1 - SURE) / 10) for d in DIGITS]
    return [(None, 1.0)]  # the plan is complete


def recover(parts, fills, s):
    """A prefix that left the plan inside its text: continue where the end of s occurs in the plan's text (the
    longest such ending, at least two characters), else finish with the plan's closing text (what follows its
    last number), so that closing what the student began is what the teacher expects. None = end now."""
    text = "".join(
        value if kind == "lit" else fill
        for (kind, value), fill in _with_fills(parts, fills)
    )
    for m in range(min(len(s), 40), 1, -1):
        j = text.rfind(s[-m:])
        if j >= 0:
            return text[j + m :] or None
    closing = parts[-1][1] if parts[-1][0] == "lit" else ""
    for m in range(len(closing), 0, -1):
        if s.endswith(closing[:m]):
            return closing[m:] or None
    return closing or None


def _with_fills(parts, fills):
    """Pairs (part, what the student wrote in it or its preferred value) for number slots, in order."""
    written, done = iter(fills), []
    for kind, value in parts:
        fill = None
        if kind == "num":
            fill = (
                next(written, None)
                or (value(done) if callable(value) else value)
                or "0"
            )
            done.append(fill)
        yield (kind, value), fill


class HandTeacher(nn.Module):
    """The hand-written toy teacher (module docstring) over `tokenizer`'s vocabulary: the frozen pi_T whose
    log-probabilities l_k (Eq. 7) teacher.score reads on u~ (Eq. 12) and its contrast (Eq. 23)."""

    def __init__(self, tokenizer):
        super().__init__()
        self.tok, self.V = tokenizer, len(tokenizer)
        # The identity as a sparse (CSR) matrix: the LM head's product then costs V multiplies a position, not V^2,
        # and is the same exact copy of each log-probability (x * 1 = x; the dense one added exact zeros).
        self.head = nn.Linear(self.V, self.V, bias=False, device="meta")
        # torch calls its sparse CSR support beta; the identity needs little of it
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Sparse CSR tensor support", UserWarning)
            self.head.weight = nn.Parameter(
                torch.eye(self.V).to_sparse_csr(), requires_grad=False
            )
        self.pieces = [tokenizer.decode([i]) for i in range(self.V)]
        self.eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.think_end = tokenizer.convert_tokens_to_ids("</think>")
        self.after_think = len(tokenizer("\n\n", add_special_tokens=False)["input_ids"])
        self.by_first = {}
        for i, p in enumerate(self.pieces):
            if p and i != self.eos:
                self.by_first.setdefault(p[0], []).append(i)

    def get_output_embeddings(self):
        return self.head

    @functools.lru_cache(maxsize=65536)
    def _token_mass(self, text):
        """{token id: share} of a continuation's mass: the tokenizer's own first token for the text, and any
        other token the text begins with."""
        if not text:
            return {}
        fits = [
            i for i in self.by_first.get(text[0], ()) if text.startswith(self.pieces[i])
        ]
        first = self.tok(text, add_special_tokens=False)["input_ids"][0]
        mass = {i: (1 - CANONICAL) / len(fits) for i in fits}
        mass[first] = mass.get(first, 0.0) + CANONICAL
        return mass

    def _next(self, parts, s):
        """Sparse next-token distribution of one plan after prefix s."""
        out = {}
        for text, q in continuations(parts, s):
            if text is None:
                out[self.eos] = out.get(self.eos, 0.0) + q
            else:
                for i, share in self._token_mass(text).items():
                    out[i] = out.get(i, 0.0) + q * share
        return out

    def response_logprobs(self, context, response):
        """(len(response), V) log-probabilities of the next token at each response position: l_k of Eq. 7 for
        every candidate token."""
        mixture = plans(context)
        # float64 sums in Python floats (a tensor's element updates cost microseconds each), the same IEEE sums
        log_w = [math.log(max(w, 1e-12)) for w, _ in mixture]
        rows, s = [], ""
        for tok in list(response) + [None]:
            w = torch.softmax(torch.tensor(log_w, dtype=torch.float64), 0)
            row = [SMOOTH / self.V] * self.V
            per_plan = []  # (next-token masses, their total) of each plan
            for (_, parts), wp in zip(mixture, w.tolist()):
                nxt = self._next(parts, s) or {self.eos: 1.0}
                total = sum(nxt.values())
                per_plan.append((nxt, total))
                for i, q in nxt.items():
                    row[i] += (1 - SMOOTH) * wp * q / total
            rows.append(row)
            if tok is None:
                break
            # Bayes: each plan's weight times what it gave this token
            for k, (nxt, total) in enumerate(per_plan):
                log_w[k] += math.log(
                    (1 - SMOOTH) * nxt.get(tok, 0.0) / max(total, 1e-12)
                    + SMOOTH / self.V
                )
            s += self.pieces[tok]
        return torch.tensor(rows[:-1], dtype=torch.float64).reshape(-1, self.V).log()

    def base_model(self, input_ids, attention_mask):
        """(B, L) ids -> last_hidden_state (B, L, V): at the position before each response token, the teacher's
        log-probabilities of that token; elsewhere unset (never read). The response starts after the chat tail's
        '</think>\\n\\n'; the context before it is decoded to text and read by plans()."""
        B, L = input_ids.shape
        # not zeroed: (B, L, V) floats, and only response positions are read
        out = torch.empty(B, L, self.V)
        for b in range(B):
            ids = input_ids[b, : int(attention_mask[b].sum())].tolist()
            start = (
                len(ids) - 1 - ids[::-1].index(self.think_end) + 1 + self.after_think
            )
            lp = self.response_logprobs(self.tok.decode(ids[:start]), ids[start:])
            out[b, start - 1 : start - 1 + len(lp)] = lp.float()
        return SimpleNamespace(last_hidden_state=out.to(self.head.weight.device))
