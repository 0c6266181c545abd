"""train.py's command line: `get_args`, the run's configuration as one argparse namespace, its flags in the groups
`--help` shows."""
import argparse
import sys

from infra.data import COUNT, PRESETS, SEED, apply_preset, bounded, preset_help
from infra.models import DEVICE, DTYPES, device, precision
from rollout import RolloutConfig


def get_args(argv=None):
    """The run's configuration, one argparse namespace: the paper's values as defaults (App. D.6.1, D.6.3), the
    scale-dependent flags from --preset where not given. Each default is typed once: the rollout's in
    RolloutConfig, the scale-dependent ones in data.PRESETS, the rest here; --help prints them in brackets."""
    ap = argparse.ArgumentParser(description="MAS-OPD training (Algorithm 1). Defaults in brackets; a (preset) flag "
                                 "lists each preset's value.",
                                 epilog="The laptop demo runs the toy world through this file: python -m toy")
    r = RolloutConfig()  # the source of every default the rollout shares with this command line
    add = ap.add_argument_group("data and models").add_argument
    add("--problems", required=True, help="JSONL problem file (schema: infra/data.py)")
    add("--student", required=True, help="tiny-qwen3 | tiny-llama | local dir | .gguf | hub id (paper: Qwen3-1.7B)")
    add("--teacher", help="(required, unless a program calling train.main hands it the teacher, as python -m toy "
        "does) same choices as --student, one tokenizer with it (paper: Qwen3-14B)")
    add("--eval-problems", default=None, help="held-out problems evaluated before and after training")
    add("--preset", choices=sorted(PRESETS), default="paper", help="defaults of the flags marked (preset): the "
        "paper's schedule and limits, a first run on one GPU, or a first CPU run of real models (infra/data.py, "
        "PRESETS); "
        "explicit flags win [%(default)s]")
    add("--seed", type=SEED, default=0, help="[%(default)s]")
    add = ap.add_argument_group("the paper's schedule (App. D.6.3)").add_argument
    add("--steps", type=COUNT, help=preset_help("steps"))
    add("--batch", type=COUNT, help=preset_help("batch", "problems (episodes) per step"))
    add("--mini-batch", type=COUNT, help=preset_help("mini_batch", "episodes per optimizer update"))
    add("--micro-batch", type=COUNT, help=preset_help("micro_batch", "responses per forward/backward (gradient "
                                                                     "accumulation)"))
    add("--lr", type=bounded(float, 0, low_open=True), help=preset_help("lr"))
    add("--weight-decay", type=bounded(float, 0), default=0.01, help="[%(default)s]")
    add("--grad-clip", type=bounded(float, 0, low_open=True), default=1.0, help="[%(default)s]")
    add = ap.add_argument_group("MAS-OPD (Eq. 10, PAC, policies)").add_argument
    add("--lam", type=bounded(float, 0), default=0.1, help="lambda of Eq. 10; 0 = w/o RAS [%(default)s]")
    add("--no-pac", action="store_true", help="teacher sees only the student-visible context (w/o PAC)")
    add("--shared-policy", action="store_true", help="one student in every seat")
    add = ap.add_argument_group("sampling (App. D.6.1, D.6.3)").add_argument
    add("--max-turns", type=COUNT, default=r.max_turns, help="T [%(default)s]")
    add("--max-new-tokens", type=COUNT, help=preset_help("max_new_tokens", "student response limit"))
    add("--math-max-new-tokens", type=bounded(int, 0), help=preset_help("math_max_new_tokens", "the math roles' limit, "
        "0 = --max-new-tokens (given alone, --max-new-tokens sets this to 0)"))
    add("--max-prompt-tokens", type=COUNT, help=preset_help("max_prompt_tokens", "student prompt limit"))
    add("--teacher-max-prompt-tokens", type=COUNT, help=preset_help("teacher_max_prompt_tokens",
                                                                    "teacher prompt limit"))
    add("--temperature", type=bounded(float, 0), default=r.temperature, help="[%(default)s]")
    add("--top-p", type=bounded(float, 0, 1, low_open=True), default=r.top_p, help="[%(default)s]")
    add("--top-k", type=bounded(int, 0), default=r.top_k, help="0 = off [%(default)s]")
    add = ap.add_argument_group("memory and speed").add_argument
    add("--precision", choices=tuple(DTYPES), default=None, help="default: bf16 on GPU, fp32 on CPU")
    add("--grad-checkpointing", action="store_true")
    add("--rollout-chunk", type=bounded(int, 0), default=r.rollout_chunk,
        help="prompts per generate call, 0 = all (bounds the KV cache) [%(default)s]")
    add("--teacher-batch-tokens", type=COUNT, default=16384, help="padded tokens per teacher forward [%(default)s]")
    add("--teacher-offload", action="store_true", help="keep the teacher on the CPU except while it scores")
    add("--compile", action="store_true", help="compile the sampler's decode step (fused kernels, for a GPU; the "
        "first rollout compiles for tens of seconds)")
    add("--device", type=device, default=DEVICE, help="[%(default)s]")
    add("--workers", type=COUNT, default=r.workers, help="sandbox runs at once [%(default)s]")
    add("--threads", type=bounded(int, 0), default=0, help="torch CPU threads; 0 = the cores other work leaves free "
        "[%(default)s]")
    add = ap.add_argument_group("output").add_argument
    add("--out", default="runs/default", help="metrics.jsonl and checkpoint/ go here [%(default)s]")
    add("--resume", action="store_true", help="continue from OUT/checkpoint")
    add("--save-every", type=COUNT, help=preset_help("save_every", "steps between checkpoints (and always at the "
                                                                   "end)"))
    add("--save-episodes", action="store_true", help="append each step's episodes to OUT/episodes.jsonl as the "
        "rollout ends (every response with its context, tokens, log-probs and the parsed artefacts)")
    add("--eval-seeds", type=SEED, nargs="+", help=preset_help("eval_seeds", "one evaluation of --eval-problems "
                                                                            "per seed"))
    add("--eval-exchange", action="store_true", help="evaluate each policy in its partner's seat too: the exchange "
        "penalty (Fig. 3a); doubles the evaluation's time")
    argv = sys.argv[1:] if argv is None else argv
    if not argv:  # a newcomer's first try: say where the demo is, not only which flags are missing
        ap.error("--problems and --student are required; the laptop demo (the toy world, nothing to download) is "
                 "python -m toy")
    args = ap.parse_args(argv)
    apply_preset(args)
    args.precision = precision(args.precision, args.device)
    return args
