"""eval.py's evaluation for a team of 2n agents (App. E.1, Fig. 5; DECISIONS.md D15): its episodes and verdicts
(teams/workflow.py, teams/verdicts.py), what it solved (the program it submitted, by its Coder's own check), each
agent's revise-or-keep decisions counted under its role, and the exchange of every agent m of a role with agent m
of the teammate role. eval.py and train.py take it from here for --agents-per-role n > 1.
"""

import time

from infra.answers import answers_equivalent
from infra.metrics import exchange_penalty, mean_std, run_figures
from infra.seats import role_of
from rollout import seeded_generator
from teams.verdicts import attribute_team_episodes
from teams.workflow import own_artefact, partner, run_team_episodes


def play_team(problems, policies, tok, seed, cfg, *, n):
    """One evaluation run of a team: its episodes (generator seed `seed`) and every turn's verdicts (one list per
    episode)."""
    gen = seeded_generator(policies, seed)
    episodes = run_team_episodes(problems, policies, tok, cfg, generator=gen, n=n)
    return episodes, attribute_team_episodes(
        episodes, timeout=cfg.code_timeout, workers=cfg.workers
    )


def team_solved(episode, atts):
    """Pass@1 of the program the team submitted (the check of the Coder that wrote it, on the last turn) or the
    accuracy of its answer (math)."""
    if episode.final is None:
        return False
    if episode.problem["domain"] == "code":
        last = episode.turns[-1]
        return bool(
            next(
                atts[-1].agents[coder]
                for (coder, _), art in last.pairs.items()
                if art.program == episode.final
            )
        )
    return answers_equivalent(episode.final, episode.problem["answer"])


def team_decisions(episodes, attributions):
    """eval.decisions for a team: every agent's, under its role (with replicas a turn disagrees when any pairing
    does)."""
    for e, atts in zip(episodes, attributions):
        for t in range(len(e.turns) - 1):
            if not e.turns[t].agree:
                for name, ok in atts[t].agents.items():
                    before = own_artefact(name, e.turns[t].pairs)
                    yield (
                        role_of(name),
                        ok,
                        before,
                        own_artefact(name, e.turns[t + 1].pairs),
                    )


def evaluate_team(
    problems, policies, tok, seeds, cfg, exchange=True, on_run=None, *, n
):
    """eval.evaluate for a team of 2n agents: its figures over seeds; with exchange, also each policy in the seat of
    its partner (the agent of the same number in the teammate role) and the exchange penalty. on_run as for
    eval.evaluate."""
    own = []
    for seed in seeds:
        own.append(_run(problems, policies, tok, seed, cfg, n, "own", on_run))
        if exchange:
            swapped = {s: policies[partner(s)] for s in policies}
            m = _run(problems, swapped, tok, seed, cfg, n, "exchanged", on_run)
            own[-1].update(exchange_penalty(own[-1], m))
    return mean_std(own)


def _run(problems, policies, tok, seed, cfg, n, seats, on_run):
    start = time.perf_counter()
    episodes, atts = play_team(problems, policies, tok, seed, cfg, n=n)
    m = run_figures(episodes, atts, team_solved, team_decisions)
    if on_run:
        on_run(seed, seats, episodes, m, time.perf_counter() - start)
    return m
