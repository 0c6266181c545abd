"""sharding.lockstep, the SPMD schedule of --fsdp: every rank runs the same one-policy micro-batches in the same
order, a rank short of a policy's responses runs padding of weight 0, and a policy no rank has runs nothing."""

from dataclasses import dataclass

import train
from scaling import sharding


@dataclass
class Item:
    seat: str
    name: str


def test_every_rank_runs_the_same_one_policy_micro_batches_padded_with_weight_zero(
    monkeypatch,
):
    coder, tester, reasoner = object(), object(), object()
    policies = {
        "coder": coder,
        "tester": tester,
        "reasoner": reasoner,
        "tool_user": object(),
    }
    mb = [
        Item("tester", "t0"),
        Item("coder", "c0"),
        Item("coder", "c1"),
        Item("coder", "c2"),
        Item("tester", "t1"),
    ]
    weights = [0.1, 0.2, 0.3, 0.4, 0.5]
    # the other rank: 1 run of coder, 3 of tester, 1 of reasoner, none of tool_user (at size 2)
    monkeypatch.setattr(
        sharding.distributed, "gather", lambda mine: [mine, [1, 3, 1, 0]]
    )
    runs = sharding.lockstep(mb, weights, 2, policies)
    got = [
        ([it.seat for it in items], [getattr(it, "name", None) for it in items], w)
        for items, w in runs
    ]
    assert got == [
        (["coder", "coder"], ["c0", "c1"], [0.2, 0.3]),
        (["coder"], ["c2"], [0.4]),
        (["tester", "tester"], ["t0", "t1"], [0.1, 0.5]),
        (["tester"], [None], [0.0]),
        (["tester"], [None], [0.0]),
        (["reasoner"], [None], [0.0]),
    ]
    pad = runs[-1][0][0]
    assert (
        pad.episode == -1 and float(pad.adv.abs().sum()) == 0 and pad.response.tokens
    )  # a token, no episode
    plain = train.micro_batches(mb, weights, 2)  # unsharded: runs of the mini-batch
    assert [[it.name for it in items] for items, _ in plain] == [
        ["t0", "c0"],
        ["c1", "c2"],
        ["t1"],
    ]
