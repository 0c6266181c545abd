"""Phase 1 for a team of 2n agents, n per role (App. E.1): the paper's workflows with every pairing of the two
roles' agents (DECISIONS.md D15), played with rollout.py's and prompts.py's functions.

    every Coder's program runs on every Tester's case (code); every Reasoner's answer is compared with every
    Tool-User's printed result (math): n^2 pairings, Table 3 for each
    an agent's history entry: its own artefact once, then what each pairing it took part in observed
    the roles agree when every pairing agrees; the team submits its majority's answer (D15)

Seats are infra/seats.py's names ("coder", "coder2", ...). With n = 1 every function here gives the pair's numbers,
bit for bit.
"""

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from infra.progress import TurnProgress
from infra.seats import number_of, role_of, seat, seats
from prompts import ROLES, build_context, entry_lines, fit_context, teammate
from rollout import Episode, code_env, finish, math_env, most_agreed, sample_turn


@dataclass
class TeamTurn:
    t: int
    responses: dict  # seat -> Response
    pairs: dict  # (first seat, second seat) -> the artefacts of that pairing (Table 3)
    agreed: dict  # (first seat, second seat) -> whether that pairing agreed
    agree: bool  # every pairing agreed: the team's stop (D15)

    @property
    def parsed_by(self):
        """seat -> the parsing rule that read its response (DECISIONS.md D5)."""
        return {
            s: pairs_of(s, self.pairs)[0].parsed_by[role_of(s)] for s in self.responses
        }


def pairings(domain, n):
    """Table 3 generalised (D15): every agent of the workflow's first role with every agent of its second,
    (first seat, second seat) in number order; n^2 pairs."""
    first, second = ROLES[domain]
    return [
        (seat(first, a), seat(second, b))
        for a in range(1, n + 1)
        for b in range(1, n + 1)
    ]


def pairs_of(name, pairs):
    """The artefacts of the pairings agent `name` took part in, in its partners' number order: what its history
    entry shows (D15)."""
    return [a for key, a in pairs.items() if name in key]


def seat_order(pairs):
    """The sort key of a turn's seats: the first role's agents, then the second's, each in number order (how a
    verdict and the attribution model's prompt list them, D15)."""
    firsts = {key[0] for key in pairs}
    return lambda name: (name not in firsts, number_of(name))


def diagonal(pairs):
    """The pairings (agent m of one role, agent m of the other), one per number m: between them they hold every
    agent's own artefact exactly once, so each agent's check runs once (teams.verdicts.attribute_team)."""
    return {
        key: a for key, a in pairs.items() if number_of(key[0]) == number_of(key[1])
    }


def partner(name):
    """The seat of the same number in the teammate role: where this seat's policy sits when the seats are
    exchanged (Fig. 3a, D15)."""
    return seat(teammate(role_of(name)), number_of(name))


def own_artefact(name, pairs):
    """What agent `name` wrote itself in a turn (its program, test case, answer), read from any pairing it took
    part in (all of them record it alike)."""
    return pairs_of(name, pairs)[0].own(role_of(name))


def team_entry(role, t, seen):
    """The history entry of earlier turn t of an agent of `role` (prompts.history_entry for the pairings it took
    part in, D15): its own artefact once, then what each pairing observed, in its partners' number order.
    seen: those pairings' artefacts."""
    parts = [entry_lines(role, a) for a in seen]
    lines = parts[0][0] + [line for _, observed in parts for line in observed]
    return f"Turn {t + 1}:\n" + "\n".join(lines) + "\n\n"


def agent_context(tokenizer, episode, name, cfg):
    """x_i^t of agent `name` at the episode's next turn (Eq. 1): the pairings it took part in, of completed turns
    only; None when it no longer fits the prompt limit."""
    seen = [pairs_of(name, turn.pairs) for turn in episode.turns]
    context = build_context(
        tokenizer, episode.problem, role_of(name), seen, entry=team_entry
    )
    return fit_context(context, cfg.max_prompt_tokens)


def team_environment(episode, responses, n, cfg):
    """e^t of one turn: the workflow's environment (Table 3) on every pairing's texts -> (pairs, agreed)."""
    domain = episode.problem["domain"]
    env = {"code": code_env, "math": math_env}[domain]
    pairs, agreed = {}, {}
    for key in pairings(domain, n):
        texts = {role_of(s): responses[s].text for s in key}
        pairs[key], agreed[key] = env(episode.problem, texts, cfg)
    return pairs, agreed


def team_answer(episode, cfg):
    """What the team submits from its last turn (D15): code, the program of the Coder whose program agreed with
    the most test cases (the first on a tie; Eq. 20); math, among all 2n answers the one most others are
    equivalent to, ties to the first in the order RolloutConfig.math_final gives (its role's agents first,
    D7; Eq. 17). None before the first turn."""
    if not episode.turns:
        return None
    last = episode.turns[-1]
    if episode.problem["domain"] == "code":
        votes = {}
        for (coder, tester), art in last.pairs.items():
            votes.setdefault(coder, [art.program, 0])[1] += last.agreed[(coder, tester)]
        # max keeps the first of equal counts
        return max(votes.values(), key=lambda v: v[1])[0]
    answers = {a: art.derivation_answer for (a, _), art in last.pairs.items()}
    for (_, b), art in last.pairs.items():
        answers[b] = art.program_answer if art.program_ran else None
    order = sorted(answers, key=lambda s: (role_of(s) != cfg.math_final, number_of(s)))
    return most_agreed([answers[s] for s in order])


def run_team_episodes(
    problems, policies, tokenizer, cfg, generator=None, on_done=None, *, n
):
    """rollout.run_episodes for a team of 2n agents: policies seat -> model for every seat of the problems'
    workflows (infra.seats.team_seats), the turn loop of Eq. 1-3 over every pairing (D15). Returns one Episode
    per problem, its turns TeamTurns."""
    for p in problems:
        missing = [s for s in seats(p["domain"], n) if s not in policies]
        if missing:
            raise ValueError(
                f"run_team_episodes: problem {p['id']!r} needs a policy for {missing}"
            )
    episodes = [Episode(p, []) for p in problems]
    # the episodes' programs run at once
    with ThreadPoolExecutor(max(1, cfg.workers)) as pool:
        for t in range(cfg.max_turns):
            # Eq. 1 for every agent, from completed turns only (None: it no longer fits)
            contexts = {
                k: {
                    s: agent_context(tokenizer, e, s, cfg)
                    for s in seats(e.problem["domain"], n)
                }
                for k, e in enumerate(episodes)
                if not e.stopped
            }
            for k in [k for k, ctxs in contexts.items() if None in ctxs.values()]:
                finish(
                    episodes[k],
                    "prompt_too_long",
                    team_answer(episodes[k], cfg),
                    on_done,
                )
                del contexts[k]
            if not contexts:
                break
            live = TurnProgress.open(t, cfg, sum(map(len, contexts.values())))
            # Eq. 2 for all 2n agents at once; each response answered its own role's prompt
            out = [
                {s: replace(r, role=role_of(s)) for s, r in responses.items()}
                for responses in sample_turn(
                    policies, episodes, contexts, tokenizer, cfg, generator, live
                )
            ]
            live.running_programs()
            stepped = [k for k, responses in enumerate(out) if responses]
            feedback = pool.map(
                lambda k: team_environment(episodes[k], out[k], n, cfg), stepped
            )
            for k, (pairs, agreed) in zip(stepped, feedback):
                agree = all(agreed.values())  # the roles agree: every pairing (D15)
                # Eq. 3
                episodes[k].turns.append(TeamTurn(t, out[k], pairs, agreed, agree))
                if agree:
                    finish(
                        episodes[k], "agreed", team_answer(episodes[k], cfg), on_done
                    )
            live.close()
    for e in episodes:
        if not e.stopped:
            finish(e, "max_turns", team_answer(e, cfg), on_done)
    return episodes
