"""The GRPO family of Table 1 (App. D.3, D.6.2), trained in MAS-OPD's place by train.py's loop with
a step of its own (grpo_step): the teacher's per-token A^RAS is replaced by one group-normalised
reward advantage per response; everything else of Algorithm 1 (rollout, verifier, the loss's
averaging and per-role routing of Eq. 13, optimizer, checkpoints, torchrun) is train.py's.

    python -m baselines.grpo --problems FILE --student DIR --grpo-variant mas    # train.py's flags
    --grpo-variant mas      MAS+GRPO: the two-agent workflow, G rollouts per problem; each role's
                            policy is updated with its own reward R_i = R_team + alpha R_i^local of
                            the episode (Eq. 14)
    --grpo-variant magrpo   MAGRPO: the same workflow; every turn t is rewarded, r_i^t (Eq. 14 on
                            turn t's artefacts), and credited with its Monte-Carlo return-to-go
                            sum_{t' >= t} r_i^{t'}; no critic, no clip, no KL
    --grpo-variant sa-st    SA+ST+GRPO: the main role alone (baselines/single.py), one turn, G
                            rollouts
    --grpo-variant sa-mt    SA+MT+GRPO: the main role revising its own answer until unchanged or T
                            turns

The loss is train.update's Eq. 13 with A_k = A_g for every token k of a response of rollout g:
L = -sum_i w_i mean_k sg(A_g) log pi_theta_i(y_k | x, y_<k): GRPO's policy gradient on the sampled
tokens without the KL term, and without the ratio clip, which is inactive on-policy
(DECISIONS.md D13).
"""

from config import ALPHA, COUNT, GROUP_SIZE, bounded, get_args, train_parser
from infra.cli import flags_first

# MAS+GRPO, MAGRPO, SA+ST+GRPO, SA+MT+GRPO (App. D.3)
VARIANTS = ("mas", "magrpo", "sa-st", "sa-mt")


def grpo_args(argv=None):
    """train.py's command line with the baselines' flags (App. D.3, D.4, D.6.2), args.objective "grpo"."""
    ap = train_parser("a GRPO baseline of Table 1 (App. D.3)")
    ap.set_defaults(objective="grpo")
    add = ap.add_argument_group(
        "the GRPO baselines of Table 1 (App. D.3, D.4, D.6.2): rewards in "
        "place of the teacher, which is not loaded"
    ).add_argument
    add(
        "--grpo-variant",
        choices=VARIANTS,
        default="mas",
        help="MAS+GRPO, MAGRPO, SA+ST+GRPO or SA+MT+GRPO [%(default)s]",
    )
    add(
        "--group-size",
        type=COUNT,
        default=GROUP_SIZE,
        help="G, rollouts per problem [%(default)s]",
    )
    add(
        "--alpha",
        type=bounded(float, 0),
        default=ALPHA,
        help="weight of the local rewards (Eq. 14) [%(default)s]",
    )
    args = get_args(argv, ap)
    if args.agents_per_role > 1:
        ap.error("--agents-per-role: the GRPO baselines run one agent per role")
    if args.group_size < 2:
        ap.error(
            "--group-size 1: GRPO's group advantage (App. D.3) needs 2 or more per problem"
        )
    return args


if __name__ == "__main__":  # flags first: --help and a refused flag answer before torch
    flags_first(grpo_args)

import dataclasses
from dataclasses import dataclass
from functools import partial

import torch
from tqdm import tqdm

from baselines.rewards import role_reward
from baselines.single import SINGLE, run_single, single_agent_metrics
from config import EVAL_DECODING
from eval import evaluate_policies, run_line
from infra.metrics import StepLog, mean_std, rollout_counts, rollout_metrics
from rollout import Response, final_answer, rollout_config, run_episodes
from sampler import release_decoder
from scaling import distributed
from train import batch_for_step, joint_rollout, run, update


@dataclass
class Rewarded:
    """One response on its way to train.update, in train.Scored's place: the fields the update reads."""

    # its problem's index in the step's batch: a group's G rollouts share Eq. 13's episode
    episode: int
    # its author: its gradient goes to policies[seat] only (the per-role update)
    seat: str
    response: Response  # the student's context x_i^t and its sampled tokens y_i^t
    lp_student: torch.Tensor  # log pi_theta_i(y_k | x, y_<k) from the sampler, (L,)
    # R_i of its episode (Eq. 14), or its return-to-go from its turn (MAGRPO)
    reward: float
    adv: torch.Tensor = None  # A_g on every token, (L,), detached


def group_advantages(rewards, eps=1e-6):
    """GRPO's advantage over one group: A_g = (R_g - mean(R)) / (std(R) + eps), std unbiased (over G - 1); a group
    whose rewards are all equal (or of one rollout) gets A_g = 0: nothing to prefer. list[float] -> list[float]."""
    r = torch.tensor(rewards, dtype=torch.float64)
    if len(r) < 2:
        return [0.0] * len(r)
    return ((r - r.mean()) / (r.std() + eps)).tolist()


def turn_rewards(episode, atts, role, args, cfg, first=0):
    """r_i^t of every turn t >= first role played (Eq. 14 on turn t's artefacts and checks; math's team reward on
    the answer the system would submit at t, Eq. 17). -> list of floats, one per turn from `first`."""
    out = []
    for t, (turn, att) in list(enumerate(zip(episode.turns, atts)))[first:]:
        final = final_answer(
            dataclasses.replace(episode, turns=episode.turns[: t + 1]), cfg
        )
        out.append(
            role_reward(
                role,
                episode.problem,
                turn.artefacts,
                att.checks,
                final,
                cfg.code_timeout,
                args.alpha,
            )
        )
    return out


def group_items(problem_index, group, args, cfg):
    """The Rewarded items of one problem's group, group: [(episode, its attributions)] x G. mas and the
    single-agent forms: one reward per episode and role, that of its last turn (what it submitted), given to each of
    the role's responses, normalised over the group per role. magrpo: per turn the return-to-go, normalised per
    (role, turn) over the rollouts that played that turn."""
    items, slots = [], {}  # (role, turn or None) -> [(rollout, reward)]
    for g, (e, atts) in enumerate(group):
        for role in {r for turn in e.turns for r in turn.responses}:
            if args.grpo_variant == "magrpo":
                r = turn_rewards(e, atts, role, args, cfg)
                for t in range(len(r)):
                    # Monte-Carlo return-to-go (gamma 1)
                    slots.setdefault((role, t), []).append((g, sum(r[t:])))
            else:  # the last turn's: what the episode submitted
                last = turn_rewards(e, atts, role, args, cfg, first=len(e.turns) - 1)[0]
                slots.setdefault((role, None), []).append((g, last))
    for (role, t), members in sorted(
        slots.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)
    ):  # a fixed order
        for (g, reward), a in zip(members, group_advantages([x for _, x in members])):
            turns = group[g][0].turns if t is None else group[g][0].turns[t : t + 1]
            for turn in turns:
                resp = turn.responses[role]
                items.append(
                    Rewarded(
                        problem_index,
                        role,
                        resp,
                        torch.tensor(resp.logprobs),
                        reward,
                        torch.full((len(resp.tokens),), a),
                    )
                )
    return items


def grpo_items(episodes, attributions, ids, args, cfg):
    """The baselines' Phase 2: rewards (App. D.4) and group-normalised advantages for every response. episodes:
    args.group_size consecutive rollouts per problem ids[k] (grpo_step); attributions: one list per episode.
    -> Rewarded items."""
    G, items = args.group_size, []
    for k, lo in enumerate(range(0, len(episodes), G)):
        items += group_items(
            ids[k],
            list(zip(episodes[lo : lo + G], attributions[lo : lo + G])),
            args,
            cfg,
        )
    return items


def reward_counts(episodes, attributions, items):
    """rollout_counts (infra.metrics) of a GRPO step, summable over ranks: the episode figures, the sampled tokens,
    no teacher, per role its responses and tokens (A^OPD, A^role and reverse KL 0: there is no teacher), and the
    sum of its rewards with the count of responses whose advantage is 0 (a group with nothing to prefer)."""
    counts = rollout_counts(episodes, attributions, [], 0)
    counts["tokens"] = {
        "rollout": sum(len(it.response.tokens) for it in items),
        "teacher": 0,
    }
    for it in items:
        s = counts["roles"].setdefault(
            it.seat,
            {
                "a_opd": 0.0,
                "a_role": 0.0,
                "reverse_kl": 0.0,
                "responses": 0,
                "tokens": 0,
                "reward": 0.0,
                "zero_advantage": 0,
            },
        )
        s["responses"] += 1
        s["tokens"] += len(it.response.tokens)
        s["reward"] += it.reward
        s["zero_advantage"] += bool(it.adv.numel() == 0 or it.adv[0] == 0)
    return counts


def reward_metrics(counts):
    """Per role the mean reward of its responses and the % of them with a zero advantage; {} for MAS-OPD."""
    roles = {r: s for r, s in counts.get("roles", {}).items() if "reward" in s}
    return (
        {
            "reward": {
                r: s["reward"] / max(1, s["responses"])
                for r, s in sorted(roles.items())
            },
            "zero_advantage": {
                r: 100 * s["zero_advantage"] / max(1, s["responses"])
                for r, s in sorted(roles.items())
            },
        }
        if roles
        else {}
    )


def reward_figures(counts):
    """A GRPO step's metrics.jsonl figures from its counts over all ranks (reward_counts):
    rollout_metrics' and reward_metrics'."""
    return {**rollout_metrics(counts), **reward_metrics(counts)}


def grpo_step(step, s, args, log=None):
    """One step of a GRPO baseline in train.train_step's place, its arguments alike (s.teacher:
    None, never used): Phase 1 rolls out each of this rank's problems G times in a row (its group),
    in the workflow or by the main role alone; Phase 2 is the verifier's a^t (or the attribution
    model's, s.attribute), then the rewards and group advantages (grpo_items) in the teacher's
    place; Phase 3 is train.update."""
    log = log or StepLog(step, args.device)
    cfg = rollout_config(args, progress=log.show)
    batch = batch_for_step(s.problems, step, args.batch, args.seed)
    ids = distributed.share(args.batch)
    group = [batch[i] for i in ids for _ in range(args.group_size)]
    turns = min(SINGLE.get(args.grpo_variant, 0), cfg.max_turns)
    play = partial(run_single, max_turns=turns) if turns else run_episodes
    with log.phase("rollout"):
        episodes = joint_rollout(group, s, cfg, args, play)
        log.record(episodes)
    with log.phase("attribution"):
        attributions = s.attribute(
            episodes, timeout=cfg.code_timeout, workers=args.workers
        )
    with log.phase("reward"):
        items = grpo_items(episodes, attributions, ids, args, cfg)
    with log.phase("update"):
        updated = update(items, args.batch, s.policies, s.optims, args)
    return log.close(
        reward_counts(episodes, attributions, items), updated, reward_figures
    )


def evaluate(problems, policies, tok, args):
    """train.run's held-out evaluation of a GRPO baseline: a single agent's alone (SA+ST, or SA+MT revising its
    own answer, App. D.3) for the single-agent variants, eval.evaluate_policies for the workflow's."""
    if args.grpo_variant not in SINGLE:
        return evaluate_policies(problems, policies, tok, args)
    cfg = rollout_config(args, progress=True, **EVAL_DECODING)
    on_run = lambda *one: tqdm.write(run_line(*one))
    multi = SINGLE[args.grpo_variant] > 1
    out = mean_std(
        [
            single_agent_metrics(problems, policies, tok, s, cfg, on_run, multi)
            for s in args.eval_seeds
        ]
    )
    release_decoder()
    return out


def main(argv=None, teacher=None, again="--resume"):
    """python -m baselines.grpo: train.py's loop and command line, with the baselines' flags, a
    GRPO step each iteration and no teacher (`teacher` must be None: rewards take its place);
    `again` as train.main's."""
    if teacher is not None:
        raise ValueError(
            "the GRPO baselines load no teacher: their rewards take its place"
        )
    run(grpo_args(argv), step_fn=grpo_step, evaluate=evaluate, again=again)


if __name__ == "__main__":
    main()
