"""What train.py and eval.py take from teams/: Phase 1 and Phase 2a for a team of 2n agents (--agents-per-role n > 1)
and for PAC's attribution model (--attribution model, App. E.1.3), whose verdicts are a team's. The paper's pair with
its verifier takes neither: (None, None), the pair's own functions.
"""

from functools import partial

from teams.verdicts import attribute_by_model, attribute_team_episodes
from teams.workflow import run_team_episodes


def phases(args, judge=None, tokenizer=None):
    """(play, attribute) for train.train_step: Phase 1 (rollout.run_episodes' arguments) and Phase 2a (a function of
    (episodes, *, timeout, workers) -> a^t per turn). judge: the attribution model (infra.launch.attribution_judge),
    None for the verifier. (None, None) for the pair with the verifier."""
    n = args.agents_per_role
    play = partial(run_team_episodes, n=n) if n > 1 else None
    if judge is not None:
        return play, lambda episodes, **_: attribute_by_model(
            episodes, judge, tokenizer
        )
    return play, attribute_team_episodes if n > 1 else None
