"""Why MAS-OPD does or does not help in the toy world: the three measurements behind the README's "Why" list.

    python -m toy.diagnose                                     # the untrained toy students
    python -m toy.diagnose --checkpoint runs/toy/checkpoint    # policies trained by `python -m toy`

1. turns: per role and turn, the artefacts the verifier checks as right in one evaluation pass on the held-out
   split. It tells a team that coordinates from one that is right only where an answer swap happens to stop.
2. openings: the probability that a student's first token begins the right move in the state that decides
   held-out math (previous turn: Reasoner wrong, Tool-User right): the Tool-User keeps, the Reasoner adopts.
3. advantages: the teacher's A^OPD (Eq. 8) on the students' own samples of training problems, summed by role,
   turn 0 or later, and token kind (the opening token, digits, the rest): where the distillation signal sits.
"""
import argparse
import os
import random
from collections import defaultdict

import torch

from attribution import verdicts_before
from eval import EVAL_DECODING, WRONG_CHECK, load_policies, run_team
from loss import opd_advantage
from models import load_model
from rollout import ROLES, RolloutConfig, build_context
from teacher import score, teacher_contexts
from toy.world import ROLE_BLIND, build_toy, simulate, toy_problems

OPENINGS = {"tool_user": "I keep my program.", "reasoner": "I revise my answer.\nReasoning Steps: I adopt"}


def turn_table(problems, policies, tok, seed, cfg):
    """{role: [[right, n] at turn 0, [right, n] at turn 1, ...]} over one run_episodes pass (eval.run_team): the
    per-turn view behind revise-iff-wrong and turns to agreement (§4.4, Fig. 4)."""
    episodes, atts = run_team(problems, policies, tok, seed, cfg)
    table = defaultdict(list)
    for e in episodes:
        for t, a in enumerate(atts[id(e)]):
            for r in ROLES[e.problem["domain"]]:
                row = table[r]
                row.extend([0, 0] for _ in range(t + 1 - len(row)))
                row[t][0] += bool(a.checks[WRONG_CHECK[r]])
                row[t][1] += 1
    return dict(table)


@torch.no_grad()
def opening_probabilities(policies, tok, problems, n=120, seed=0):
    """{role: mean probability} that the first token of the role's turn-1 response begins OPENINGS[role], over n
    simulated role-blind states (student contexts) whose turn 0 had the Reasoner wrong and the Tool-User right.
    Only whole first tokens count (the phrase tokenizer writes each opening as one token). The decision that
    revise-iff-wrong scores (§4.4, Fig. 4a), read from the policy instead of from sampled episodes."""
    rng, states = random.Random(seed), []
    math = [p for p in problems if p["domain"] == "math"]
    while len(states) < n:
        p = rng.choice(math)
        turns = simulate(p, ROLE_BLIND, rng)
        if len(turns) > 1 and not turns[0].checks["reasoner"] and turns[0].checks["tool_user"]:
            states.append((p, turns[:1]))
    vocab = [tok.decode([i]) for i in range(len(tok))]
    out = {}
    for role, opening in OPENINGS.items():
        hits = torch.tensor([v.startswith(opening) for v in vocab])                      # (V,)
        model, total = policies[role], 0.0
        for p, turns in states:
            ids = torch.tensor([[i for s in build_context(tok, p, role, turns) for i in s.ids]])  # (1, T)
            probs = model(input_ids=ids).logits[0, -1].float().softmax(-1)                # (V,)
            total += probs[hits].sum().item()
        out[role] = total / len(states)
    return out


def advantage_breakdown(policies, teacher, tok, problems, seed=0):
    """{(role, 'turn 0' | 'later', 'opening' | 'digit' | 'other'): [sum of A^OPD (Eq. 8), tokens]} on the
    students' samples (training temperature 1) of `problems`; the teacher scores each response under its own role
    with the verdicts of earlier turns (PAC, Eq. 12), as train.py does."""
    cfg = RolloutConfig(max_new_tokens=48, temperature=1.0, top_p=1.0, top_k=0)
    episodes, atts = run_team(problems, policies, tok, seed, cfg)
    items = [(e, t, r, x) for e in episodes for t in e.turns for r, x in t.responses.items()]
    ctxs = [teacher_contexts(tok, x.context, (r,), verdicts_before(atts[id(e)], t.t))[0] for e, t, r, x in items]
    out = defaultdict(lambda: [0.0, 0])
    for (e, t, r, x), lp_t in zip(items, score(teacher, ctxs, [x.tokens for *_, x in items])):
        a_opd = opd_advantage(lp_t.float(), torch.tensor(x.logprobs))                     # (L,) Eq. 8
        for k, tid in enumerate(x.tokens):
            text = tok.decode([tid]).strip().lstrip("-")
            kind = "opening" if k == 0 else "digit" if text.isdigit() else "other"
            key = (r, "turn 0" if t.t == 0 else "later", kind)
            out[key][0] += a_opd[k].item()
            out[key][1] += 1
    return dict(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Per-turn checks, opening probabilities and A^OPD by token kind "
                                 "(toy world).")
    ap.add_argument("--checkpoint", default=None, help="train.py's OUT/checkpoint (default: the untrained students)")
    ap.add_argument("--cache", default=".cache", help="where the toy models are built once")
    ap.add_argument("--seed", type=int, default=1000, help="evaluation seed of the turn table")
    ap.add_argument("--n", type=int, default=40, help="training problems per domain for the advantage breakdown")
    args = ap.parse_args(argv)
    print(f"config: {vars(args)}")
    roles = [r for rs in ROLES.values() for r in rs]
    root = build_toy(args.cache)
    teacher, tok = load_model(os.path.join(root, "teacher"))
    if args.checkpoint:
        policies = load_policies(args.checkpoint, roles, "cpu")[0]
    else:
        base = load_model(os.path.join(root, "student"))[0]
        policies = {r: base for r in roles}
    test, train = toy_problems("test"), toy_problems("train")
    cfg = RolloutConfig(max_new_tokens=48, **EVAL_DECODING)
    print("\n1. right artefacts per turn, held-out split (right/n at turn 1, 2, ...)")
    for role, row in turn_table(test, policies, tok, args.seed, cfg).items():
        print(f"  {role:9s} " + "  ".join(f"{r}/{n}" for r, n in row))
    print("\n2. probability of the right opening (previous turn: Reasoner wrong, Tool-User right)")
    for split, ps in (("train", train), ("held-out", test)):
        probs = opening_probabilities(policies, tok, ps)
        print(f"  {split:8s} " + "  ".join(f"{r} {OPENINGS[r].splitlines()[0]!r}: {p:.2f}" for r, p in probs.items()))
    print("\n3. teacher A^OPD on the students' samples of training problems: sum (tokens, mean)")
    rng = random.Random(0)
    pools = [[q for q in train if q["domain"] == d] for d in ("code", "math")]
    chosen = [p for pool in pools for p in rng.sample(pool, min(args.n, len(pool)))]
    for (role, when, kind), (s, n) in sorted(advantage_breakdown(policies, teacher, tok, chosen).items()):
        print(f"  {role:9s} {when:6s} {kind:7s} {s:9.1f}  ({n} tokens, {s / n:+.2f})")


if __name__ == "__main__":
    main()
