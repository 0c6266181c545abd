"""What every command does before its heavy imports (torch and transformers take seconds to load), and eval.py's
command line, which baselines/single.py shares: nothing here loads either, so that a command's --help and a refused
flag answer at once.

    from infra.cli import flags_first       # at the top of a command, its heavy imports after this block:
    if __name__ == "__main__":
        flags_first(get_args)               # Ctrl-C in one line from here on, then the flags read
"""

import signal
import sys

from config import (
    AGENTS_PER_ROLE,
    COUNT,
    PRECISIONS,
    PRESETS,
    SEED,
    add_unisolated_flag,
    apply_preset,
    bounded,
    command,
    default_device,
    device,
    parser,
    precision,
    preset_help,
)

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def flags_first(parse):
    """The first lines of a command, before its heavy imports: from here on SIGINT (Ctrl-C) and SIGTERM end it in
    one line and exit 130 or 143, no traceback, until a run's own handler takes over (infra/stopping.py); then
    parse() reads its flags, so that --help and a refused flag answer before torch loads. -> what parse returns"""
    for s in SIGNALS:
        # a signal ignored by who started us (nohup) stays so
        if signal.getsignal(s) is not signal.SIG_IGN:
            signal.signal(s, stopped)
    return parse()


def stopped(signum, frame):
    """flags_first's handler: one line on stderr, then SystemExit(128 + signal), so that every `finally` runs (a
    sandboxed program's is killed there). A second signal meanwhile kills at once, as the default would."""
    for s in SIGNALS:
        signal.signal(s, signal.SIG_DFL)
    name = signal.Signals(signum).name
    print(f"stopped by {name} before {command()} finished", file=sys.stderr, flush=True)
    raise SystemExit(128 + signum)


# --------------------------------------------------------------------------------------
# eval.py's command line (eval_parser, shared with python -m baselines.single; eval_args)


def eval_parser(description):
    """The flags of every evaluation command: the problems, the preset, the evaluation
    decoding, memory and speed, and where the figures go. -> (the parser, its first
    group, its output group): a command adds its own flags to them (what it evaluates,
    what else it writes) before parsing."""
    ap = parser(
        description=f"{description} Defaults in brackets; a (preset) flag "
        "lists each preset's value."
    )
    data = ap.add_argument_group("data and models")
    add = data.add_argument
    add("--problems", required=True, help="JSONL problem file (schema: infra/data.py)")
    add(
        "--preset",
        choices=sorted(PRESETS),
        default="paper",
        help="defaults of the flags marked "
        "(preset): the paper's, a first GPU run's, a first CPU run's, a small model's minutes "
        "(smol) or the toy world's "
        "(config.py, PRESETS); explicit flags win [%(default)s]",
    )
    add_unisolated_flag(add)
    add = ap.add_argument_group("sampling (evaluation decoding, App. D.5)").add_argument
    add(
        "--seeds",
        type=SEED,
        nargs="+",
        help=preset_help("seeds", "one evaluation per seed"),
    )
    add(
        "--max-new-tokens",
        type=COUNT,
        help=preset_help("max_new_tokens", "response limit"),
    )
    add(
        "--math-max-new-tokens",
        type=bounded(int, 0),
        help=preset_help(
            "math_max_new_tokens",
            "the math roles' response limit, 0 = "
            "--max-new-tokens (given alone, --max-new-tokens sets this to 0)",
        ),
    )
    add = ap.add_argument_group("memory and speed").add_argument
    add("--device", type=device, help="[cuda where torch sees a GPU, else cpu]")
    add(
        "--precision",
        choices=PRECISIONS,
        default=None,
        help="the weights' dtype while decoding; default: bf16 on GPU, fp32 on CPU",
    )
    add(
        "--rollout-chunk",
        type=bounded(int, 0),
        default=None,
        help="prompts per generate call, 0 "
        "= all (bounds the KV cache); default: the most that the memory plan fits on --device",
    )
    add(
        "--compile",
        action="store_true",
        help="compile the sampler's decode step (as train.py)",
    )
    add(
        "--threads",
        type=bounded(int, 0),
        help=preset_help("threads", "torch CPU threads; 0 = the free cores"),
    )
    out = ap.add_argument_group("output")
    add = out.add_argument
    add("--json", help="write all figures here")
    add("--episodes", help="append every run's episodes here as JSONL as each run ends")
    add(
        "--overwrite",
        action="store_true",
        help="replace the files this command writes where "
        "they exist (without it, an existing one is refused)",
    )
    return ap, data, out


def eval_args(argv=None):
    """eval.py's command line: eval_parser's flags, then what it evaluates (--run or
    --student, and a team's n), the heat map and the exchange; the preset applied."""
    ap, data, out = eval_parser(
        "Evaluate a trained or untrained team; the paper's metrics."
    )
    who = data.add_mutually_exclusive_group(required=True)
    who.add_argument("--run", help="a train.py output directory")
    who.add_argument("--student", help="untrained: this model in every seat")
    add = data.add_argument
    add(
        "--agents-per-role",
        type=COUNT,
        default=AGENTS_PER_ROLE,
        help="n: a team of 2n agents, n per role (App. E.1); with --run, the n it was "
        "trained with [%(default)s]",
    )
    add(
        "--teacher",
        help="the teacher of --heatmap, a model spec as for --student "
        "(required with --heatmap)",
    )
    add(
        "--teacher-max-prompt-tokens",
        type=COUNT,
        help=preset_help("teacher_max_prompt_tokens", "the heat map's teacher limit"),
    )
    add = out.add_argument
    add("--no-exchange", action="store_true", help="skip the seat-exchange evaluation")
    add("--heatmap", help="write the App. G.2 heat map (needs --teacher) here")
    args = ap.parse_args(argv)
    if args.heatmap and not args.teacher:
        ap.error("--heatmap needs --teacher, the model that scores the responses")
    apply_preset(args)
    args.device = args.device or default_device()
    args.precision = precision(args.precision, args.device)
    return args
