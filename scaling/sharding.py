"""The students sharded across ranks with PyTorch's FSDP2 under torchrun (--fsdp): each policy's fp32 master
weights, gradients and AdamW moments are 1/N per rank; the bf16 rollout copies and the teacher stay whole.

Units: one per decoder layer, plus a root that holds the rest (embeddings, final norm, the tied LM head). The root
is a small module around the policy (Sharded) that answers sampler.sequence_logprobs as the policy does: that
function calls the policy's base model and then the LM-head weight itself (its chunked, checkpointed head), outside
any forward of the CausalLM, so a root on the CausalLM would never gather its parameters. Sharded's base model is
the root itself: calling it gathers the root's parameters, which stay whole (reshard_after_forward=False) through
the head that follows and the backward. Optimizers are built on the sharded parameters, after wrapping.

FSDP2 is SPMD: every rank must run the same forward and backward calls of a policy, in the same order, because each
gathers and reduce-scatters with the others. A rank's share of a mini-batch may hold no response of a policy, or
fewer micro-batches than another rank's, so lockstep gives every rank the same sequence of one-policy
micro-batches and fills the missing ones with a padding response of weight 0 (its gradient is zero, its
collectives happen). A policy with no response of the mini-batch on any rank runs nothing and takes no step. FSDP2
averages the gradients over ranks; distributed.sum_grads multiplies them back by N for Eq. 13's sum (gloo refuses
the PREMUL_SUM a gradient divide factor would need).

Checkpoints hold full states in the layout of an unsharded run (gathered to rank 0 on the CPU): the policies as
from_pretrained directories, the optimizers as torch's own state_dict, keyed by parameter index. So a run resumes
under any number of ranks, with or without --fsdp.
"""

import math
from dataclasses import dataclass, field

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard
from torch.distributed.tensor import DTensor

from scaling import distributed

# whole tensors, on rank 0's CPU
FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


class Sharded(torch.nn.Module):
    """The FSDP2 root around one policy (`lm`, a CausalLM), which sampler.sequence_logprobs reads like the policy
    itself: its base model is this module (so that a call gathers the root's parameters), its output embeddings
    the policy's."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    @property
    def base_model(self):
        return self

    def forward(self, **inputs):
        return self.lm.base_model(**inputs)

    def get_output_embeddings(self):
        return self.lm.get_output_embeddings()


def shard(model, offload=False):
    """FSDP2 over a policy already on its device: a unit per decoder layer, then the root (Sharded), whole from its
    forward until the backward is done. offload (--fsdp-offload): FSDP2's CPUOffloadPolicy, the shards (weights,
    gradients, so the optimizer's moments and step too) in host memory, each unit's weights copied to the device for
    its forward and backward only."""
    policy = (
        CPUOffloadPolicy(pin_memory=torch.cuda.is_available())
        if offload
        else OffloadPolicy()
    )
    for layer in model.base_model.layers:
        fully_shard(layer, offload_policy=policy)
    root = Sharded(model)
    fully_shard(root, offload_policy=policy, reshard_after_forward=False)
    return root


def unwrap(model):
    """The CausalLM itself (from_pretrained's kind) of a policy, sharded or not."""
    return model.lm if isinstance(model, Sharded) else model


def whole(t):
    """A parameter's full value: gathered from every rank when sharded (a collective: every rank calls it)."""
    if not isinstance(t, DTensor):
        return t
    # a host shard (--fsdp-offload) joins its device's gather
    return t.to(t.device_mesh.device_type).full_tensor()


@dataclass
class Padding:
    """A response of weight 0 that keeps a rank in step with the others (FSDP2's SPMD): the fields update reads."""

    seat: str
    episode: int = -1  # no episode: metrics.logprob_gap leaves it out
    response: object = None  # context_ids and tokens: one token each
    lp_student: torch.Tensor = field(default_factory=lambda: torch.zeros(1))
    adv: torch.Tensor = field(default_factory=lambda: torch.zeros(1))


@dataclass
class _Ids:
    context_ids: list
    tokens: list


def lockstep(mb, weights, size, policies):
    """[(items, Eq. 13 weights)] of one mini-batch under --fsdp, gradients accumulated over them
    (train.update's micro-batches, made SPMD): per policy in distinct order, its responses in runs
    of `size`, as many runs on every rank as on the rank with the most, the missing ones a Padding
    of weight 0; a policy without a response of this mini-batch on any rank gets none."""
    models = list(dict.fromkeys(policies.values()))
    mine = [[k for k, it in enumerate(mb) if policies[it.seat] is m] for m in models]
    runs = [
        max(counts)
        for counts in zip(
            *distributed.gather([math.ceil(len(ks) / size) for ks in mine])
        )
    ]
    out = []
    for m, ks, n in zip(models, mine, runs):
        seat = next(s for s, p in policies.items() if p is m)
        for j in range(n):
            part = ks[j * size : (j + 1) * size]
            out.append(
                ([mb[k] for k in part], [weights[k] for k in part])
                if part
                else ([Padding(seat, response=_Ids([0], [0]))], [0.0])
            )
    return out


def full_states(models, optims):
    """(weights, optimizer states) to checkpoint, one per distinct policy: each sharded policy's full state dict and
    its optimizer's full state in torch's own layout (keyed by parameter index), on rank 0's CPU (empty elsewhere;
    every rank must call this); an unsharded policy's weights None (save_pretrained reads the model) and its
    optimizer's state_dict()."""
    weights, states = [], []
    for model, opt in zip(models, optims):
        if not isinstance(model, Sharded):
            weights.append(None)
            states.append(opt.state_dict())
            continue
        weights.append(get_model_state_dict(model.lm, options=FULL))
        full = get_optimizer_state_dict(model, opt, options=FULL)
        states.append(
            _rekeyed(
                full, {name: i for i, (name, _) in enumerate(model.named_parameters())}
            )
        )
    return weights, states


def _rekeyed(state, key):
    """An optimizer state dict with every parameter key k (of its state and its param_groups) replaced by key[k]:
    names to torch's indices, or back."""
    return {
        "state": {key[k]: v for k, v in state.get("state", {}).items()},
        "param_groups": [
            {**g, "params": [key[k] for k in g["params"]]}
            for g in state.get("param_groups", [])
        ],
    }


def load_optimizer(model, opt, state):
    """Load a checkpoint's optimizer state (torch's layout, full) into a policy's optimizer, sharded or not."""
    if not isinstance(model, Sharded):
        opt.load_state_dict(state)
        return
    full = _rekeyed(state, [name for name, _ in model.named_parameters()])
    set_optimizer_state_dict(
        model, opt, full, options=StateDictOptions(full_state_dict=True)
    )
