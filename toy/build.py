"""The toy students' build: a phrase tokenizer and a base student trained by SFT on the toy world's simulated
episodes (toy/world.py), cached as plain files, or copied from the one shipped in toy/student/.

    python -m toy --build-only     # the toy world in the cache: the shipped student (or a build) and the problems
    python -m toy --rebuild        # train the student here from scratch (minutes), and say if it is the shipped one
    python -m toy.build toy/student    # the lines of STUDENT_FILES below, for a rebuilt student copied there

Why a student is shipped (DECISIONS.md D17). The build is the toy's stand-in for pretraining, and it took two thirds
of the demo's time on a 2-core CPU (docs/toy.md); a real run downloads its pretrained checkpoint rather than
training it. So the repository holds the student as the build below wrote it (1 MB, safetensors: tensors, no code),
with build.json: the fingerprint of what it was trained from (FINGERPRINT), the weights' sha256, and where and how
fast it was built. build_toy copies it only when every file is the one this code pins (STUDENT_FILES: a record
beside other weights could name their hash) and this code would train the student from the same data and settings
(the fingerprint matches); else it trains. `--rebuild` trains it again and compares the bytes.
"""

from config import parser
from infra.cli import flags_first


def pins_args(argv=None):
    """python -m toy.build's command line: the model directory whose pins it prints."""
    ap = parser(
        description="Print the sha256 lines of a model directory's files, as STUDENT_FILES "
        "(toy/build.py) and TEACHER_FILES (toy/learned.py) pin the shipped toy/student/ and "
        "toy/teacher/: paste them there after copying a rebuilt model over either."
    )
    ap.add_argument("dir", help="toy/student or toy/teacher")
    return ap.parse_args(argv)


if __name__ == "__main__":  # flags first: --help and a refused flag answer before torch
    flags_first(pins_args)

import functools
import hashlib
import json
import math
import os
import random
import shutil
import time

import torch
from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers, trainers
from tokenizers import models as bpe
from tqdm import tqdm

from infra.models import (
    SPECIAL_TOKENS,
    cpu_threads,
    hf_tokenizer,
    machine,
    make_tokenizer,
    tiny_model,
)
from infra.report import wall_time
from prompts import ROLES, build_context, stop_ids_of
from sampler import sequence_logprobs
from toy.cli import TOY_VERSION, toy_root
from toy.cli import train_args as train_args  # importable from here too (the tests)
from toy.world import ROLE_BLIND, SPLITS, simulate, toy_problems


def make_phrase_tokenizer(corpus, vocab_size=2048):
    """Byte-level BPE whose merges may cross spaces (a template line becomes one token) but neither a digit (numbers
    stay digit by digit, so copying them generalises) nor a line end, except one before a fence: a decision such as
    "I keep my program." stays a token of its own, apart from the artefact after it, while a label and the fence
    it opens ("Test Output:\n```\n") may become one token, so a value to copy follows a token that names it. Any
    string still round-trips."""
    tok = Tokenizer(bpe.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\n(?!```)"), "merged_with_previous"),
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=SPECIAL_TOKENS,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
            max_token_length=256,
        ),
    )
    return hf_tokenizer(tok)


# ------------------------------------------------------------------------------------- the build


def sft_examples(tok, problems, n, seed, first_turns=0.3, progress=True):
    """n (student context ids, response ids) pairs: the responses of simulated role-blind episodes, in the
    context the student saw (prompts.build_context: no verdict, no role condition, no reference value). Only a
    share `first_turns` of the first turns is kept: later turns teach what is slow to learn (copying a value out
    of the history), the first turn what is quick (copying the question)."""
    rng, out, end = random.Random(seed), [], [stop_ids_of(tok)[0]]
    by_domain = [[p for p in problems if p["domain"] == d] for d in ("code", "math")]
    bar = tqdm(total=n, desc="toy examples", leave=False, disable=not progress)
    while len(out) < n:
        # domains equally often, whatever their sizes
        p = rng.choice(rng.choice([ps for ps in by_domain if ps]))
        turns = simulate(p, ROLE_BLIND, rng)
        for t in range(len(turns)):
            if t == 0 and rng.random() >= first_turns:
                continue
            for r in ROLES[p["domain"]]:
                ctx = [
                    i
                    for s in build_context(tok, p, r, [x.artefacts for x in turns[:t]])
                    for i in s.ids
                ]
                out.append(
                    (
                        ctx,
                        tok(turns[t].responses[r], add_special_tokens=False)[
                            "input_ids"
                        ]
                        + end,
                    )
                )
        bar.update(min(len(out), n) - bar.n)
    bar.close()
    return out[:n]


def sft(model, examples, steps, batch=32, lr=3e-3, seed=0, desc="sft"):
    """Plain supervised fine-tuning on response tokens (sampler.sequence_logprobs with grad), AdamW, cosine decay.
    Batches hold examples of similar length (sorted, then shuffled as batches), so little compute goes to padding."""
    rng = random.Random(seed)
    ordered = sorted(examples, key=lambda e: len(e[0]) + len(e[1]))
    batches = [ordered[i : i + batch] for i in range(0, len(ordered), batch)]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps))
    )
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


# Untied input and output embeddings: with tied ones, every push down on a sampled token (a guessed digit, say)
# would also move how that token is read in the question, and the toy students drifted into garbage.
SHAPE = dict(hidden=64, layers=2, heads=4, kv_heads=2, tie_word_embeddings=False)
# the base student's SFT steps: the bulk of the build's minutes on a 2-core CPU
STUDENT_STEPS = 4000
SFT = dict(batch=32, lr=3e-3)  # the base student's SFT batch and peak learning rate
# build_toy's student, as built
SHIPPED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "student")
# Every file of SHIPPED, by sha256: what build_toy copies, and nothing else. The bytes are pinned here, in the code,
# not by the build.json beside them, which anyone who swaps the weights or the chat template can rewrite to match.
# Other bytes are never used: the student is trained here instead, as for a student of other data, and the build
# line names the file (a refusal would leave the demo unusable over a file it does not need, e.g. a checkout that
# rewrote line ends). After copying a rebuilt student over toy/student/, paste what
# `python -m toy.build toy/student` prints (tests/test_toy.py checks them against the files).
STUDENT_FILES = {
    "build.json": "91e0261b048d5802d6c248e830860e030ca79277dc56d02d81571520318cbc07",
    "chat_template.jinja": "a4590ec07bcd97e120d7c9f3ae364f17d76bbadfd0af971600ba23584f4f74a5",
    "config.json": "96ec8f65e7d5e85383e9f05df5e573f921545bda5807658939796555b1c76eff",
    "generation_config.json": "7c6fdf0946c6ba7fe3c304924600c74706acea52d8f3d505b5d37dd774293c38",
    "model.safetensors": "764c001b678a134830de44fdb3a1dc7347aabeafc5d351982da4bebe496a28be",
    "tokenizer.json": "8d3a739cac5b29aad73a7964d5bd381e079afcff8ff3f993b85f1138466957cc",
    "tokenizer_config.json": "107563c51465c3b6589dea9d4e77bc124b278935aec1be292f58e82f62671cc7",
}
# the SFT examples hashed into a build's fingerprint (with the tokenizer and every setting)
FINGERPRINT = 256


def built(root):
    return os.path.isdir(os.path.join(root, "student"))


def toy_tokenizer(train, seed):
    """The phrase tokenizer, trained on what the students read and write in simulated episodes of `train` (the
    problems), nothing else: a token only the teacher reads would be one the students never learn to leave out."""
    rng, corpus = random.Random(seed), []
    base = make_tokenizer()
    for p in train[::3]:
        turns = simulate(p, ROLE_BLIND, rng)
        for t in range(len(turns)):
            for r in ROLES[p["domain"]]:
                ids = [
                    i
                    for s in build_context(base, p, r, [x.artefacts for x in turns[:t]])
                    for i in s.ids
                ]
                corpus.append(base.decode(ids))
                corpus.append(turns[t].responses[r])
    return make_phrase_tokenizer(corpus)


@functools.lru_cache(
    maxsize=4
)  # a pure function of the code and its arguments: the commands ask twice
def shipped_fingerprint(student_steps, examples, seed):
    train = toy_problems("train")
    return fingerprint(toy_tokenizer(train, seed), train, student_steps, examples, seed)


def fingerprint(tok, train, student_steps, examples, seed):
    """A hash of what a build trains from: the toy version, the model shape, the SFT settings, the tokenizer's
    vocabulary and the first FINGERPRINT SFT examples (a change of the world, the prompts or the simulator shows
    there; the examples are drawn in order, so the first ones are those of the full build)."""
    spec = dict(
        toy=TOY_VERSION,
        shape=SHAPE,
        sft=SFT,
        steps=student_steps,
        examples=examples,
        seed=seed,
        vocab=sorted(tok.get_vocab().items()),
        data=sft_examples(tok, train, FINGERPRINT, seed + 1, progress=False),
    )
    return hashlib.sha256(json.dumps(spec).encode()).hexdigest()


def sha256_of(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def shipped_record(student_steps=STUDENT_STEPS, examples=16000, seed=0):
    """toy/student/build.json when the shipped student's files are those STUDENT_FILES pins and it is the one
    build_toy would train with these settings from this code's data (the fingerprint matches); else None."""
    return shipped(
        SHIPPED, shipped_fingerprint(student_steps, examples, seed), STUDENT_FILES
    )


def shipped(path, key, pins):
    """path/build.json (write_record's) when every file of `pins` (name -> sha256, build.json among them) is in
    `path` with the pinned bytes and the record names the fingerprint `key`; else None."""
    if unpinned(path, pins):
        return None
    with open(os.path.join(path, "build.json")) as f:
        record = json.load(f)
    return record if record.get("fingerprint") == key else None


def unpinned(path, pins):
    """The files of `pins` (name -> sha256) that `path` lacks or holds other bytes of."""
    return [
        name for name, digest in pins.items() if sha256_or_none(path, name) != digest
    ]


def sha256_or_none(path, name):
    try:
        return sha256_of(os.path.join(path, name))
    except OSError:  # not shipped
        return None


def why_trained(path, pins):
    """Why a build line trains the model shipped at `path` (toy/student/ or toy/teacher/) rather than copy it."""
    names, where = unpinned(path, pins), f"the shipped toy/{os.path.basename(path)}/"
    return (
        f"{where} holds other bytes than this code pins ({', '.join(names)}), so it is not used"
        if names
        else f"{where} was trained from other data or settings"
    )


def copy_pinned(src, dst, pins):
    """Copy the files of `pins` (name -> sha256) from src into a new directory dst, and no other file (one added
    beside them, a tokenizer's added_tokens.json say, would be read with them). Each is checked as it is copied,
    so bytes swapped since shipped() looked are refused too (ValueError)."""
    os.makedirs(dst)
    for name, digest in pins.items():
        with open(os.path.join(src, name), "rb") as f:
            data = f.read()
        if hashlib.sha256(data).hexdigest() != digest:
            raise ValueError(f"{src}/{name}: other bytes than this code pins")
        with open(os.path.join(dst, name), "wb") as f:
            f.write(data)


def pins(path):
    """{file: sha256} of every file in the directory `path`, as STUDENT_FILES (and learned.TEACHER_FILES) pin
    the shipped ones."""
    return {
        name: sha256_of(os.path.join(path, name)) for name in sorted(os.listdir(path))
    }


def write_record(path, key, seconds):
    """Write path/build.json beside a model saved at `path`: the fingerprint `key` of what it was trained from,
    its weights' sha256, and the wall seconds, load average, CPU and torch of its build (shipped reads it)."""
    record = dict(
        toy=TOY_VERSION,
        fingerprint=key,
        sha256=sha256_of(os.path.join(path, "model.safetensors")),
        seconds=round(seconds, 1),
        load=round(os.getloadavg()[0], 2),
        machine=machine(),
        torch=torch.__version__,
        threads=torch.get_num_threads(),
    )
    with open(os.path.join(path, "build.json"), "w") as f:
        f.write(json.dumps(record, indent=1) + "\n")


def build_line(cache, rebuild=False):
    """The one line said before build_toy(cache, rebuild=rebuild) starts: what it builds or copies, how long a
    build took where the shipped student was made, and where it caches it, or that the cache already holds it."""
    root = toy_root(cache)
    if built(root) and not rebuild:
        return f"toy world: the toy student and problems are loaded from the cache, {root}/"
    record = None if rebuild else shipped_record()
    if record:
        return (
            f"toy world: the toy student is the one shipped in toy/student/ ({STUDENT_STEPS:,} SFT steps, "
            f"built in {wall_time(record['seconds'])} on {record['machine']} at load average {record['load']:.1f}; "
            f"python -m toy --rebuild trains it here), copied with the toy problems to {root}/"
        )
    why = "" if rebuild else f" ({why_trained(SHIPPED, STUDENT_FILES)})"
    return (
        f"toy world: building the toy student{why} (a tokenizer, {STUDENT_STEPS:,} SFT steps of a "
        f"0.25M-parameter model) and the toy problems, once (the bar below shows the time left), cached in "
        f"{root}/"
    )


def start_toy(cache, threads=0, rebuild=False):
    """The start of every command on the toy world (python -m toy, python -m toy.ablation, python -m tools.contexts):
    torch's CPU threads set first, as train.py sets them (train.py's --threads, 0 = the cores other work leaves
    free; torch's default oversubscribes a busy machine and slowed the build from 22 steps/s to 1), then the build
    said in one line (build_line), then build_toy(cache, rebuild=rebuild) with its progress bars on stderr and,
    when it trained, one line with the time it took here and the load average it ran at (after --rebuild, also
    whether it wrote the shipped student's bytes). -> the toy world's directory."""
    print(cpu_threads(threads), flush=True)
    print(build_line(cache, rebuild), flush=True)
    trains = rebuild or not built(toy_root(cache)) and shipped_record() is None
    start = time.monotonic()
    root = build_toy(cache, rebuild=rebuild)
    if trains:
        same = (
            f"; {against_shipped(os.path.join(root, 'student'), SHIPPED)}"
            if rebuild
            else ""
        )
        print(
            f"toy world: built in {wall_time(time.monotonic() - start)} here (load average "
            f"{os.getloadavg()[0]:.1f}), cached in {root}/{same}",
            flush=True,
        )
    return root


def against_shipped(path, shipped_dir):
    """What a --rebuild says of the weights it wrote (path/model.safetensors) against those shipped in
    `shipped_dir` (toy/student/ or toy/teacher/): the same bytes, or other bytes and why they may differ."""
    name = f"the shipped toy/{os.path.basename(shipped_dir)}/"
    same = sha256_of(os.path.join(path, "model.safetensors")) == sha256_or_none(
        shipped_dir, "model.safetensors"
    )
    return (
        f"the same bytes as {name}"
        if same
        else f"other bytes than {name} (another CPU's float kernels, or other code: docs/toy.md)"
    )


def build_toy(
    cache=".cache", student_steps=STUDENT_STEPS, examples=16000, seed=0, rebuild=False
):
    """Build the toy world once; -> the directory holding student/ (save_pretrained, with the tokenizer and
    build.json) and the problem files train.jsonl, valid.jsonl and test.jsonl, under cache/TOY_VERSION. The student
    is the shipped one (toy/student/) when shipped_record says it is what these settings would train, else trained
    here (`rebuild`: always trained, replacing what the cache holds). Written to a temporary directory and renamed,
    so an interrupted build leaves nothing half-made.

    The base student learns the formats, copying and the role-blind habits from simulated episodes: the
    "pretraining" a real checkpoint would bring. The teacher is not built: it is written by hand (toy/expert.py)."""
    root = toy_root(cache)
    if built(root) and not rebuild:
        return root
    tmp = f"{root}.tmp{os.getpid()}"
    if not rebuild and shipped_record(student_steps, examples, seed):
        copy_pinned(SHIPPED, os.path.join(tmp, "student"), STUDENT_FILES)
    else:
        start, train = time.monotonic(), toy_problems("train")
        tok = toy_tokenizer(train, seed)
        student = tiny_model("qwen3", vocab_size=len(tok), seed=seed + 2, **SHAPE)
        sft(
            student,
            sft_examples(tok, train, examples, seed + 1),
            student_steps,
            desc="toy student",
            **SFT,
        )
        student.save_pretrained(os.path.join(tmp, "student"))
        tok.save_pretrained(os.path.join(tmp, "student"))
        write_record(
            os.path.join(tmp, "student"),
            fingerprint(tok, train, student_steps, examples, seed),
            time.monotonic() - start,
        )
    # the problems as files, so train.py and eval.py read them like any others
    for split in SPLITS:
        with open(os.path.join(tmp, f"{split}.jsonl"), "w") as f:
            f.writelines(json.dumps(p) + "\n" for p in toy_problems(split))
    os.makedirs(cache, exist_ok=True)
    # the cache is ours to replace: nothing in it is a user's
    if rebuild and os.path.isdir(root):
        shutil.rmtree(root)
    try:
        os.replace(tmp, root)
    # another process (say, a second ablation process) finished the same build first
    except OSError:
        if not built(root):
            raise
        shutil.rmtree(tmp)
    return root


def main(argv=None):
    for name, digest in pins(pins_args(argv).dir).items():
        print(f'    "{name}": "{digest}",')


if __name__ == "__main__":
    main()
