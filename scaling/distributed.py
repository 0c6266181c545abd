"""Data parallelism for train.py under torchrun: each rank rolls out and scores its share of a step's episodes, and
the students' gradients are summed across ranks so that every rank takes the update one process would take over
the whole batch. Without torchrun every function here is the identity and nothing of torch.distributed is touched;
under torchrun a process group is joined even for one rank (--fsdp on one GPU needs one).

Gradients are summed by hand after the whole mini-batch is accumulated rather than by a DDP wrapper: a rank may
hold no response of a policy in a mini-batch, or a different number of micro-batches than the others, which DDP's
per-backward hooks cannot express without hanging. The policies and their optimizer states are replicated (with
--optimizer-offload each rank keeps its moments in its own host memory), unless --fsdp shards them
(scaling/sharding.py: FSDP2 reduce-scatters those gradients itself, as the mean, which sum_grads turns into the sum).
"""

import datetime
import os

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

# A rank waits at most this long for the others in one collective: long enough for rank 0's held-out evaluation,
# which the others wait out (torchrun stops the whole job as soon as a rank fails, so no wait is spent on that).
TIMEOUT = datetime.timedelta(hours=2)


def init(device):
    """(rank, world size, device of this rank). Under torchrun: joins the process group (NCCL on CUDA, else gloo)
    and gives each rank its own GPU of the node (LOCAL_RANK); else (0, 1, device)."""
    # not under torchrun (which also starts one process: --fsdp on one GPU)
    if "LOCAL_RANK" not in os.environ:
        return 0, 1, device
    if device.startswith("cuda"):
        device = f"cuda:{int(os.environ['LOCAL_RANK'])}"
        torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl" if device.startswith("cuda") else "gloo", timeout=TIMEOUT
    )
    return dist.get_rank(), dist.get_world_size(), device


def under_torchrun():
    """Whether this process is one of torchrun's ranks (init joined a process group), one rank or several."""
    return dist.is_initialized()


def rank():
    return dist.get_rank() if dist.is_initialized() else 0


def world_size():
    return dist.get_world_size() if dist.is_initialized() else 1


def share(n):
    """The indices of a step's n episodes that this rank rolls out and scores: rank, rank + world
    size, ...; all of them in one process."""
    return list(range(rank(), n, world_size()))


def _on():
    """Where a collective's own tensors live: NCCL takes GPU tensors only."""
    return (
        f"cuda:{torch.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"
    )


def total(value):
    """The sum over ranks of a number (every rank gets it); the number itself in one process."""
    if world_size() == 1:
        return value
    t = torch.tensor(float(value), dtype=torch.float64, device=_on())
    dist.all_reduce(t)
    return t.item()


def sum_grads(models):
    """Sum each parameter's gradient over ranks in place, so that every rank holds the gradient of Eq. 13's loss
    summed over all ranks' responses and takes the same optimizer step. A parameter no rank has a gradient for (its
    policy wrote no response of the mini-batch anywhere) keeps grad None, as in one process, where AdamW then leaves
    it alone; a zero gradient would still move it (momentum, weight decay). One with a gradient on some rank only
    gets zeros elsewhere before the sum."""
    if world_size() == 1:
        return
    params = [p for model in models for p in model.parameters()]
    # FSDP2 (--fsdp) reduce-scattered these in backward, as the mean over ranks
    for p in params:
        if isinstance(p.grad, DTensor):
            p.grad.mul_(world_size())
    params = [p for p in params if not isinstance(p, DTensor)]
    has = torch.tensor(
        [p.grad is not None for p in params], dtype=torch.float32, device=_on()
    )
    dist.all_reduce(has)  # how many ranks hold a gradient of each parameter
    for p, n in zip(params, has.tolist()):
        if n:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)


def gather(obj):
    """[obj of rank 0, obj of rank 1, ...] on every rank (any picklable object); [obj] in one process."""
    if world_size() == 1:
        return [obj]
    out = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def barrier():
    if world_size() > 1:
        dist.barrier()


def finish():
    if dist.is_initialized():
        dist.destroy_process_group()
