"""The walk a reader takes through one step of Algorithm 1 for the paper's pair: every function of the paper's files
that runs in one train.train_step, and every support (a file outside the paper's) that one of them calls, with the
functions called there. Tiny random students and teacher; scripted agents sample Phase 1, so that programs run, the
agents disagree and the verdicts reach the teacher.

    python -m tools.walk

Measured as the code runs (sys.setprofile in every thread), so it counts what a step really reaches: a support that
only a variant or a larger run calls (teams/, baselines/, FSDP2) is not on the pair's path.
"""

from config import get_args, parser
from infra.cli import flags_first


def walk_args(argv=None):
    """python -m tools.walk's command line: no flags, only --help."""
    ap = parser(
        description="Every function of the paper's files, and of the supports they call, "
        "that one train_step of the pair runs (tiny random models, the example problems)."
    )
    return ap.parse_args(argv)


if __name__ == "__main__":  # flags first: --help and a refused flag answer before torch
    flags_first(walk_args)

import collections
import os
import sys
import threading

import torch

import train
from attribution import attribute_episodes
from infra.data import load_problems
from infra.launch import Start
from infra.models import make_tokenizer, tiny_model
from rollout import run_episodes
from sampler import Generation

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAPER = {
    "rollout",
    "prompts",
    "attribution",
    "teacher",
    "loss",
    "train",
    "config",
    "eval",
    "sampler",
}
# What each scripted agent answers every turn: a right program, a wrong test case, two answers that disagree.
SCRIPT = {
    "coder": "Code:\n```python\na, b = map(int, input().split())\nprint(a + b)\n```",
    "tester": "Test Input:\n```\n1 2\n```\nTest Output:\n```\n4\n```",
    "reasoner": "Reasoning Steps:\n3 + 4 = 7\n#### 7",
    "tool_user": "Code:\n```python\nprint(8)\n```",
}
UNNAMED = {"<lambda>", "<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>", "<module>"}


def scripted(tok, role):
    """A Phase 1 agent that answers SCRIPT[role] to every prompt (rollout.run_episodes takes any function)."""
    ids = tok(SCRIPT[role], add_special_tokens=False)["input_ids"] + [
        tok.convert_tokens_to_ids("<|im_end|>")
    ]
    return lambda prompts: Generation(
        [list(ids) for _ in prompts], [[-1.0] * len(ids) for _ in prompts]
    )


def module_of(path):
    """The project module a code object's file is ("infra.metrics"), or None outside the project and its tests."""
    rel = os.path.relpath(path, ROOT)
    if rel.startswith(("..", ".venv", "tests")) or not rel.endswith(".py"):
        return None
    return rel[:-3].replace(os.sep, ".").replace(".__init__", "")


def walk(steps_args):
    """({paper module: functions that ran}, {support module: functions a paper function called}) of one
    train_step on the example problems with steps_args (train.py's flags)."""
    args = get_args(steps_args)
    tok, problems = make_tokenizer(), load_problems(args.problems)
    roles = sorted(SCRIPT)
    policies = {r: tiny_model("qwen3", seed=i) for i, r in enumerate(roles)}
    optims = [torch.optim.AdamW(m.parameters(), lr=args.lr) for m in policies.values()]
    s = Start(
        problems,
        policies,
        tiny_model("qwen3", seed=9).eval(),
        tok,
        optims,
        torch.Generator().manual_seed(0),
        {r: scripted(tok, r) for r in roles},
        play=run_episodes,
        attribute=attribute_episodes,
    )
    paper, support = collections.defaultdict(set), collections.defaultdict(set)

    def seen(frame, event, _):
        if event != "call" or frame.f_code.co_name in UNNAMED:
            return
        callee = module_of(frame.f_code.co_filename)
        caller = frame.f_back
        while caller is not None and module_of(caller.f_code.co_filename) is None:
            # through the standard library's frames (a thread pool's worker)
            caller = caller.f_back
        if callee in PAPER:
            paper[callee].add(frame.f_code.co_name)
        elif (
            callee
            and caller is not None
            and module_of(caller.f_code.co_filename) in PAPER
        ):
            support[callee].add(frame.f_code.co_name)

    threading.setprofile(seen)
    sys.setprofile(seen)
    try:
        train.train_step(0, s, args)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return paper, support


def main():
    walk_args()
    examples = os.path.join(ROOT, "examples", "problems.jsonl")
    paper, support = walk(
        [
            "--problems",
            examples,
            "--student",
            "tiny-qwen3",
            "--teacher",
            "tiny-qwen3",
            "--batch",
            "4",
            "--mini-batch",
            "4",
            "--max-turns",
            "2",
            "--max-new-tokens",
            "48",
            "--lr",
            "1e-3",
            "--threads",
            "1",
            "--workers",
            "2",
        ]
    )
    functions = sum(map(len, paper.values())) + sum(map(len, support.values()))
    print(
        f"one train_step of the pair: {len(paper)} of the paper's files and {len(support)} supports, "
        f"{functions} functions"
    )
    for kind, modules in (("paper", paper), ("support", support)):
        for m in sorted(modules):
            print(f"  {kind:<8}{m}: {', '.join(sorted(modules[m]))}")


if __name__ == "__main__":
    main()
