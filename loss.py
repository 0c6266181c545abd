"""The MAS-OPD objective: per-token advantages (Eq. 8-10) and the joint loss (Eq. 13).
Pure tensor functions.

All per-response quantities are 1-D tensors over that response's tokens, shape (L_i,).
"""

import torch


def opd_advantage(lp_teacher, lp_student):
    """Eq. 8: A^OPD_k = l_k^(i)(u~) - log pi_theta_i(y_k | x, y_<k). (L,), (L,) ->
    (L,)."""
    return lp_teacher - lp_student


def role_advantage(lp_teacher_target, lp_teacher_contrast):
    """Eq. 9: A^role_k = l_k^(i)(u~) - l_k^(j)(u~), j = kappa(i); the student term
    cancels. (L,), (L,) -> (L,)."""
    return lp_teacher_target - lp_teacher_contrast


def ras_advantage(lp_teacher_target, lp_teacher_contrast, lp_student, lam):
    """Eq. 10: A^RAS = A^OPD + lam * A^role, detached (a stop-gradient signal, never a
    path for gradients).

    lp_teacher_target / lp_teacher_contrast: teacher log-probs of the response tokens
    under the target and the contrast role condition; lp_student: the sampler's
    log-probs of the same tokens; all (L,). lam = 0 gives plain role-conditioned OPD
    (§3.1); the paper uses lam = 0.1 (App. D.6.3). Returns (L,).
    """
    a_opd = opd_advantage(lp_teacher_target, lp_student)
    a_role = role_advantage(lp_teacher_target, lp_teacher_contrast)
    return (a_opd + lam * a_role).detach()


def eq13_weights(seats, episode_ids, n_episodes=None):
    """The weight of each response in Eq. 13, so that the loss is sum_i w_i *
    mean_k(...).

    Averaging order (§3.4): mean over a response's tokens (mas_opd_loss), then over the
    turns an agent played in its episode, then over the agents of that episode (the
    paper's N roles), then over the episodes of the batch. So w_i = 1 / (E * N_e *
    |T_{e,i}|): an agent's four turns share what one turn would get alone. seats: each
    response's author, agent i (a pair's seats are its roles); episode_ids: its episode.
    n_episodes: E, when these responses are only part of the batch (one rank's share
    under data parallelism); default: the episodes among episode_ids. Returns a list of
    floats (summing to 1 when n_episodes is left out).
    """
    if len(seats) != len(episode_ids):
        raise ValueError(
            "eq13_weights: seats and episode_ids must have one entry per response"
        )
    turns = {}  # (episode, seat) -> number of responses
    for e, i in zip(episode_ids, seats):
        turns[(e, i)] = turns.get((e, i), 0) + 1
    agents = {}  # episode -> number of agents that answered in it
    for e, _ in turns:
        agents[e] = agents.get(e, 0) + 1
    n_episodes = n_episodes or len(agents)
    return [
        1.0 / (n_episodes * agents[e] * turns[(e, i)])
        for e, i in zip(episode_ids, seats)
    ]


def mas_opd_loss(logps, advs, weights):
    """Eq. 13, the scalar loss of joint rollouts: -sum_i w_i * mean_k sg(A^RAS_ik) *
    log pi_theta_i(y_ik | x, y_<k).

    logps[i]: (L_i,) differentiable log pi_theta_i(y_k | x, y_<k) of response i under
    its author's policy; advs[i]: (L_i,) its advantages A^RAS (detached here in any
    case); weights[i]: its w_i from eq13_weights over the whole batch. Each term carries
    gradient only into the policy that produced logps[i], so each role's parameters
    learn from that role's responses alone. Responses may be passed a slice at a time
    with their slice of the weights (gradient accumulation): the slices' losses sum to
    the batch's.
    """
    if not (len(logps) == len(advs) == len(weights)) or not logps:
        raise ValueError(
            "mas_opd_loss: need the same, non-zero number of logps, advs and weights"
        )
    for i, (lp, a) in enumerate(zip(logps, advs)):
        if lp.shape != a.shape or lp.ndim != 1 or lp.numel() == 0:
            raise ValueError(
                f"mas_opd_loss: response {i} has logps {tuple(lp.shape)} vs advs "
                f"{tuple(a.shape)}"
            )
    terms = [w * (a.detach() * lp).mean() for lp, a, w in zip(logps, advs, weights)]
    return -torch.stack(terms).sum()
