"""train.py under torchrun on CPU (gloo): two processes take the update one process takes over the same episodes,
a run resumes under another number of ranks, and a rank that fails stops the job with its checkpoint intact."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM

import train
from infra.data import load_problems

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Greedy decoding, so that one process and two sample the same episodes; two mini-batches of two episodes.
ARGS = [
    "--problems",
    os.path.join(ROOT, "examples", "problems.jsonl"),
    "--student",
    "tiny-qwen3",
    "--teacher",
    "tiny-qwen3",
    "--batch",
    "4",
    "--mini-batch",
    "2",
    "--micro-batch",
    "3",
    "--max-new-tokens",
    "8",
    "--max-turns",
    "2",
    "--temperature",
    "0",
    "--lr",
    "1e-3",
    "--workers",
    "2",
]
# Runs train.main, with a tap that saves the gradients every update steps on (rank 0's, after the sum over ranks)
# and the AdamW moments each rank holds after each update, whether each refresh of a rollout copy (at every optimizer
# step) filled it in place with its policy's whole weights, and, if FAIL_AT is set, rank 1 failing at that step.
WRAPPER = """
import os, sys, torch
sys.path.insert(0, {root!r})
import train
from infra import launch
from scaling.offload import MOMENTS, parked
from scaling.sharding import whole
sum_grads, train_step = train.distributed.sum_grads, train.train_step
optimizer_step, follow = train.optimizer_step, launch.follow
taps, fills = [], []

def tap(models):
    sum_grads(models)
    taps.append([torch.zeros(p.shape) if p.grad is None else whole(p.grad).clone() for m in models
                 for p in m.parameters()])  # (whole: gathered from every rank's shard under --fsdp)
    if train.distributed.rank() == 0:
        torch.save(taps, {grads!r})

def counted(unique, optims, *rest):  # after each update: the AdamW moments this rank holds (elements, in host buffers)
    optimizer_step(unique, optims, *rest)
    with torch.no_grad():
        held = [((v.to_local() if hasattr(v, "to_local") else v).numel(), parked(v)) for o in optims
                for st in o.state.values() for k, v in st.items() if k in MOMENTS]
    torch.save(held, {grads!r} + f".rank{{train.distributed.rank()}}.moments")

def followed(copy, policy, *hook):  # at each optimizer step: is the copy filled in place with the whole policy?
    ptrs = [p.data_ptr() for p in copy.parameters()]
    follow(copy, policy, *hook)
    with torch.no_grad():
        same = all(torch.equal(c, whole(p).to(c.dtype)) for c, p in zip(copy.parameters(), policy.parameters()))
    fills.append((ptrs == [p.data_ptr() for p in copy.parameters()], same))
    torch.save(fills, {grads!r} + f".rank{{train.distributed.rank()}}.refresh")

def failing(step, *a, **k):
    if train.distributed.rank() == 1 and step == int(os.environ.get("FAIL_AT", -1)):
        raise RuntimeError("rank 1 fails on purpose")
    return train_step(step, *a, **k)

train.distributed.sum_grads, train.train_step, train.optimizer_step, launch.follow = tap, failing, counted, followed
if os.environ.get("GRPO"):  # a GRPO baseline: train.py's loop with its own step
    from baselines import grpo
    grpo.main(sys.argv[1:])
else:
    train.main(sys.argv[1:])
"""


def _run(tmp_path, name, ranks, extra, env=None, torchrun=False):
    """train.py through the wrapper, in one process or under torchrun with `ranks` processes (one: torchrun)."""
    script = tmp_path / f"{name}.py"
    script.write_text(WRAPPER.format(root=ROOT, grads=str(tmp_path / f"{name}.grads")))
    launch = (
        [sys.executable]
        if ranks == 1 and not torchrun
        else [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(ranks),
        ]
    )
    return subprocess.run(
        launch + [str(script)] + ARGS + extra,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
    )


def _params(out, role):
    return list(
        AutoModelForCausalLM.from_pretrained(
            os.path.join(out, "checkpoint", role)
        ).parameters()
    )


def _same_update(one, two, g1, least=0.5):
    """Every parameter of every policy of two runs' checkpoints, g1 the taps of run `one`'s two updates. AdamW's first
    step moves an entry by about lr * sign(g) wherever |g| >> eps, so an entry whose gradient is rounding noise may
    move either way: compare the entries whose gradient is clear of noise in each update the policy took part in. A
    policy absent from a mini-batch (no response of it on any rank) has no gradient there, in one process and in two
    alike, and must take no step: a zero gradient would still move every entry (momentum, weight decay) by up to
    0.7 lr. least: the share of each policy's entries that must be compared. Returns how many times a policy sat out
    a mini-batch."""
    g1, absent = [list(g) for g in g1], 0
    for role in ("coder", "reasoner", "tester", "tool_user"):
        ps1, ps2 = _params(one, role), _params(two, role)
        grads = [(g1[0].pop(0), g1[1].pop(0)) for _ in ps1]
        took_part = [any(g[u].any() for g in grads) for u in (0, 1)]
        absent += took_part.count(False)
        compared = 0
        for x, y, g in zip(ps1, ps2, grads):
            sure = torch.ones_like(x, dtype=torch.bool)
            for u in (0, 1):
                if took_part[u]:
                    sure &= g[u].abs() > 1e-4
            assert torch.allclose(x[sure], y[sure], atol=1e-6), role
            compared += int(sure.sum())
        assert compared > least * sum(x.numel() for x in ps1), (role, compared)
    assert g1 == [[], []]  # every tapped gradient belongs to a parameter compared above
    return absent


def test_two_ranks_take_the_one_process_update_and_each_run_resumes_under_the_other(
    tmp_path,
):
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    r = _run(tmp_path, "one", 1, ["--steps", "1", "--out", one])
    assert r.returncode == 0, r.stderr[-2000:]
    r = _run(tmp_path, "two", 2, ["--steps", "1", "--out", two])
    assert r.returncode == 0, r.stderr[-2000:]
    g1, g2 = torch.load(tmp_path / "one.grads"), torch.load(tmp_path / "two.grads")
    assert len(g1) == len(g2) == 2  # two mini-batches, one update each
    # The first update's gradient (Eq. 13 over episodes 0 and 1, one on each rank) is the same sum in another order.
    # The second one is taken after an AdamW step that rounding already moved apart (see below), so it is close only.
    assert any(x.abs().max() > 0 for x in g1[0])
    assert all(torch.allclose(x, y, rtol=1e-4, atol=1e-7) for x, y in zip(g1[0], g2[0]))
    assert all(torch.allclose(x, y, rtol=1e-3, atol=1e-4) for x, y in zip(g1[1], g2[1]))
    m1, m2 = (
        json.loads(open(os.path.join(o, "metrics.jsonl")).readline())
        for o in (one, two)
    )
    assert (
        m1["tokens"] == m2["tokens"]
        and m1["outcomes"] == m2["outcomes"]
        and m1["roles"].keys() == m2["roles"].keys()
    )
    assert m1["loss"] == pytest.approx(m2["loss"], rel=1e-5)
    assert _same_update(one, two, g1), (
        "no policy sat out a mini-batch: the example no longer tests that case"
    )
    state = torch.load(os.path.join(two, "checkpoint", "state.pt"), weights_only=False)
    # each rank's sampler, for a resume under two ranks
    assert len(state["rng"]["sampler"]) == 2
    # each run continues under the other number of ranks
    for out, ranks in ((two, 1), (one, 2)):
        r = _run(
            tmp_path,
            f"resume{ranks}",
            ranks,
            ["--steps", "2", "--out", out, "--resume"],
        )
        assert r.returncode == 0, r.stderr[-2000:]
        assert [
            json.loads(ln)["step"] for ln in open(os.path.join(out, "metrics.jsonl"))
        ] == [0, 1]


def test_a_failing_rank_stops_the_job_and_leaves_the_last_checkpoint_whole(tmp_path):
    out = str(tmp_path / "run")
    r = _run(
        tmp_path,
        "fail",
        2,
        ["--steps", "3", "--save-every", "1", "--out", out],
        env={"FAIL_AT": "1"},
    )
    assert r.returncode != 0 and "rank 1 fails on purpose" in r.stderr
    assert sorted(os.listdir(out)) == [
        "checkpoint",
        "metrics.jsonl",
        "run.json",
        "run.lock",
        "samples.jsonl",
    ]  # no .tmp left
    state = torch.load(os.path.join(out, "checkpoint", "state.pt"), weights_only=False)
    assert state["step"] == 0 and _params(out, "coder")


def test_grpo_runs_under_two_ranks_without_a_teacher(tmp_path):
    out = str(tmp_path / "grpo")
    grpo = ["--group-size", "2", "--temperature", "1", "--steps", "2", "--out", out]
    r = _run(tmp_path, "grpo", 2, grpo, env={"GRPO": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    ms = [json.loads(ln) for ln in open(os.path.join(out, "metrics.jsonl"))]
    assert [m["step"] for m in ms] == [0, 1] and all(
        m["updates"] == 2 and m["tokens"]["teacher"] == 0 for m in ms
    )
    # the figures of both ranks together: each rank's groups rewarded, and only the roles that played
    assert all(
        m["reward"] and set(m["reward"]) <= {"coder", "tester", "reasoner", "tool_user"}
        for m in ms
    )
    assert os.path.isfile(os.path.join(out, "checkpoint", "state.pt"))


def _moments(tmp_path, name, rank):
    """(elements, all in host buffers) of the AdamW moments rank `rank` of run `name` held after its last update."""
    held = torch.load(tmp_path / f"{name}.grads.rank{rank}.moments")
    return sum(n for n, _ in held), all(p for _, p in held)


def _checkpoint(out):
    """Every tensor of a checkpoint: the policies' weights and the optimizers' states."""
    weights = [
        p
        for role in ("coder", "reasoner", "tester", "tool_user")
        for p in _params(out, role)
    ]
    optims = torch.load(
        os.path.join(out, "checkpoint", "state.pt"), weights_only=False
    )["optims"]
    return weights + [
        v for o in optims for st in o["state"].values() for v in st.values()
    ]


def test_fsdp_ranks_take_the_one_process_update_each_holding_half_and_resume_without_it(
    tmp_path,
):
    # Seed 1 puts a math episode on one rank and a code episode on the other in each mini-batch: every rank holds no
    # response of two of the four policies, which it runs on padding to stay in step with the other.
    domains = [
        p["domain"] for p in train.batch_for_step(load_problems(ARGS[1]), 0, 4, 1)
    ]
    assert domains[0] != domains[1] and domains[2] != domains[3]
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    r = _run(tmp_path, "one", 1, ["--steps", "1", "--out", one, "--seed", "1"])
    assert r.returncode == 0, r.stderr[-2000:]
    r = _run(
        tmp_path, "two", 2, ["--steps", "1", "--out", two, "--seed", "1", "--fsdp"]
    )
    assert r.returncode == 0, r.stderr[-2000:]
    g1, g2 = torch.load(tmp_path / "one.grads"), torch.load(tmp_path / "two.grads")
    assert len(g1) == len(g2) == 2
    assert all(torch.allclose(x, y, rtol=1e-4, atol=1e-7) for x, y in zip(g1[0], g2[0]))
    # every parameter of the checkpoint (gathered, loaded with from_pretrained); one episode of a domain per
    # mini-batch leaves fewer entries clear of rounding noise than the example of the test above
    _same_update(one, two, g1, least=0.15)
    whole, _ = _moments(tmp_path, "one", 0)
    halves = [_moments(tmp_path, "two", r)[0] for r in (0, 1)]
    assert sum(halves) == whole and all(
        abs(h - whole / 2) < 0.01 * whole for h in halves
    )  # FSDP2: half each
    # its checkpoint resumes without --fsdp, in one process and in two
    for ranks in (1, 2):
        out = str(tmp_path / f"resume{ranks}")
        shutil.copytree(two, out)
        r = _run(
            tmp_path,
            f"resume{ranks}",
            ranks,
            ["--steps", "2", "--out", out, "--resume", "--seed", "1"],
        )
        assert r.returncode == 0, r.stderr[-2000:]
        assert [
            json.loads(ln)["step"] for ln in open(os.path.join(out, "metrics.jsonl"))
        ] == [0, 1]
    r = _run(
        tmp_path,
        "back",
        2,
        ["--steps", "2", "--out", one, "--resume", "--seed", "1", "--fsdp"],
    )  # and back
    assert r.returncode == 0, r.stderr[-2000:]


def test_fsdp_composes_with_the_offloads_and_changes_no_number(tmp_path):
    # --optimizer-offload moves each rank's shard of the moments to host buffers between steps: the same checkpoint,
    # bit for bit, after two steps. Before the second rollout the whole copies are refilled from the updated shards,
    # in place, at each optimizer step. --fsdp-offload (FSDP2's CPUOffloadPolicy) on one rank: the update of a run
    # without --fsdp.
    plain, off = str(tmp_path / "plain"), str(tmp_path / "off")
    for name, out, extra in (
        ("plain", plain, []),
        ("off", off, ["--optimizer-offload"]),
    ):
        r = _run(
            tmp_path,
            name,
            2,
            ["--steps", "2", "--out", out, "--seed", "1", "--fsdp"] + extra,
        )
        assert r.returncode == 0, r.stderr[-2000:]
        # the copies follow every optimizer step: 2 steps x 2 mini-batches x 4 policies
        fills = [torch.load(tmp_path / f"{name}.grads.rank{r}.refresh") for r in (0, 1)]
        assert fills == [[(True, True)] * (2 * 2 * 4)] * 2
    assert all(torch.equal(x, y) for x, y in zip(_checkpoint(plain), _checkpoint(off)))
    assert [_moments(tmp_path, "off", r)[1] for r in (0, 1)] == [True, True]
    assert [_moments(tmp_path, "plain", r)[1] for r in (0, 1)] == [False, False]
    one, host = str(tmp_path / "one"), str(tmp_path / "host")
    r = _run(tmp_path, "one", 1, ["--steps", "1", "--out", one, "--seed", "1"])
    assert r.returncode == 0, r.stderr[-2000:]
    r = _run(
        tmp_path,
        "host",
        1,
        ["--steps", "1", "--out", host, "--seed", "1", "--fsdp", "--fsdp-offload"],
        torchrun=True,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    _same_update(one, host, torch.load(tmp_path / "one.grads"), least=0.15)
    r = _run(
        tmp_path,
        "alone",
        1,
        ["--steps", "1", "--out", str(tmp_path / "alone"), "--fsdp"],
    )
    assert r.returncode == 2 and "launch train.py with torchrun" in r.stderr
