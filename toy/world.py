"""The toy world: problems, simulated agents and the cached build of a toy student and teacher, small enough
for MAS-OPD to run end to end on a laptop CPU (`python -m toy`).

What the toy world is. Synthetic problems small enough for models of ~0.2M parameters, run through the *same*
workflows, prompts, schema, sandbox, verifier, teacher and loss as the real path; only the tokenizer and the
model sizes differ. Code: "The input is one integer x. Print x times 17." (57 problems, stdin/stdout, golden
tests, a reference solution). Math: "What is 7 times 8?" (243 problems). A third of each is held out, so the
held-out problems need arithmetic facts no model here has seen: there, the roles that compute (Tester,
Reasoner) can only be right by adopting the value their teammate's program printed.

The agents start from models trained in code on simulated trajectories (the "pretraining" a real checkpoint
would bring), both of one shape (SHAPE):
  - the base student on role-blind behaviour in student-visible prompts: slips when copying or computing,
    deference after a conflict (revising whatever its own correctness, the Tester adopting the printed output,
    the Reasoner the printed result), and drift into the teammate's job (the Coder appending a test case, which
    also breaks its program's extraction; the Reasoner appending a program);
  - the teacher, fine-tuned from the base student, on oracle behaviour (revise iff wrong) rendered exactly as
    teacher.py renders teacher contexts: role condition in place of the opening line, verdicts after each
    earlier turn (half the time; the other half without, so it must also act without them), and, for a quarter
    of the examples, a contrast condition with the response the contrast role would write.

What it shows: the RAS and PAC mechanisms operating on real token-level teacher signals through the real code,
and their measured effect on accuracy, revise-iff-wrong and seat exchange (in this world they do not yet help;
the README's toy-world section gives what we measured and why; toy/diagnose.py measures most of it). What it cannot
show: anything about scale, natural-language reasoning, or real benchmarks. Nothing here gives the students a
verdict, a reference value or a role condition, nor the teacher a reference value: the simulator only shapes the
starting checkpoints.
"""
import copy
import json
import math
import os
import random
import re
from dataclasses import dataclass

import torch
from tokenizers import Tokenizer, decoders, models as bpe, pre_tokenizers, trainers
from tqdm import tqdm

from attribution import answers_equivalent, attribute_math, describe_code
from models import SPECIAL_TOKENS, hf_tokenizer, make_tokenizer, tiny_model
from rollout import (NO_CODE_BLOCK, ROLES, build_context, extract_answer, extract_program, extract_test_case,
                     printed_answer, stop_ids_of)
from sampler import generate, sequence_logprobs
from sandbox import ERROR, RunResult, is_error, outputs_match
from teacher import KAPPA, ROLE_CONDITIONS, teacher_contexts

def make_phrase_tokenizer(corpus, vocab_size=2048):
    """Byte-level BPE whose merges may cross spaces (whole template phrases become one token) but never touch
    a digit (numbers stay digit by digit, so arithmetic generalises). Any string still round-trips."""
    tok = Tokenizer(bpe.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False, max_token_length=256))
    return hf_tokenizer(tok)



# ---------------------------------------------------------------------------------------------- problems

OPS = {"+": "plus", "-": "minus", "*": "times"}


def calc(a, op, b):
    return a + b if op == "+" else a - b if op == "-" else a * b


def toy_problems(split):
    """'train' or 'test': disjoint, deterministic; in the project's problem schema (data.py)."""
    code = [{"id": f"code:x{op}{k}", "domain": "code", "format": "stdio",
             "question": f"The input is one integer x. Print x {OPS[op]} {k}.",
             "tests": [{"input": f"{x}\n", "output": f"{calc(x, op, k)}\n"} for x in (2, 5, 9)],
             "solution": f"x = int(input())\nprint(x {op} {k})\n"} for op in OPS for k in range(1, 20)]
    math = [{"id": f"math:{a}{op}{b}", "domain": "math", "question": f"What is {a} {OPS[op]} {b}?",
             "answer": str(calc(a, op, b))} for op in OPS for a in range(1, 10) for b in range(1, 10)]
    out, rng = [], random.Random(1234)
    for ps in (code, math):
        held = set(rng.sample(range(len(ps)), len(ps) // 3))
        out += [p for i, p in enumerate(ps) if (i in held) == (split == "test")]
    return out


def question_spec(question):
    """(a or None, op, b) of a toy question: code 'x op k' has a = None (x comes from stdin)."""
    m = re.search(r"(?:What is (\d+)|Print x) (plus|minus|times) (\d+)", question)
    op = {w: o for o, w in OPS.items()}[m.group(2)]
    return (int(m.group(1)) if m.group(1) else None), op, int(m.group(3))


# ------------------------------------------------------------------------------------- simulated agents

@dataclass
class Behaviour:
    err: float      # chance that a fresh artefact is wrong (an arithmetic or copying slip)
    defer: float    # after a conflict: chance to revise whatever its own correctness (the oracle: revise iff wrong)
    drift: float    # chance to append the teammate's kind of artefact
    oracle: bool = False


ORACLE = Behaviour(0.0, 0.0, 0.0, oracle=True)
ROLE_BLIND = Behaviour(err=0.3, defer=0.85, drift=0.2)


def _slip(v, rng):
    return v + rng.choice([-2, -1, 1, 2])


def _program(expr):
    return f"Code:\n```python\n{expr}\n```"


def _test(x, y):
    return f"Test Input:\n```\n{x}\n```\nTest Output:\n```\n{y}\n```"


def _run(program, stdin=""):
    """Output of a simulator-written program (trusted templates, so no sandbox: the real env is not involved
    in making training data). Anything unexpected prints nothing, as an empty or broken program would."""
    out, lines = [], iter(stdin.splitlines())
    try:
        exec(program, {"input": lambda: next(lines), "print": lambda *a: out.append(" ".join(map(str, a)))})
    except Exception as e:
        return f"{ERROR}{type(e).__name__}: {e}"
    return "".join(o + "\n" for o in out)


def _fresh(role, problem, b, rng):
    """A turn-0 (or revised) artefact: (response text, artefact values)."""
    a, op, k = question_spec(problem["question"])
    wrong = rng.random() < b.err
    if role == "coder":
        kk = _slip(k, rng) if wrong else k
        return _program(f"x = int(input())\nprint(x {op} {kk})"), None
    if role == "tester":
        x = rng.randint(0, 9)
        y = calc(x, op, k)
        return _test(x, _slip(y, rng) if wrong else y), None
    v = calc(a, op, k)
    if role == "reasoner":
        shown = _slip(v, rng) if wrong else v
        return f"Reasoning Steps: {a} {op} {k} = {shown}\n#### {shown}", None
    return _program(f"print({a} {op} {_slip(k, rng) if wrong else k})"), None


def _drift(role, problem, rng):
    """The teammate's kind of artefact, as a role-blind agent appends it (and the teacher under kappa writes it)."""
    a, op, k = question_spec(problem["question"])
    if role == "coder":
        x = rng.randint(0, 9)
        return _test(x, calc(x, op, k))
    if role == "tester":
        return _program(f"x = int(input())\nprint(x {op} {k})")
    if role == "reasoner":
        return _program(f"print({a} {op} {k})")
    return f"Reasoning Steps: {a} {op} {k} = {calc(a, op, k)}\n#### {calc(a, op, k)}"


def _correction(role, problem, last, rng):
    """The oracle's revision of a wrong artefact. Where the teammate's artefact was right, the Tester and the
    Reasoner take over the value that the program printed, as a careful agent would once it knows its own side
    is at fault; this needs no arithmetic, so it works on problems whose facts the model never learnt."""
    if role == "tester":
        a, op, k = question_spec(problem["question"])
        x = last.artefacts["test_input"].strip() if (last.artefacts["test_input"] or "").strip().isdigit() \
            else str(rng.randint(0, 9))
        return _test(x, last.artefacts["program_output"].strip() if last.checks["coder"] else calc(int(x), op, k))
    if role == "reasoner" and last.checks["tool_user"]:
        return f"Reasoning Steps: I adopt the printed result.\n#### {last.artefacts['program_answer'].strip()}"
    return _fresh(role, problem, ORACLE, rng)[0]


DRIFT_MARK = {"coder": "Test Input:", "tester": "Code:", "reasoner": "Code:", "tool_user": "Reasoning Steps:"}
NOUN = {"coder": "program", "tester": "test case", "reasoner": "answer", "tool_user": "program"}


def respond(role, problem, turns, b, rng, correct):
    """One response of `role` at turn len(turns) under behaviour b. correct: was its last artefact correct?"""
    if not turns:
        text = _fresh(role, problem, b, rng)[0]
    else:
        prev, agree_to = turns[-1].artefacts, None
        revise = (not correct) if b.oracle else (rng.random() < b.defer)
        printed = prev.get("program_output") or ""
        if revise and not b.oracle and role == "tester" and printed and not is_error(printed):
            agree_to = prev["program_output"].strip()  # deference: adopt what the program printed
            text = _test(prev["test_input"].strip(), agree_to)
        elif revise and not b.oracle and role == "reasoner" and not is_error(prev["program_answer"]):
            text = f"Reasoning Steps: I adopt the printed result.\n#### {prev['program_answer']}"
        elif revise and not b.oracle and role == "tool_user" and prev["derivation_answer"]:
            text = _program(f"print({prev['derivation_answer']})")
        elif revise and b.oracle:
            text = _correction(role, problem, turns[-1], rng)
        elif revise:
            text = _fresh(role, problem, b, rng)[0]
        else:  # keep: the same artefact again (the oracle without the teammate's work a drift appended)
            text = turns[-1].responses[role].split("\n", 1)[1] if turns[-1].responses[role].startswith("I ") \
                else turns[-1].responses[role]
            if b.oracle:
                text = text.split("\n" + DRIFT_MARK[role])[0]
        text = f"I {'revise' if revise else 'keep'} my {NOUN[role]}.\n" + text
    if rng.random() < b.drift:
        text = text + "\n" + _drift(role, problem, rng)
    return text


def step_env(problem, texts):
    """The environment of rollout.code_env / math_env, on simulator programs without a sandbox.
    Returns (artefacts in rollout's layout, agree, checks of each role's artefact)."""
    if problem["domain"] == "code":
        program, case = extract_program(texts["coder"]), extract_test_case(texts["tester"])
        out = _run(program, case[0]) if program and case else None
        artefacts = {"program": program, "test_input": case and case[0], "test_output": case and case[1],
                     "program_output": out}
        if program is None:
            artefacts["program_output"] = NO_CODE_BLOCK
        agree = out is not None and not is_error(out) and outputs_match("stdio", out, case[1])
        passes = program is not None and all(outputs_match("stdio", _run(program, t["input"]), t["output"])
                                             for t in problem["tests"])
        test_ok = case is not None and outputs_match("stdio", _run(problem["solution"], case[0]), case[1])
        return artefacts, agree, {"coder": passes, "tester": test_ok}
    program = extract_program(texts["tool_user"])
    printed = printed_answer(RunResult(_run(program), None)) if program else NO_CODE_BLOCK
    artefacts = {"derivation": texts["reasoner"], "derivation_answer": extract_answer(texts["reasoner"]),
                 "program": program, "program_answer": printed}
    agree = not is_error(printed) and answers_equivalent(artefacts["derivation_answer"], printed)
    return artefacts, agree, {"reasoner": answers_equivalent(artefacts["derivation_answer"], problem["answer"]),
                      "tool_user": not is_error(printed) and answers_equivalent(printed, problem["answer"])}


def verdict(problem, artefacts, checks):
    """c^t for a simulated turn, rendered by attribution.py exactly as for a real one."""
    if problem["domain"] == "math":
        return attribute_math(problem, artefacts["derivation_answer"], artefacts["program_answer"]).description
    case = None if artefacts["test_input"] is None else (artefacts["test_input"], artefacts["test_output"])
    return describe_code(artefacts["program"] is not None, case, artefacts["program_output"], checks["coder"],
                         checks["tester"]).description


@dataclass
class SimTurn:  # what rollout.build_context reads of a turn (artefacts), plus the simulator's own records
    artefacts: dict
    responses: dict   # role -> response text
    checks: dict      # role -> was its artefact correct
    verdict: str


def simulate(problem, b, rng, max_turns=4):
    """One episode of the workflow in which both agents follow behaviour b."""
    turns = []
    for _ in range(max_turns):
        texts = {r: respond(r, problem, turns, b, rng, turns[-1].checks[r] if turns else True)
                 for r in ROLES[problem["domain"]]}
        a, agree, checks = step_env(problem, texts)
        turns.append(SimTurn(a, texts, checks, verdict(problem, a, checks)))
        if agree:
            break
    return turns


def sft_examples(tok, problems, n, teacher, seed):
    """n (context ids, response ids) pairs from simulated episodes under role-blind behaviour.

    Students (teacher=False): the student-visible context and the role-blind response actually given there.
    Teacher (teacher=True): the teacher context of teacher.py (verdicts of earlier turns half the time) and the
    oracle response at that state; a quarter of the time the contrast condition kappa(r) with the response
    the contrast role would write."""
    rng, out, end = random.Random(seed), [], [stop_ids_of(tok)[0]]
    by_domain = [[p for p in problems if p["domain"] == d] for d in ("code", "math")]
    while len(out) < n:
        p = rng.choice(rng.choice([ps for ps in by_domain if ps]))  # domains equally often, whatever their sizes
        turns = simulate(p, ROLE_BLIND, rng)
        for t in range(len(turns)):
            for r in ROLES[p["domain"]]:
                segs = build_context(tok, p, r, turns[:t])
                if not teacher:
                    response = turns[t].responses[r]
                    ctx = [i for s in segs for i in s.ids]
                else:
                    verdicts = [x.verdict for x in turns[:t]] if rng.random() < 0.5 else None
                    crossed = rng.random() < 0.25
                    response = _drift(r, p, rng) if crossed else respond(
                        r, p, turns[:t], ORACLE, rng, turns[t - 1].checks[r] if t else True)
                    ctx = teacher_contexts(tok, segs, (KAPPA[r] if crossed else r,), verdicts)[0]
                out.append((ctx, tok(response, add_special_tokens=False)["input_ids"] + end))
    return out[:n]


def sft(model, examples, steps, batch=32, lr=3e-3, seed=0, desc="sft"):
    """Plain supervised fine-tuning on response tokens (sampler.sequence_logprobs with grad), AdamW, cosine decay.
    Batches hold examples of similar length (sorted, then shuffled as batches), so little compute goes to padding."""
    rng = random.Random(seed)
    ordered = sorted(examples, key=lambda e: len(e[0]) + len(e[1]))
    batches = [ordered[i:i + batch] for i in range(0, len(ordered), batch)]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))
    model.train()
    bar = tqdm(range(steps), desc=desc, leave=False)
    for step in bar:
        if step % len(batches) == 0:
            rng.shuffle(batches)
        chunk = batches[step % len(batches)]
        lps = sequence_logprobs(model, [c for c, _ in chunk], [r for _, r in chunk])
        loss = -torch.stack([lp.mean() for lp in lps]).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        bar.set_postfix(loss=f"{loss.item():.3f}")
    return model.eval()


TOY_VERSION = "toy-v5"  # bump when anything above (or the prompts, parsing or teacher contexts) changes what gets built
SHAPE = dict(hidden=64, layers=2, heads=4, kv_heads=2)


def build_toy(cache=".cache", student_steps=2000, teacher_steps=1000, seed=0):
    """Build the tokenizer, the base student and the teacher once; -> the directory holding student/ and
    teacher/ (save_pretrained, each with the tokenizer) and the problem files train.jsonl and test.jsonl, under
    cache/TOY_VERSION. Written to a temporary directory and renamed, so an interrupted build leaves nothing
    half-made.

    The base student learns the format, copying and some arithmetic from role-blind episodes (its
    "pretraining"). The teacher starts from that checkpoint and is then trained on oracle responses in teacher
    contexts: one family, like Qwen3-14B and Qwen3-1.7B, though not larger here (a larger one would need
    minutes more of CPU to learn what the base already knows; see README, toy world)."""
    root = os.path.join(cache, TOY_VERSION)
    if os.path.isdir(os.path.join(root, "student")):
        return root
    train = toy_problems("train")
    rng, corpus = random.Random(seed), []
    base = make_tokenizer()  # the tokenizer's own training text: rendered contexts and responses
    for p in train[::3]:
        turns = simulate(p, ROLE_BLIND, rng)
        for t in range(len(turns)):
            for r in ROLES[p["domain"]]:
                corpus.append(base.decode([i for s in build_context(base, p, r, turns[:t]) for i in s.ids]))
                corpus.append(turns[t].responses[r] + "\n" + turns[t].verdict)
    corpus += list(ROLE_CONDITIONS.values()) * 20
    tok = make_phrase_tokenizer(corpus)
    student = tiny_model("qwen3", vocab_size=len(tok), seed=seed + 2, **SHAPE)
    sft(student, sft_examples(tok, train, 4000, False, seed + 1), student_steps, desc="toy student")
    teacher = copy.deepcopy(student)
    sft(teacher, sft_examples(tok, train, 4000, True, seed), teacher_steps, desc="toy teacher")
    tmp = f"{root}.tmp{os.getpid()}"
    for name, model in (("teacher", teacher), ("student", student)):
        model.save_pretrained(os.path.join(tmp, name))
        tok.save_pretrained(os.path.join(tmp, name))
    for split in ("train", "test"):  # the problems as files, so train.py and eval.py read them like any others
        with open(os.path.join(tmp, f"{split}.jsonl"), "w") as f:
            f.writelines(json.dumps(p) + "\n" for p in toy_problems(split))
    os.makedirs(cache, exist_ok=True)
    os.replace(tmp, root)
    return root


def teacher_report(tok, teacher, problems, n=300, seed=0):
    """How well a toy teacher knows its world, measured on states of role-blind episodes of `problems`, with the
    teacher's greedy response under the teacher context of its own role (teacher.py). Percentages of:
      - fresh_<role>: turn-0 artefacts that the verifier checks as right;
      - decide_pac / decide_blind: after a disagreement, 'I keep' / 'I revise' openings that match
        revise-iff-wrong, with the verdicts of earlier turns in the context (PAC) and without them;
      - right_after_pac / right_after_blind: after a disagreement, artefacts that are right after the response.
    The gap between the PAC and blind figures is what PAC (§3.3, Eq. 12: verdicts in the teacher context only)
    can add in this world."""
    rng, stops = random.Random(seed), stop_ids_of(tok)
    jobs = []  # (kind, problem, role, turns, t, context)
    while len(jobs) < n:
        p = rng.choice(problems)
        turns = simulate(p, ROLE_BLIND, rng)
        t = rng.randrange(len(turns))
        for r in ROLES[p["domain"]]:
            segs = build_context(tok, p, r, turns[:t])
            if t == 0:
                jobs.append((f"fresh_{r}", p, r, turns, t, teacher_contexts(tok, segs, (r,))[0]))
            else:
                for kind, verdicts in (("pac", [x.verdict for x in turns[:t]]), ("blind", None)):
                    jobs.append((kind, p, r, turns, t, teacher_contexts(tok, segs, (r,), verdicts)[0]))
    out = generate(teacher, [j[5] for j in jobs], 48, temperature=0, stop_ids=stops)
    hits = {}
    for (kind, p, r, turns, t, _), ids in zip(jobs, out.tokens):
        text = tok.decode(ids, skip_special_tokens=True)
        right = step_env(p, {**turns[t].responses, r: text})[2][r]  # checks of one role ignore the other's text
        if kind.startswith("fresh"):
            hits.setdefault(kind, []).append(right)
        else:
            opening = "I revise" if not turns[t - 1].checks[r] else "I keep"
            hits.setdefault(f"decide_{kind}", []).append(text.startswith(opening))
            hits.setdefault(f"right_after_{kind}", []).append(right)
    return {k: round(100 * sum(map(bool, v)) / len(v), 1) for k, v in sorted(hits.items())}


# The toy preset: what 2 CPU cores finish in minutes at the toy models' size. The paper's values are train.py's
# defaults; the toy differs in steps, batch, learning rate (tiny models from scratch, not lr 1e-6) and lengths.
PRESET = ["--steps", "20", "--batch", "16", "--mini-batch", "8", "--micro-batch", "64", "--lr", "2e-4",
          "--max-new-tokens", "48"]


def train_args(root, out, learned_teacher=True):
    """train.py's arguments for the toy world built at `root` (build_toy), writing to `out`; without
    learned_teacher, no --teacher (the caller hands train.main a teacher object)."""
    teacher = ["--teacher", os.path.join(root, "teacher")] if learned_teacher else []
    return ["--problems", os.path.join(root, "train.jsonl"), "--student", os.path.join(root, "student"),
            "--out", out] + teacher + PRESET
