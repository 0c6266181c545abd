"""A learned toy teacher: a causal LM larger than the toy students, trained on traces the toy world writes, then
used exactly as a real teacher (`python -m toy --learned-teacher`, docs/toy.md, DECISIONS.md D16).

    python -m toy --learned-teacher        # the demo with it (built once, cached beside the toy students)
    python -m toy.learned                  # set it up (cached) and print its check (check_table) beside toy/expert.py's
    python -m toy.learned --rebuild        # train it here (minutes) instead of copying the shipped toy/teacher/
    python -m toy.build toy/teacher        # the lines of TEACHER_FILES, for a rebuilt teacher copied there

What it is. The base student grown by GROW layers (grown: 4 layers, 0.35M parameters against the students' 0.25M;
the new layers start as the identity), then trained: a larger model that starts from what the students learnt, as
a real teacher shares its students' pretraining; one trained from scratch for minutes was no surer than the
students on their own right tokens and made them worse (docs/toy.md). Over the students' tokenizer, saved as a
transformers directory and loaded with infra.models.load_model; train.main gets
the loaded model, teacher.py scores it with its two passes, and nothing of the hand-written teacher runs when it
scores. (Not through --teacher DIR: train.py's memory plan is written for real models and refuses the toy
preset's prompt limits.)

What it is trained on (training_examples). Teacher contexts u~ rendered by teacher.teacher_contexts over the
histories of the role-blind base students (simulated episodes of toy/world.py, the students' own distribution),
under the seat's own role condition or the contrast kappa(r) (CONTRAST of them), with the verdicts c^{<t} where
the world attributed a conflict (VERDICT of the later turns, else none, as w/o PAC). The targets are expert
responses the world writes under the condition in the context (expert_response): the right artefact; after a
conflict keep or revise as the world's checks say for the condition's side when a verdict is in the context, at
chance when none is; under kappa(r) also kappa(r)'s part. A share STUDENT of the targets is the base student's
own response: the teacher's smoothing, so that it has seen the students' prefixes (a slip, a guess, a whole job)
and prices what follows them, not only the expert's argmax (a larger share made it flatter than the students,
docs/toy.md). The teacher must learn by itself to read a verdict
among its lines, to tell the conditions apart, and to price the students' tokens: no rule, plan, probability or
prefix logic of toy/expert.py is in its data.
"""

from config import parser
from infra.cli import flags_first


def learned_args(argv=None):
    """python -m toy.learned's command line."""
    ap = parser(
        description="Build the learned toy teacher (cached) and print its check beside "
        "the hand-written teacher's, on held-out toy responses."
    )
    ap.add_argument(
        "--cache",
        default=".cache",
        help="where the toy world is built (as python -m toy)",
    )
    ap.add_argument(
        "--split",
        default="test",
        choices=("valid", "test"),
        help="the held-out problems",
    )
    ap.add_argument(
        "--episodes",
        type=int,
        default=60,
        help="simulated base-student episodes to check on",
    )
    ap.add_argument("--seed", type=int, default=901, help="the episodes' seed")
    ap.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch CPU threads (0: the cores other work leaves)",
    )
    ap.add_argument(
        "--rebuild",
        action="store_true",
        help="train the teacher here (minutes) instead of copying "
        "the shipped toy/teacher/, and say if it is the same",
    )
    return ap.parse_args(argv)


if __name__ == "__main__":  # flags first: --help and a refused flag answer before torch
    flags_first(learned_args)

import copy
import hashlib
import json
import os
import random
import shutil
import time

import torch
from tqdm import tqdm

from infra.models import load_model, load_tokenizer
from prompts import ROLES, build_context, stop_ids_of
from teacher import KAPPA, score, teacher_contexts
from toy.build import (
    TOY_VERSION,
    against_shipped,
    copy_pinned,
    sft,
    sha256_of,
    shipped,
    start_toy,
    why_trained,
    write_record,
)
from toy.expert import HandTeacher
from toy.world import (
    COMPUTING,
    NOUN,
    ROLE_BLIND,
    calc,
    deferring,
    derivation,
    expr,
    program,
    question_spec,
    simulate,
    test_case,
    toy_problems,
    value_of,
    whole_job,
)

# bump when the code below changes what gets built (the settings are in the key already)
LEARNED_VERSION = 2
GROW = 2  # decoder layers added on top of the student's two (grown)
# build_learned's teacher, as built
SHIPPED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "teacher")
# Every file of SHIPPED, by sha256: what build_learned copies, and nothing else, pinned here and not by the
# build.json beside them (which anyone who swaps the files can rewrite); other bytes are never used, the teacher
# is trained instead (as toy/build.py's STUDENT_FILES, which says why). After copying a rebuilt teacher over
# toy/teacher/, paste what `python -m toy.build toy/teacher` prints (tests/test_learned.py checks them).
TEACHER_FILES = {
    "build.json": "0054c2832793ca42001bc3becaaa13bd3e204b7c32f2ff3765d7ab0e35f5dd0c",
    "chat_template.jinja": "a4590ec07bcd97e120d7c9f3ae364f17d76bbadfd0af971600ba23584f4f74a5",
    "config.json": "07b78db584e110d0ac734c222516a82c4e06b8f5cce2a8484b516389897638b6",
    "generation_config.json": "7c6fdf0946c6ba7fe3c304924600c74706acea52d8f3d505b5d37dd774293c38",
    "model.safetensors": "65af62e3c7466fbb7f53d10e49e575290c8a70aeceb456e3e4b53690d337eaa0",
    "tokenizer.json": "8d3a739cac5b29aad73a7964d5bd381e079afcff8ff3f993b85f1138466957cc",
    "tokenizer_config.json": "0eb8d2cc31ccde4ea625d954e8f3ef874fa00a5ff6f073f86db55eb2aabbc223",
}
DATA = dict(
    examples=16000,  # (teacher context, target) pairs
    first_turns=0.5,  # share of first turns kept (later turns carry the decisions, the first only the format)
    CONTRAST=0.5,  # share of contexts under the contrast condition kappa(r)
    VERDICT=0.7,  # share of later turns whose context carries the verdicts (the rest: none, as w/o PAC)
    WHOLE_JOB=0.5,  # share of expert responses under the seat's own condition that also do the teammate's part
    ADOPT=0.9,  # share of a computing role's revisions that take over a right program's value
    STUDENT=0.05,  # share of targets that are the base student's own response (smoothing, module docstring)
    seed=0,
)
TRAIN = dict(steps=1500, batch=16, lr=3e-3, seed=0)
# the teacher's prompt limit (config.py's, App. D.6.3); the toy's contexts are far shorter
LIMIT = 12288


def right_artefact(role, problem, rng):
    """A right first-turn artefact of `role`, worked out by the world (it knows the arithmetic)."""
    spec = question_spec(problem["question"])
    if role == "coder":
        return program(f"x = int(input())\nprint({expr(spec)})")
    if role == "tool_user":
        return program(f"print({value_of(spec) if rng.random() < 0.2 else expr(spec)})")
    if role == "tester":
        x = rng.randint(0, 5)
        return test_case(x, value_of(spec, x))
    return derivation(spec, calc(*spec))


def expert_response(seat, cond, problem, turns, shown, rng, d=DATA):
    """What an expert in `seat` writes at turn len(turns) under role condition `cond` (seat or KAPPA[seat]), after
    the base students' `turns` (world.SimTurn list), with the verdicts in its context or not (`shown`). After a
    conflict it revises when the side `cond` answers for was wrong (the world's checks), at chance without a
    verdict; a computing role's revision takes over a right program's value (ADOPT), else writes afresh."""
    own = right_artefact(seat, problem, rng)
    if turns:
        last = turns[-1]
        kept = last.own[seat]
        revise = (not last.checks[cond]) if shown else rng.random() < 0.5
        if revise or not kept:
            mate_right = last.checks[KAPPA[seat]]
            p_adopt = (d["ADOPT"] if mate_right else 1 - d["ADOPT"]) if shown else 0.5
            took = (
                deferring(seat, last.artefacts)
                if seat in COMPUTING and rng.random() < p_adopt
                else None
            )
            own = took or own
        else:
            own = kept
    text = own
    if cond != seat or rng.random() < d["WHOLE_JOB"]:
        text = whole_job(
            seat, problem["domain"], own, right_artefact(KAPPA[seat], problem, rng)
        )
    if turns:
        text = f"I {'keep' if own == kept else 'revise'} my {NOUN[seat]}.\n" + text
    return text


def training_examples(tok, problems, d, progress=True):
    """d["examples"] (teacher context ids, target ids) pairs (module docstring)."""
    rng, out, end = random.Random(d["seed"]), [], [stop_ids_of(tok)[0]]
    by_domain = [
        [p for p in problems if p["domain"] == dom] for dom in ("code", "math")
    ]
    bar = tqdm(
        total=d["examples"],
        desc="learned teacher examples",
        leave=False,
        disable=not progress,
    )
    while len(out) < d["examples"]:
        p = rng.choice(rng.choice([ps for ps in by_domain if ps]))
        turns = simulate(p, ROLE_BLIND, rng)
        for t in range(len(turns)):
            if t == 0 and rng.random() >= d["first_turns"]:
                continue
            shown = t > 0 and rng.random() < d["VERDICT"]
            for seat in ROLES[p["domain"]]:
                cond = KAPPA[seat] if rng.random() < d["CONTRAST"] else seat
                segments = build_context(tok, p, seat, [x.artefacts for x in turns[:t]])
                ctx = teacher_contexts(
                    tok,
                    segments,
                    (cond,),
                    [x.verdict for x in turns[:t]] if shown else None,
                    LIMIT,
                )[0]
                target = (
                    turns[t].responses[seat]
                    if rng.random() < d["STUDENT"]
                    else expert_response(seat, cond, p, turns[:t], shown, rng, d)
                )
                out.append(
                    (ctx, tok(target, add_special_tokens=False)["input_ids"] + end)
                )
        bar.update(min(len(out), d["examples"]) - bar.n)
    bar.close()
    return out[: d["examples"]]


def grown(student, extra, seed):
    """A copy of `student` with `extra` decoder layers added on top, their attention and MLP output projections zero:
    the residual stream passes them unchanged, so the grown model computes the student's log-probs exactly until it
    is trained (the new layers' other weights are drawn from `seed`, and learn once the outputs move)."""
    config = copy.deepcopy(student.config)
    config.num_hidden_layers += extra
    if getattr(config, "layer_types", None):  # Qwen3 lists each layer's attention kind
        config.layer_types = config.layer_types[:1] * config.num_hidden_layers
    torch.manual_seed(seed)
    model = type(student)(config)
    missing, unexpected = model.load_state_dict(student.state_dict(), strict=False)
    new = tuple(
        f"model.layers.{student.config.num_hidden_layers + i}." for i in range(extra)
    )
    # only the new layers are new
    if unexpected or not missing or any(not k.startswith(new) for k in missing):
        raise ValueError(
            f"grown: the student's weights do not fit a {config.num_hidden_layers}-layer copy"
        )
    with torch.no_grad():
        for layer in model.model.layers[-extra:]:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    return model.eval()


def cache_key(root, data=None, train=None, grow=None):
    """A hash of everything that shapes the teacher (None: this module's DATA, TRAIN, GROW): the settings, the
    student it grows from (its weights' sha256) and the first training examples the world writes (a change of
    the world, the prompts or the teacher contexts shows there). A change of any rebuilds it."""
    data, train, grow = data or DATA, train or TRAIN, grow or GROW
    tok = load_tokenizer(os.path.join(root, "student"))
    first = training_examples(
        tok, toy_problems("train"), dict(data, examples=64), progress=False
    )
    spec = dict(
        version=LEARNED_VERSION,
        toy=TOY_VERSION,
        data=data,
        train=train,
        grow=grow,
        examples=first,
        student=sha256_of(os.path.join(root, "student", "model.safetensors")),
    )
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def teacher_dir(root, key):
    """Where build_learned caches the teacher of cache_key `key` built from the toy world at `root`
    (build.build_toy)."""
    return os.path.join(root, f"teacher-{key[:12]}")


def build_learned(root, data=None, train=None, grow=None, rebuild=False):
    """The learned teacher for the toy world at `root`, once: the shipped one (toy/teacher/) when its files are
    those TEACHER_FILES pins and its build.json records this code's cache_key, else grown from root/student and
    trained on the train split with `data`, `train` and `grow` (None: DATA, TRAIN, GROW; `rebuild`: always
    trained); -> its directory (a transformers checkpoint with the tokenizer and build.json). Written to a
    temporary directory and renamed, so an interrupted build leaves nothing half-made."""
    key = cache_key(root, data, train, grow)
    out = teacher_dir(root, key)
    data, train, grow = data or DATA, train or TRAIN, grow or GROW
    if os.path.isdir(out) and not rebuild:
        return out
    tmp = f"{out}.tmp{os.getpid()}"
    if shipped(SHIPPED, key, TEACHER_FILES) and not rebuild:
        print(
            f"toy world: the learned teacher is the one shipped in toy/teacher/, copied to {out}/",
            flush=True,
        )
        copy_pinned(SHIPPED, tmp, TEACHER_FILES)
    else:
        why = "" if rebuild else f" ({why_trained(SHIPPED, TEACHER_FILES)})"
        print(
            f"toy world: building the learned teacher{why} (the student grown by {grow} layers, "
            f"{train['steps']:,} SFT steps on {data['examples']:,} examples), once: cached in {out}/",
            flush=True,
        )
        start = time.monotonic()
        student, tok = load_model(os.path.join(root, "student"))
        model = grown(student, grow, train["seed"] + 7)
        sft(
            model,
            training_examples(tok, toy_problems("train"), data),
            train["steps"],
            batch=train["batch"],
            lr=train["lr"],
            seed=train["seed"],
            desc="learned teacher",
        )
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        write_record(tmp, key, time.monotonic() - start)
    if rebuild and os.path.isdir(out):
        shutil.rmtree(out)
    try:
        os.replace(tmp, out)
    except OSError:  # another process finished the same build first
        shutil.rmtree(tmp)
    return out


# ------------------------------------------------------------------------------ the check (before training)


def check_cases(tok, problems, n, seed):
    """Held-out cases from n simulated base-student episodes on `problems`: per (turn, seat), the student's
    response and where its own artefact lies in it, its contexts under both conditions with and without the
    verdicts, and after a conflict which decision is right (keep its artefact or revise it)."""
    rng, cases = random.Random(seed), []
    for _ in range(n):
        p = rng.choice(problems)
        turns = simulate(p, ROLE_BLIND, rng)
        for t, turn in enumerate(turns):
            for seat in ROLES[p["domain"]]:
                segs = build_context(tok, p, seat, [x.artefacts for x in turns[:t]])
                verdicts = [x.verdict for x in turns[:t]]
                ctx = {
                    (cond, pac): teacher_contexts(
                        tok, segs, (cond,), verdicts if pac else None, LIMIT
                    )[0]
                    for cond in (seat, KAPPA[seat])
                    for pac in (True, False)
                }
                text, own = turn.responses[seat], turn.own[seat]
                case = dict(
                    seat=seat,
                    t=t,
                    ctx=ctx,
                    student_ctx=[i for x in segs for i in x.ids],
                    text=text,
                    own=own,
                    decision=None,
                )
                # a decision to take: keep what it had, or revise it
                if t and turns[t - 1].own[seat]:
                    # True: revising is right
                    case["decision"] = not turns[t - 1].checks[seat]
                cases.append(case)
    return cases


def _token_parts(tok, text, own):
    """-> (ids of `text` and its end token, as a sampled response has them; per token: None inside the decision
    line, True where it starts inside the own artefact's span, False elsewhere (the teammate's part); the end
    token counts as the own part's when the response holds nothing else (ending its own work there is the role's
    own behaviour), else as neither)."""
    ids = tok(text, add_special_tokens=False)["input_ids"]
    start, opening = (
        text.rfind(own),
        text.find("\n") + 1 if text.startswith("I ") else 0,
    )
    parts = []
    for i in range(len(ids)):
        begins = len(tok.decode(ids[:i]))
        parts.append(None if begins < opening else start <= begins < start + len(own))
    return ids + [stop_ids_of(tok)[0]], parts + [None if False in parts else True]


def check(teacher, tok, cases, student=None, batch_tokens=16384):
    """What the method needs of a teacher, measured on held-out cases (check_cases) through teacher.score: the
    share of responses whose mean A^role = l^(r) - l^(kappa r) (Eq. 9, verdicts in both contexts) is > 0 over the
    role's own artefact, and < 0 over the teammate's part; after a conflict, the share of turns where the teacher
    (own condition, verdicts in context) puts more probability on the right decision line ("I revise my ..."
    when the seat's artefact was wrong, "I keep my ..." when it was right); and PAC: the share where the right
    decision line gains log-probability when the verdicts are put in the context, for revisions and for keeps.
    With the base `student`, also the mean A^OPD per token of its own responses, l^(r) minus the student's
    log-prob, and the share below -1 nat: how far the teacher is from the students on their own tokens.
    -> {row: percentage, nats, or a count as text}."""
    ids = lambda texts: [tok(x, add_special_tokens=False)["input_ids"] for x in texts]
    logp = lambda ctxs, texts: [
        x.sum().item()
        for x in score(teacher, ctxs, ids(texts), max_batch_tokens=batch_tokens)
    ]
    split = [_token_parts(tok, c["text"], c["own"]) for c in cases]
    resp = [r for r, _ in split]
    target = score(
        teacher,
        [c["ctx"][(c["seat"], True)] for c in cases],
        resp,
        max_batch_tokens=batch_tokens,
    )
    contrast = score(
        teacher,
        [c["ctx"][(KAPPA[c["seat"]], True)] for c in cases],
        resp,
        max_batch_tokens=batch_tokens,
    )
    own_pos, mate_neg = [], []
    for (_, parts), a, b in zip(split, target, contrast):
        adv = (a - b).tolist()  # (len,) A^role per token
        own = [x for x, q in zip(adv, parts) if q is True]
        mate = [x for x, q in zip(adv, parts) if q is False]
        if own:
            own_pos.append(sum(own) / len(own) > 0)
        if mate:
            mate_neg.append(sum(mate) / len(mate) < 0)
    later = [c for c in cases if c["decision"] is not None]
    # the decision line that opens a later turn
    line = lambda c, word: f"I {word} my {NOUN[c['seat']]}.\n"
    revise, keep = {}, {}
    for pac in (True, False):
        ctxs = [c["ctx"][(c["seat"], pac)] for c in later]
        revise[pac] = logp(ctxs, [line(c, "revise") for c in later])
        keep[pac] = logp(ctxs, [line(c, "keep") for c in later])
    decide, fix_up, keep_up = [], [], []
    for k, c in enumerate(later):
        decide.append((revise[True][k] > keep[True][k]) == c["decision"])
        if c["decision"]:
            fix_up.append(revise[True][k] > revise[False][k])
        else:
            keep_up.append(keep[True][k] > keep[False][k])
    pct = lambda xs: 100.0 * sum(xs) / max(len(xs), 1)
    opd = {}
    if student is not None:
        mine = score(
            student,
            [c["student_ctx"] for c in cases],
            resp,
            max_batch_tokens=batch_tokens,
        )
        gap = torch.cat([a - m for a, m in zip(target, mine)])
        opd = {
            "A^OPD per token on the students' responses (nats, mean)": f"{gap.mean().item():.2f}",
            "... its share of tokens below -1 nat (%)": f"{100 * (gap < -1).float().mean().item():.1f}",
        }
    return {
        "A^role > 0 on the role's own artefact": pct(own_pos),
        "A^role < 0 on the teammate's part": pct(mate_neg),
        "the right decision preferred (verdicts in context)": pct(decide),
        "PAC: a needed revision gains with the verdicts": pct(fix_up),
        "PAC: a right keep gains with the verdicts": pct(keep_up),
        **opd,
        "responses / whole jobs / decisions": f"{len(own_pos)} / {len(mate_neg)} / {len(later)}",
    }


def check_rows(teachers, tok, problems, n=60, seed=901, student=None):
    """check() of each teacher ({name: model}) on the same held-out cases (n episodes from `seed`):
    {row: {name: value}}, the shape RUN/teacher_check.json has for the run report (infra/report.py)."""
    cases = check_cases(tok, problems, n, seed)
    per = {name: check(m, tok, cases, student) for name, m in teachers.items()}
    return {
        row: {name: per[name][row] for name in per} for row in next(iter(per.values()))
    }


def check_table(rows):
    """check_rows' result as Markdown, one column per teacher."""
    names = list(next(iter(rows.values())))
    lines = [
        "| % of held-out cases | " + " | ".join(names) + " |",
        "|---" * (len(names) + 1) + "|",
    ]
    for k, cells in rows.items():
        lines.append(
            f"| {k} | "
            + " | ".join(
                v if isinstance(v, str) else f"{v:.1f}" for v in cells.values()
            )
            + " |"
        )
    return "\n".join(lines)


def main(argv=None):
    args = learned_args(argv)
    root = start_toy(args.cache, args.threads)
    path = build_learned(root, rebuild=args.rebuild)
    if args.rebuild:
        print(
            f"toy world: the learned teacher was trained in {path}/; {against_shipped(path, SHIPPED)}",
            flush=True,
        )
    learned, tok = load_model(path)
    teachers = {"learned": learned, "hand-written": HandTeacher(tok)}
    student = load_model(os.path.join(root, "student"))[0]
    print(
        f"\nThe teachers' check on {args.episodes} base-student episodes of the {args.split} split "
        f"(seed {args.seed}):\n"
    )
    print(
        check_table(
            check_rows(
                teachers,
                tok,
                toy_problems(args.split),
                args.episodes,
                args.seed,
                student,
            )
        )
    )


if __name__ == "__main__":
    main()
