"""The run's values in one place, top to bottom: the presets (the values whose right
size depends on the scale of a run), the values that do not (each typed here once, with
its source), then train.py's command line `get_args`. train.py, eval.py, rollout.py,
teacher.py, the tools and the toy world read their defaults from here; --help prints
them in brackets, a (preset) flag each preset's value."""

import argparse
import math
import re
import sys

# --------------------------------------------------------------------------------------
# Presets: the defaults of the flags whose right value depends on the scale of the run;
# every preset has a value for every key. A flag given explicitly always wins
# (apply_preset fills only flags left unset). train.py reads the training keys, eval.py
# `seeds` and the response limits; a key a command line lacks is skipped.
PAPER = dict(
    steps=150,  # App. D.6.1
    batch=128,  # App. D.6.1: problems (episodes) per step
    mini_batch=64,  # App. D.6.1: episodes per optimizer update, two updates per step
    micro_batch=8,  # ours: the paper fixes none (gradient accumulation changes memory, not math)
    lr=1e-6,  # App. D.6.1 (Adam: DECISIONS.md D9)
    max_new_tokens=4096,  # App. D.6.3: student response limit
    math_max_new_tokens=0,  # App. D.6.3: one limit for both domains (0 = max_new_tokens)
    max_prompt_tokens=8192,  # App. D.6.3: student prompt limit
    teacher_max_prompt_tokens=12288,  # App. D.6.3: teacher prompt limit
    lam=0.1,  # App. D.6.3: lambda of Eq. 10, in all reported runs
    # ours: a checkpoint of two 1.7B students is 38.5 GiB (fp32 weights + AdamW), so
    # every 10 steps, 15 in all, each replacing the last; a crash loses at most 10 steps
    save_every=10,
    eval_seeds=[1000],  # Table 1 caption: one evaluation per trained run
    eval_exchange=False,  # ours: the exchange penalty (Fig. 3a) doubles the evaluation's time
    unisolated_programs=False,  # ours: no run without the sandbox's jail (DECISIONS.md D11)
    seeds=[
        0,
        1,
        2,
        3,
        4,
    ],  # Table 1 caption: five evaluations of a prompt-only system (eval.py)
    threads=0,  # ours: torch's CPU threads, 0 = the cores other work leaves free
)
# A first run on one GPU (Qwen3-1.7B students, a Qwen3-8B or 14B teacher, one H200): the
# paper's recipe at 1/32 of its tokens per step and a third of its steps. Per step at
# most 16 episodes x 2 roles x 4 turns x 1,024 tokens = 131,072 sampled (the paper's 128
# x 2 x 4 x 4,096 is 4.2M). For two policies (a one-domain file) the plan (python -m
# tools.memory --gib 141) is 116.3 GiB with the 14B teacher, 104.0 with the 8B, in the
# 126.9 an H200 leaves usable; an 80 GiB card takes it with --optimizer-offload
# --teacher-offload (63.1). A mixed file's four policies fit an H200 with those two
# flags (95.2 GiB, 78.8 of host RAM).
GPU = dict(
    steps=50,  # ours: a third of the paper's
    batch=16,  # ours: each policy's generate call holds 16 prompts (no --rollout-chunk)
    mini_batch=8,  # ours: two updates per step, as the paper's 128 / 64
    micro_batch=2,  # ours: the update fits without gradient checkpointing
    lr=1e-6,  # App. D.6.1: the paper's
    # ours: the students answer without thinking (App. D.5), so 1,024 tokens hold most
    # answers (the cut ones show in metrics.jsonl, `stopped` and `format`)
    max_new_tokens=1024,
    math_max_new_tokens=0,  # App. D.6.3: one limit for both domains
    max_prompt_tokens=2048,  # ours: holds a problem and earlier turns
    # ours: the student's prompt and response with the teacher's additions
    teacher_max_prompt_tokens=3072,
    lam=0.1,  # App. D.6.3: the paper's
    save_every=10,  # ours: at most 10 steps lost, 5 checkpoints written
    eval_seeds=[1000],  # Table 1 caption
    eval_exchange=False,  # ours: as the paper preset
    unisolated_programs=False,  # ours: as the paper preset
    seeds=[0],  # ours: one evaluation of a first run
    threads=0,  # ours: as the paper preset
)
# A first run of real models on a CPU: every phase once or twice at short lengths, in
# minutes per step. The response limits come from measured responses of a small instruct
# model (SmolLM2-135M, evaluation decoding, limit 1,024, 8 + 8 problems, two turns;
# docs/cpu.md): each Coder program written was complete within 256 tokens, each Tester
# case within 290, 13 of 14 Tool-User programs within 256 (one 261), 10 of 16 Reasoner
# answers within 160 (most other responses looped to the limit). A 1.5B coder model that
# writes its analysis before its program was seen running past 256 inside the code
# block. So 512 for code and 256 for math, where a longer limit mostly buys longer
# loops.
CPU = dict(
    steps=2,  # ours: every phase twice
    batch=2,  # ours: one problem per domain
    mini_batch=2,  # ours: one update per step
    micro_batch=2,  # ours: one forward/backward per update
    lr=1e-6,  # App. D.6.1: the paper's
    max_new_tokens=512,  # ours: the code roles' measured responses (above)
    math_max_new_tokens=256,  # ours: the math roles' measured responses (above)
    max_prompt_tokens=2048,  # ours: as the gpu preset
    teacher_max_prompt_tokens=3072,  # ours: as the gpu preset
    lam=0.1,  # App. D.6.3: the paper's
    save_every=1,  # ours: a checkpoint every step
    eval_seeds=[1000],  # Table 1 caption
    eval_exchange=False,  # ours: as the paper preset
    unisolated_programs=False,  # ours: as the paper preset
    seeds=[0],  # ours: one evaluation of a first run
    threads=0,  # ours: as the paper preset
)
# A real small model through every phase in 8 minutes on 2 CPU cores, train.py and
# eval.py together: the README's SmolLM2-135M commands (2 GSM8K problems, 2 held out,
# --max-turns 2), where the cpu preset took 37 min; decoding is the time (docs/cpu.md).
# The cpu preset's values but these:
SMOL = dict(
    CPU,
    steps=1,  # ours: every phase once
    micro_batch=4,  # ours: half the step's 8 responses at once
    max_new_tokens=48,  # ours: 64 took 10 min here (docs/cpu.md)
    math_max_new_tokens=0,  # App. D.6.3: one limit for both domains
)
# The toy world (python -m toy, docs/toy.md): what 2 CPU cores finish in minutes at the
# toy models' size. It differs from the paper in steps, batch, learning rate (tiny
# models from scratch, not lr 1e-6), lambda and lengths.
TOY = dict(
    steps=100,  # ours: minutes on 2 CPU cores
    batch=16,  # ours: minutes on 2 CPU cores
    # ours: two updates per rollout batch, as the paper's 128 / 64: with four
    # (mini-batch 4) at this learning rate, one seed in three on the valid split saw a
    # student degenerate into junk tokens after ~55 steps, a state the sampled-token
    # estimator of Eq. 8 cannot leave (it only pushes down what was sampled)
    mini_batch=8,
    micro_batch=64,  # ours: a whole mini-batch (8 episodes x 2 roles x 4 turns) at once
    lr=3e-4,  # ours: tiny models from scratch
    max_new_tokens=64,  # ours: the toy world's short responses (toy/world.py)
    math_max_new_tokens=0,  # App. D.6.3: one limit for both domains
    max_prompt_tokens=PAPER[
        "max_prompt_tokens"
    ],  # the paper's: the toy's contexts are far shorter
    teacher_max_prompt_tokens=PAPER[
        "teacher_max_prompt_tokens"
    ],  # the paper's, as above
    # ours: lambda scales A^role against A^OPD, and this teacher is far surer than a 14B
    # model (toy/expert.py: DECIDE, SURE), so on a decision token A^OPD is a few nats
    # and 0.1 * A^role added a tenth to it. Chosen on the valid split (training seeds
    # 0-2, evaluation seeds 500-502): the exchange penalty (mean over the domains) was
    # 23 +- 1 at lambda 0, 29 +- 5 at 0.1, 34 +- 3 at 0.3, 41 +- 9 at 1, with no loss of
    # accuracy at 0.3; it grows with lambda as in the paper's Fig. 3b.
    lam=0.3,
    save_every=PAPER["save_every"],  # the paper's
    # ours: three seeds (one held-out problem is ~5 points, so one seed's figure moves
    # in steps of 5) and the exchange penalty, the coordination figure RAS is judged on;
    # 12 evaluation runs take about a minute here
    eval_seeds=[2000, 2001, 2002],
    eval_exchange=True,
    # ours: the toy student's programs are a 0.25M-parameter model's arithmetic prints,
    # and the demo must run on a new user's laptop without bubblewrap or root
    # (DECISIONS.md D11)
    unisolated_programs=True,
    seeds=[
        2000,
        2001,
        2002,
    ],  # ours: eval.py on a toy run, the seeds of train.py's evaluation
    # ours: the toy's figures follow the order of float sums, which the thread count
    # sets: with one thread they are the same at any load (with 0, an idle 2-core
    # machine's two threads trained other policies than a busy one's)
    threads=1,
)
PRESETS = {"paper": PAPER, "gpu": GPU, "cpu": CPU, "smol": SMOL, "toy": TOY}

# The values that do not depend on the scale of a run, typed here alone: train.py's
# defaults, RolloutConfig's (the rollout of rollout.py, train.py and eval.py), eval.py's
# decoding, teacher.py's and the sandbox's.
MAX_TURNS = 4  # T, turns per episode (App. D.6.1)
# training rollouts sample the full distribution: temperature 1.0, ... (App. D.6.1)
TEMPERATURE = 1.0
TOP_P = 1.0  # ... top-p 1.0, ...
TOP_K = 0  # ... top-k off (the paper's -1; 0 here)
# App. D.5
EVAL_DECODING = dict(temperature=0.6, top_p=0.95, top_k=20, max_turns=MAX_TURNS)
CODE_TIMEOUT = 30.0  # seconds of wall clock for a program in the sandbox (App. D.6.1)
MATH_TIMEOUT = 20.0  # seconds for the Tool-User's program (App. D.6.1)
# the answer a math episode submits when the roles never agree (DECISIONS.md D7)
MATH_FINAL = "reasoner"
WEIGHT_DECAY = 0.01  # App. D.6.1 (AdamW: DECISIONS.md D9)
GRAD_CLIP = 1.0  # grad-norm clip (App. D.6.1)
# ours: padded tokens per teacher forward (bounds the teacher's activations)
TEACHER_BATCH_TOKENS = 16384
WORKERS = 4  # ours: episodes whose sandboxed programs run at once
ROLLOUT_CHUNK = 0  # ours: prompts per generate call, 0 = all of a turn at once
GROUP_SIZE = 4  # G, rollouts per problem of the GRPO baselines (App. D.3, D.6.2)
# alpha, the local reward's weight beside the team reward (App. D.4, Eq. 14)
ALPHA = 1.0
# n: a team of 2n agents (App. E.1; the paper's main results use the pair, n = 1)
AGENTS_PER_ROLE = 1
# PAC's a^t: the verifier (§3.3), or an attribution model (App. E.1.3; DECISIONS.md D15)
ATTRIBUTION = "verifier"


def response_limit(cfg, domain):
    """The most tokens a student response of `domain` ("code" or "math") may have under
    `cfg` (a RolloutConfig or parsed args, App. D.6.3): math_max_new_tokens for the math
    roles where set (not 0), else max_new_tokens."""
    if domain == "math" and cfg.math_max_new_tokens:
        return cfg.math_max_new_tokens
    return cfg.max_new_tokens


def longest_response(cfg):
    """The longest response any domain may have under `cfg` (response_limit): what a
    memory plan or a disk check budgets each response for."""
    return max(response_limit(cfg, domain) for domain in ("code", "math"))


def apply_preset(args):
    """Fill every flag of `args` (an argparse namespace with a `preset` attribute) that
    was left unset (None) from PRESETS[args.preset]. A preset's two response limits go
    together: --max-new-tokens given alone is the limit of every domain, as in the
    paper."""
    alone = (
        getattr(args, "max_new_tokens", None) is not None
        and getattr(args, "math_max_new_tokens", 0) is None
    )
    for k, v in PRESETS[args.preset].items():
        if getattr(args, k, v) is None:
            setattr(args, k, v)
    if alone:
        args.math_max_new_tokens = 0


def preset_help(key, text=""):
    """The help of a flag that --preset fills: "(preset) TEXT [paper: V, gpu: V, cpu: V,
    toy: V]", the values read from PRESETS, so that --help shows what each preset sets
    without a second copy of them."""
    show = lambda v: " ".join(map(str, v)) if isinstance(v, list) else str(v)
    values = ", ".join(f"{name}: {show(p[key])}" for name, p in PRESETS.items())
    return f"(preset) {text} [{values}]" if text else f"(preset) [{values}]"


def preset_line(args):
    """The start-up line of a command with --preset: the preset that runs and the values
    of it in effect."""
    kept = [
        f"{k}={v}"
        for k, v in PRESETS[args.preset].items()
        if getattr(args, k, None) == v
    ]
    in_effect = ", ".join(kept) or "none of its values"
    return f"preset: {args.preset} ({in_effect} in effect; explicit flags win)"


# --------------------------------------------------------------------------------------
# train.py's command line


def bounded(kind, low, high=math.inf, low_open=False):
    """An argparse type: a finite `kind` (int or float) >= low (> low if low_open) and
    <= high. argparse then refuses, at parse time in one line, a nan, an inf, or
    a count that would silently do nothing or drop data (--limit -1, --max-new-tokens
    0)."""
    what = "an integer" if kind is int else "a finite number"
    what += f" > {low}" if low_open else f" >= {low}"
    what += f" and <= {high}" if high < math.inf else ""

    def parse(text):
        try:
            value = kind(text)
            above = value > low if low_open else value >= low
            ok = math.isfinite(value) and above and value <= high
        # not a number of that kind; an integer too long for a float
        except (ValueError, OverflowError):
            ok = False
        if not ok:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    return parse


# steps, batch sizes, token and turn limits, workers: 0 would do nothing
COUNT = bounded(int, 1)
# a seed every RNG we seed takes (torch refuses 2**64), seed + 1 too
SEED = bounded(int, 0, 2**32 - 1)


def negative_values(ap):
    """Let the parser `ap` read a negative number in any notation as a flag's value
    ("--lr -1e-3", "--lam -inf"), as it reads "-1" and "-.5", so that the flag's type
    refuses it by name (bounded): by default argparse takes "-1e-3" for an unknown flag
    and answers that --lr expected one argument. -> ap"""
    ap._negative_number_matcher = re.compile(
        r"^-(\d|\.\d|inf$|nan$|infinity$)", re.IGNORECASE
    )
    return ap


def machine_has(name):
    """Whether this machine has the torch device `name` ("cuda:1"). torch loads here,
    not at the top: --help and a refused flag answer without it (seconds)."""
    import torch

    kind, _, index = name.partition(":")
    if kind == "cuda":
        return torch.cuda.is_available() and int(index or 0) < torch.cuda.device_count()
    return kind == "cpu" or kind == "mps" and torch.backends.mps.is_available()


def device(text):
    """An argparse type: a torch device this machine has (cpu, cuda, cuda:1, mps)."""
    if not re.fullmatch(r"(cpu|cuda|mps)(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"not a torch device: {text!r}")
    if not machine_has(text):
        raise argparse.ArgumentTypeError(f"this machine has no device {text!r}")
    return text


def default_device():
    """The default of every --device: cuda where torch sees a GPU, else cpu."""
    return "cuda" if machine_has("cuda") else "cpu"


# --precision's choices (their dtypes: infra/models.py, DTYPES)
PRECISIONS = ("fp32", "bf16")


def precision(choice, device):
    """--precision as train.py and eval.py take it (the paper leaves precision open,
    DECISIONS.md D9) -> "fp32" | "bf16": the choice, else bf16 on a GPU (decoding reads
    half the bytes per token) and fp32 on the CPU (no bf16 speed-up there; exact against
    the tests' references)."""
    return choice or ("bf16" if device.startswith("cuda") else "fp32")


def command():
    """How this process was started: "python train.py", "python -m toy"."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    if spec:  # python -m NAME
        return "python -m " + spec.name.removesuffix(".__main__")
    return "python " + sys.argv[0]


def parser(**kw):
    """argparse.ArgumentParser(**kw) named as typed, whose refusal is one line, exit 2:
    "COMMAND: error: WHAT (see COMMAND --help)"; the usage only with --help."""
    ap = argparse.ArgumentParser(**{"prog": command(), **kw})
    ap.error = lambda what: ap.exit(
        2, f"{ap.prog}: error: {what} (see {command()} --help)\n"
    )
    return ap


def add_unisolated_flag(add):
    """--unisolated-programs, for train.py and eval.py (sandbox/jail.py,
    check_isolation). add: an argparse add."""
    add(
        "--unisolated-programs",
        action="store_true",
        default=None,
        help=preset_help(
            "unisolated_programs",
            "run the students' programs even where the sandbox "
            "has no jail (sandbox: at start), giving up what it hides: the host's "
            "files, the golden tests among them, its loopback, its IPC",
        ),
    )


def train_parser(what="MAS-OPD training (Algorithm 1)"):
    """train.py's command line, an argparse parser of six groups; a variant adds a group
    of its own before parsing (baselines/grpo.py). Defaults in brackets; a (preset) flag
    lists each preset's value."""
    ap = parser(
        description=f"{what}. Defaults in brackets; a (preset) flag lists each preset's value.",
        epilog="The laptop demo runs the toy world through this file: python -m toy. The GRPO "
        "baselines of Table 1: python -m baselines.grpo.",
    )
    # --lr -1e-3 refused as a number below 0, not as a flag without its value
    negative_values(ap)
    # what a step optimises: a variant sets its own
    ap.set_defaults(objective="mas-opd")
    groups = {
        "data and models": data_flags,
        "the paper's schedule (App. D.6.3)": schedule_flags,
        "MAS-OPD (Eq. 10, PAC, policies)": method_flags,
        "sampling (App. D.6.1, D.6.3)": sampling_flags,
        "memory and speed": memory_flags,
        "output": output_flags,
    }
    for title, flags in groups.items():
        flags(ap.add_argument_group(title).add_argument)
    return ap


def data_flags(add):
    """The problems, the models, the preset and the seed (add: an argparse add)."""
    add("--problems", required=True, help="JSONL problem file (schema: infra/data.py)")
    add(
        "--student",
        required=True,
        help="tiny-qwen3 | tiny-llama | local dir | .gguf | hub id (paper: Qwen3-1.7B)",
    )
    add(
        "--teacher",
        help="(required, unless a program calling train.main hands it the teacher, "
        "as python -m toy does) same choices as --student, one tokenizer with it (paper: "
        "Qwen3-14B)",
    )
    add(
        "--eval-problems",
        default=None,
        help="held-out problems evaluated before and after training",
    )
    add(
        "--preset",
        choices=sorted(PRESETS),
        default="paper",
        help="defaults of the flags marked (preset): the paper's schedule and limits, a first run "
        "on one GPU, a first CPU run of real models, a small one's minutes (smol), the toy "
        "world's (config.py, PRESETS); "
        "explicit flags win [%(default)s]",
    )
    add_unisolated_flag(add)
    add("--seed", type=SEED, default=0, help="[%(default)s]")


def schedule_flags(add):
    """Steps, batches and the optimizer's values."""
    add("--steps", type=COUNT, help=preset_help("steps"))
    add(
        "--batch", type=COUNT, help=preset_help("batch", "problems (episodes) per step")
    )
    add(
        "--mini-batch",
        type=COUNT,
        help=preset_help("mini_batch", "episodes per optimizer update"),
    )
    add(
        "--micro-batch",
        type=COUNT,
        help=preset_help(
            "micro_batch", "responses per forward/backward (gradient accumulation)"
        ),
    )
    add("--lr", type=bounded(float, 0, low_open=True), help=preset_help("lr"))
    add(
        "--weight-decay",
        type=bounded(float, 0),
        default=WEIGHT_DECAY,
        help="[%(default)s]",
    )
    add(
        "--grad-clip",
        type=bounded(float, 0, low_open=True),
        default=GRAD_CLIP,
        help="[%(default)s]",
    )


def method_flags(add):
    """lambda, PAC, and which policies and verdicts (a team's: teams/)."""
    add(
        "--lam",
        type=bounded(float, 0),
        help=preset_help("lam", "lambda of Eq. 10; 0 = w/o RAS"),
    )
    add(
        "--no-pac",
        action="store_true",
        help="teacher sees only the student-visible context (w/o PAC)",
    )
    add("--shared-policy", action="store_true", help="one student in every seat")
    add(
        "--agents-per-role",
        type=COUNT,
        default=AGENTS_PER_ROLE,
        help="n: a team of 2n agents, n per role, each its own policy (App. E.1; teams/) "
        "[%(default)s]",
    )
    add(
        "--attribution",
        choices=("verifier", "model"),
        default=ATTRIBUTION,
        help="who writes PAC's verdicts: the verifier's checks, or --attribution-model called "
        "once per turn (App. E.1.3; teams/) [%(default)s]",
    )
    add(
        "--attribution-model",
        help="with --attribution model: a model spec as for --student (default: --teacher)",
    )


def sampling_flags(add):
    """Turns, lengths and the training decoding."""
    add("--max-turns", type=COUNT, default=MAX_TURNS, help="T [%(default)s]")
    add(
        "--max-new-tokens",
        type=COUNT,
        help=preset_help("max_new_tokens", "student response limit"),
    )
    add(
        "--math-max-new-tokens",
        type=bounded(int, 0),
        help=preset_help(
            "math_max_new_tokens",
            "the math roles' limit, 0 = --max-new-tokens "
            "(given alone, --max-new-tokens sets this to 0)",
        ),
    )
    add(
        "--max-prompt-tokens",
        type=COUNT,
        help=preset_help("max_prompt_tokens", "student prompt limit"),
    )
    add(
        "--teacher-max-prompt-tokens",
        type=COUNT,
        help=preset_help("teacher_max_prompt_tokens", "teacher prompt limit"),
    )
    add(
        "--temperature",
        type=bounded(float, 0),
        default=TEMPERATURE,
        help="[%(default)s]",
    )
    add(
        "--top-p",
        type=bounded(float, 0, 1, low_open=True),
        default=TOP_P,
        help="[%(default)s]",
    )
    add("--top-k", type=bounded(int, 0), default=TOP_K, help="0 = off [%(default)s]")


def memory_flags(add):
    """Precision, offloads, sharding and speed."""
    add(
        "--precision",
        choices=PRECISIONS,
        default=None,
        help="default: bf16 on GPU, fp32 on CPU",
    )
    add("--grad-checkpointing", action="store_true")
    add(
        "--rollout-chunk",
        type=bounded(int, 0),
        default=ROLLOUT_CHUNK,
        help="prompts per generate call, 0 = all (bounds the KV cache) [%(default)s]",
    )
    add(
        "--teacher-batch-tokens",
        type=COUNT,
        default=TEACHER_BATCH_TOKENS,
        help="padded tokens per teacher forward [%(default)s]",
    )
    add(
        "--teacher-offload",
        action="store_true",
        help="keep the teacher on the CPU except while it scores",
    )
    add(
        "--fsdp",
        action="store_true",
        help="under torchrun, shard each student's weights, gradients and AdamW moments across "
        "the ranks with FSDP2 (the rollout copies and the teacher stay whole)",
    )
    add(
        "--fsdp-offload",
        action="store_true",
        help="with --fsdp: FSDP2's CPUOffloadPolicy, the sharded fp32 weights, gradients and AdamW "
        "moments in host memory and the optimizer step on the CPU (one GPU of 48 GiB: torchrun "
        "--nproc-per-node 1; 12 bytes per parameter over PCIe per micro-batch)",
    )
    add(
        "--optimizer-offload",
        action="store_true",
        help="keep each policy's AdamW moments in host memory except inside its optimizer step "
        "(exact; 16 bytes per parameter over PCIe per update)",
    )
    add(
        "--compile",
        action="store_true",
        help="compile the sampler's decode step (fused kernels, for a GPU; the first rollout "
        "compiles for tens of seconds)",
    )
    add("--device", type=device, help="[cuda where torch sees a GPU, else cpu]")
    add(
        "--workers",
        type=COUNT,
        default=WORKERS,
        help="sandbox runs at once [%(default)s]",
    )
    add(
        "--threads",
        type=bounded(int, 0),
        help=preset_help(
            "threads", "torch CPU threads; 0 = the cores other work leaves free"
        ),
    )


def output_flags(add):
    """Where the run writes, when it saves, and its evaluation."""
    add(
        "--out",
        default="runs/default",
        help="metrics.jsonl and checkpoint/ go here [%(default)s]",
    )
    add("--resume", action="store_true", help="continue from OUT/checkpoint")
    add(
        "--save-every",
        type=COUNT,
        help=preset_help(
            "save_every", "steps between checkpoints (and always at the end)"
        ),
    )
    add(
        "--save-episodes",
        action="store_true",
        help="append each step's episodes to OUT/episodes.jsonl as the rollout ends (every "
        "response with its context, tokens, log-probs and the parsed artefacts)",
    )
    add(
        "--eval-seeds",
        type=SEED,
        nargs="+",
        help=preset_help("eval_seeds", "one evaluation of --eval-problems per seed"),
    )
    add(
        "--eval-exchange",
        action="store_true",
        default=None,
        help=preset_help(
            "eval_exchange",
            "evaluate each policy in its partner's seat too: the "
            "exchange penalty (Fig. 3a); doubles the evaluation's time",
        ),
    )
    add(
        "--overwrite",
        action="store_true",
        help="start a new run in OUT where a run is: its "
        "checkpoint, logs and results are discarded (without it: --resume, or another --out)",
    )
    # optional trackers (infra/trackers.py; pip install -r requirements-trackers.txt)
    add(
        "--wandb",
        metavar="PROJECT",
        help="log metrics.jsonl's records to this W&B project too, in OUT/wandb (offline "
        "without a login: wandb sync uploads it)",
    )
    add(
        "--tensorboard",
        action="store_true",
        help="log metrics.jsonl's records to OUT/tensorboard too",
    )


def get_args(argv=None, ap=None):
    """The run's configuration, one argparse namespace: the values above as defaults,
    the scale-dependent flags from --preset where not given; --help prints them in
    brackets. ap: the parser, train_parser() unless a variant's (baselines/grpo.py)."""
    ap = ap or train_parser()
    argv = sys.argv[1:] if argv is None else argv
    # a newcomer's first try: say where the demo is, not only which flags are missing
    if not argv:
        ap.error(
            "--problems and --student are required; the laptop demo (the toy world, nothing "
            "to download) is python -m toy"
        )
    args = ap.parse_args(argv)
    given_mini_batch = args.mini_batch is not None
    apply_preset(args)
    # a preset's mini-batch over the given batch: one update on the batch
    if not given_mini_batch:
        args.mini_batch = min(args.mini_batch, args.batch)
    if clash := conflict(args):
        ap.error(clash)
    args.device = args.device or default_device()
    args.precision = precision(args.precision, args.device)
    return args


def conflict(args):
    """The first combination of train.py's flags that cannot hold together, in words, or
    None."""
    if args.mini_batch > args.batch:
        return (
            f"--mini-batch {args.mini_batch} is more than --batch {args.batch}: an update "
            "takes at most the step's episodes"
        )
    if args.attribution_model is not None and args.attribution != "model":
        return "--attribution-model is read only with --attribution model"
    if args.resume and args.overwrite:
        return "--resume continues the run in OUT, --overwrite discards it: give one of them"
    return None
