"""Eq. 8-10 and Eq. 13 against hand-computed cases, the averaging order, and per-role gradient routing: with
mas_opd_loss and eq13_weights, the two functions train.update computes the loss with."""

import pytest
import torch

from loss import (
    eq13_weights,
    mas_opd_loss,
    opd_advantage,
    ras_advantage,
    role_advantage,
)

T = torch.tensor


def test_advantages_by_hand():
    lp_t, lp_c, lp_s = T([-1.0, -2.0]), T([-1.5, -1.0]), T([-1.2, -1.8])
    torch.testing.assert_close(opd_advantage(lp_t, lp_s), T([0.2, -0.2]))  # Eq. 8
    torch.testing.assert_close(role_advantage(lp_t, lp_c), T([0.5, -1.0]))  # Eq. 9
    # Eq. 10
    torch.testing.assert_close(ras_advantage(lp_t, lp_c, lp_s, 0.1), T([0.25, -0.3]))


def test_lambda_zero_is_plain_role_conditioned_opd():
    g = torch.Generator().manual_seed(0)
    lp_t, lp_s = -torch.rand(50, generator=g), -torch.rand(50, generator=g)
    for lp_c in (-torch.rand(50, generator=g), torch.zeros(50), -100 * torch.ones(50)):
        assert torch.equal(
            ras_advantage(lp_t, lp_c, lp_s, 0.0), opd_advantage(lp_t, lp_s)
        )


def test_advantage_is_a_stop_gradient():
    lp_t, lp_c, lp_s = (torch.randn(4, requires_grad=True) for _ in range(3))
    assert not ras_advantage(lp_t, lp_c, lp_s, 0.1).requires_grad


def test_eq13_weights_four_turns_do_not_outweigh_one():
    # episode "a": coder and tester played 4 turns each; episode "b": one turn each
    roles = ["coder", "tester"] * 4 + ["coder", "tester"]
    eps = ["a"] * 8 + ["b"] * 2
    w = eq13_weights(roles, eps)
    assert w[:8] == [1 / 16] * 8 and w[8:] == [1 / 4] * 2
    assert sum(w[:8]) == sum(w[8:]) == 0.5 and sum(w) == pytest.approx(1.0)
    # an episode that only one role played (the other's prompt overflowed): that role takes the whole episode
    assert eq13_weights(["coder", "coder", "tester"], [0, 1, 1]) == [
        1 / 2,
        1 / 4,
        1 / 4,
    ]


def test_loss_by_hand_and_long_response_does_not_outweigh_short():
    # one episode, one role, two turns: a 100-token response with adv*logp = 1 per token and a 2-token one with 3
    long_lp, short_lp = (
        torch.ones(100, requires_grad=True),
        torch.ones(2, requires_grad=True),
    )
    w = eq13_weights(["coder", "coder"], [0, 0])
    loss = mas_opd_loss([long_lp, short_lp], [torch.ones(100), 3 * torch.ones(2)], w)
    # token counts do not enter: -(mean1 + mean2) / 2
    assert loss.item() == pytest.approx(-(1 + 3) / 2)
    # two episodes x two roles, values chosen by hand
    lps = [T([-1.0, -3.0]), T([-2.0]), T([-4.0]), T([-1.0, -1.0, -1.0])]
    advs = [T([1.0, 1.0]), T([2.0]), T([0.5]), T([-1.0, 0.0, 1.0])]
    # means of adv*logp: -2, -4, -2, 0; episode 0 = (-2 + -4) / 2 = -3; episode 1 = (-2 + 0) / 2 = -1
    loss = mas_opd_loss(
        lps, advs, eq13_weights(["coder", "tester", "coder", "tester"], [0, 0, 1, 1])
    )
    assert loss.item() == pytest.approx(-(-3 + -1) / 2)


def test_gradient_of_one_role_never_reaches_the_other_policy():
    torch.manual_seed(0)
    coder, tester = torch.nn.Linear(3, 5), torch.nn.Linear(3, 5)
    x = torch.randn(4, 3)
    lp_coder = [coder(x[:2]).log_softmax(-1)[:, 0], coder(x[2:3]).log_softmax(-1)[:, 1]]
    lp_tester = [tester(x[3:]).log_softmax(-1)[:, 2]]
    logps, advs = (
        lp_coder + lp_tester,
        [torch.ones(2), -torch.ones(1), 2 * torch.ones(1)],
    )
    roles, eps = ["coder", "coder", "tester"], [0, 0, 0]
    w = eq13_weights(roles, eps)
    # role A's part of the loss
    mas_opd_loss(logps[:2], advs[:2], w[:2]).backward(retain_graph=True)
    assert tester.weight.grad is None and coder.weight.grad is not None
    only_coder = coder.weight.grad.clone()
    coder.zero_grad()
    # the full loss: coder's gradient is unchanged by tester terms
    mas_opd_loss(logps, advs, w).backward()
    torch.testing.assert_close(coder.weight.grad, only_coder)
    assert tester.weight.grad is not None


def test_gradient_accumulation_equals_one_pass():
    torch.manual_seed(1)
    p = torch.randn(6, requires_grad=True)
    logps = [p[:2], p[2:5], p[5:]]
    advs = [torch.randn(2), torch.randn(3), torch.randn(1)]
    roles, eps = ["coder", "tester", "coder"], [0, 0, 1]
    w = eq13_weights(roles, eps)
    mas_opd_loss(logps, advs, w).backward()
    full = p.grad.clone()
    p.grad = None
    for lo in range(3):  # one response per micro-batch, weights from the whole batch
        logps = [p[:2], p[2:5], p[5:]]
        mas_opd_loss(logps[lo : lo + 1], advs[lo : lo + 1], w[lo : lo + 1]).backward()
    torch.testing.assert_close(p.grad, full)


def test_hostile_inputs():
    with pytest.raises(ValueError):
        mas_opd_loss([], [], [])
    with pytest.raises(ValueError, match="response 0"):
        mas_opd_loss([torch.ones(3)], [torch.ones(2)], [1.0])
    with pytest.raises(ValueError, match="response 0"):
        mas_opd_loss([torch.ones(0)], [torch.ones(0)], [1.0])
    with pytest.raises(ValueError):
        mas_opd_loss([torch.ones(2)], [torch.ones(2)], [0.5, 0.5])
    with pytest.raises(ValueError):
        eq13_weights(["coder"], [0, 1])
