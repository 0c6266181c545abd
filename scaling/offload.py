"""What waits in host memory while it is idle, so that the GPU holds only what the running phase uses: the frozen
teacher outside its scoring (--teacher-offload) and each policy's AdamW moments outside its own optimizer step
(--optimizer-offload). Both are exact: a tensor is copied, never recomputed or cast, so no number of a run changes.

The moments (exp_avg, exp_avg_sq: 8 bytes per parameter, twice the fp32 master weights) are touched by opt.step()
alone, once per mini-batch; in between they would hold a quarter of two 1.7B students' GPU footprint idle. With
--optimizer-offload they live in pinned host buffers allocated once; each step copies one policy's moments in,
steps, copies them back into the same buffers, and frees the device copies before the next policy steps, so the
step window holds one policy's moments. The optimizer's own step hooks do it (offload_moments), so the training
loop calls opt.step() as it would without the flag. Per mini-batch that is 2 x 8 bytes per parameter over PCIe (two 1.7B
policies: 2 x 25.6 GiB, about 2 s at 25 GB/s). Checkpoints save the optimizers' state_dict as they are, so a
checkpoint is the same with and without the flag, and either run resumes from it. verl's optimizer_offload and
OpenRLHF's --adam_offload do the same. Under --fsdp a moment is a DTensor: its local shard (1/N of it) is what moves,
the DTensor around it keeps its sharding.
"""

from contextlib import contextmanager

import torch
from torch.distributed.tensor import DTensor

# The state AdamW keeps per parameter in the parameter's shape; `step` is a CPU scalar already and stays put.
MOMENTS = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")


@contextmanager
def teacher_on_device(teacher, device, offload):
    """With offload (--teacher-offload) the teacher waits on the CPU and comes to `device` only inside this block,
    while it scores (Eq. 7, Phase 2 of App. C)."""
    if offload:
        teacher.to(device)
    try:
        yield teacher
    finally:
        if offload:
            teacher.to("cpu")
            if str(device).startswith("cuda"):
                torch.cuda.empty_cache()


def _moments(opt):
    """(state dict, key) of every moment tensor the optimizer holds, in a fixed order."""
    return [
        (st, k)
        for st in opt.state.values()
        for k in MOMENTS
        if torch.is_tensor(st.get(k))
    ]


def _local(t):
    """The tensor that holds t's values on this rank: a DTensor's shard (--fsdp), else t itself."""
    if not isinstance(t, DTensor):
        return t
    with torch.no_grad():  # to_local's own tensor, not an autograd view of it
        return t.to_local()


def _like(t, local):
    """`local` in t's place: wrapped in t's sharding when t is a DTensor, else local itself."""
    if not isinstance(t, DTensor):
        return local
    return DTensor.from_local(
        local,
        t.device_mesh,
        t.placements,
        run_check=False,
        shape=t.shape,
        stride=t.stride(),
    )


def parked(t):
    """Whether a tensor is one of park's host buffers (a DTensor around one, under --fsdp)."""
    return getattr(t, "_parked", False)


@torch.no_grad()
def park(opt):
    """Move the optimizer's moments into host buffers (pinned where CUDA exists, so that the copies run at PCIe
    speed): a fresh buffer for a tensor not parked yet (the first step creates the state on the device; a resume
    loads it there), the same buffer afterwards. Returns nothing; the optimizer's state now holds the buffers."""
    pin = torch.cuda.is_available()
    for st, k in _moments(opt):
        v = st[k]
        if not parked(v):
            host = torch.empty(
                _local(v).shape, dtype=v.dtype, device="cpu", pin_memory=pin
            )
            host.copy_(_local(v))
            st[k] = _like(v, host)
            # a host buffer of this module, reused by every later step
            st[k]._parked = True


def offload_moments(opt):
    """--optimizer-offload from now on: the optimizer's moments wait in host buffers (park) and come to their
    parameters' device inside each opt.step() only, through its step hooks: copied in from the buffers before the
    step, copied back into the same buffers after it. The device copies are fresh tensors on any device (on a CPU
    too), so the moments a step uses are never the buffers that wait between steps. Returns opt."""
    held = []  # (state, key, host buffer) of the step under way

    @torch.no_grad()
    def bring(o, args, kwargs):
        where = {id(st): _local(p).device for p, st in o.state.items()}
        held[:] = [(st, k, st[k]) for st, k in _moments(o)]
        for st, k, host in held:
            device = torch.empty_like(_local(host), device=where[id(st)])
            st[k] = _like(host, device.copy_(_local(host), non_blocking=True))

    @torch.no_grad()
    def send_back(o, args, kwargs):
        for st, k, host in held:
            # blocking: a checkpoint may read the buffer next
            _local(host).copy_(_local(st[k]))
            st[k] = host
        park(o)  # the moments this step created (the first step), into new buffers

    opt.register_step_pre_hook(bring)
    opt.register_step_post_hook(send_back)
    park(opt)
    return opt
