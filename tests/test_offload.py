"""--optimizer-offload (scaling/offload.py): exact, the moments in host buffers between steps, a checkpoint the same
with and without it, and a resume that continues bitwise."""

import os

import pytest
import torch
from test_train import FAST  # the tiny run of train.py's own tests

import train
from config import get_args
from infra.checkpoint import load_policies
from infra.launch import build
from infra.models import tiny_model
from scaling.offload import MOMENTS, offload_moments, parked

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _steps(offload, k=3, device=DEVICE):
    """k AdamW steps of a tiny model on a fixed loss; the moments as each step left them (kept alive here, so that
    no later tensor takes their addresses) and as they wait after it."""
    model = tiny_model(seed=3).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    inside, between = [], []
    opt.register_step_post_hook(
        lambda o, *_: inside.append(
            [st[k] for st in o.state.values() for k in MOMENTS if k in st]
        )
    )
    # its hooks after the one above: `inside` sees the moments the step used
    if offload:
        offload_moments(opt)
    ids = torch.arange(24, device=device).view(2, 12) % 200
    for step in range(k):
        loss = model(ids + step, labels=ids + step).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        between.append([st[k] for st in opt.state.values() for k in MOMENTS if k in st])
    return model, opt, inside, between


def test_offloaded_steps_are_bitwise_the_plain_ones_and_the_moments_wait_in_host_buffers():
    plain, plain_opt, _, _ = _steps(False)
    model, opt, inside, between = _steps(True)
    assert all(
        torch.equal(a, b) for a, b in zip(plain.parameters(), model.parameters())
    )
    ours, theirs = opt.state_dict(), plain_opt.state_dict()
    assert (
        ours["param_groups"] == theirs["param_groups"]
        and ours["state"].keys() == theirs["state"].keys()
    )
    for i, st in theirs["state"].items():
        assert set(st) == set(ours["state"][i]) and all(
            torch.equal(v.cpu(), ours["state"][i][k].cpu()) for k, v in st.items()
        )
    n = 2 * len(list(model.parameters()))  # exp_avg and exp_avg_sq of every parameter
    assert all(len(b) == n for b in between) and all(
        t.device.type == "cpu" for b in between for t in b
    )
    # the same host buffers after every step, never the tensors the step itself updated
    ptrs = [[t.data_ptr() for t in b] for b in between]
    assert ptrs[0] == ptrs[1] == ptrs[2]
    assert all(
        not set(p) & {t.data_ptr() for t in inside[s]} for s, p in enumerate(ptrs)
    )


@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="no CUDA here: the training device is the CPU, so the "
    "moments' host buffers and their device copies are both in RAM (the test above checks they are "
    "distinct); the placement on a GPU is checked where one is",
)
def test_on_a_gpu_the_moments_wait_pinned_on_the_host_and_step_on_the_gpu():
    _, opt, _, between = _steps(True, k=2, device="cuda")
    assert all(t.device.type == "cpu" and t.is_pinned() for b in between for t in b)
    assert all(p.device.type == "cuda" for p in opt.state)


def _same_checkpoint(a, b):
    """Bitwise: every policy's weights and every optimizer's state of two runs' checkpoints."""
    from_a, from_b = (
        torch.load(os.path.join(o, "checkpoint", "state.pt"), weights_only=False)
        for o in (a, b)
    )
    for x, y in zip(from_a["optims"], from_b["optims"]):
        assert x["param_groups"] == y["param_groups"]
        for i, st in x["state"].items():
            assert all(
                torch.equal(v.cpu(), y["state"][i][k].cpu()) for k, v in st.items()
            )
    for role in ("coder", "tester", "reasoner", "tool_user"):
        pa, pb = (
            load_policies(os.path.join(o, "checkpoint"), [role], "cpu")[0][role]
            for o in (a, b)
        )
        assert all(
            torch.equal(x, y) for x, y in zip(pa.parameters(), pb.parameters())
        ), role


def test_a_run_with_optimizer_offload_writes_the_same_checkpoint_and_resumes_bitwise(
    tmp_path, problems
):
    plain, full, part = (str(tmp_path / n) for n in ("plain", "full", "part"))
    train.main(FAST + ["--problems", problems, "--out", plain, "--steps", "2"])
    train.main(
        FAST
        + ["--problems", problems, "--out", full, "--steps", "2", "--optimizer-offload"]
    )
    _same_checkpoint(plain, full)
    train.main(
        FAST
        + ["--problems", problems, "--out", part, "--steps", "1", "--optimizer-offload"]
    )
    resume = FAST + [
        "--problems",
        problems,
        "--out",
        part,
        "--steps",
        "2",
        "--optimizer-offload",
        "--resume",
    ]
    # a resumed state comes in parked, before the first step would park it
    start = build(get_args(resume))
    assert all(
        parked(st[k])
        for opt in start.optims
        for st in opt.state.values()
        for k in MOMENTS
        if k in st
    )
    assert start.optims[0].state
    train.main(resume)
    _same_checkpoint(full, part)
