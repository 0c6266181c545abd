"""A team of 2n agents, n per role (App. E.1): the seats, which role each plays, and how a turn's artefacts are
paired. With one agent per role the seats are the roles themselves, so a pair team is the n = 1 case of every
function here (DECISIONS.md D15).

A seat is the name of one agent, with its own policy, its own prompt and its own directory in a checkpoint: agent 1
of a role carries the role's name ("coder"), agent m > 1 the role's name and its number ("coder2"). Agents of the
same role share the role's template and condition (Eq. 23: RAS contrasts by role type); each is a policy of its own.
"""
import re

from prompts import ROLES, role_of


def seat(role, m):
    """The name of agent m (1-based) of `role`."""
    return role if m == 1 else f"{role}{m}"


def number_of(name):
    """The agent's number within its role: 1 for the role's own name."""
    digits = re.search(r"\d+$", name)
    return int(digits.group()) if digits else 1


def seats(domain, n):
    """The 2n seats of a workflow's team, role by role in the workflow's order, agents in number order."""
    return tuple(seat(role, m) for role in ROLES[domain] for m in range(1, n + 1))


def team_seats(problems, n):
    """Every seat the problems' workflows need (each domain's 2n), sorted: a policy each."""
    return sorted({s for p in problems for s in seats(p["domain"], n)})


def pairings(domain, n):
    """Table 3 generalised (DECISIONS.md D15): every agent of the workflow's first role with every agent of its
    second, (first seat, second seat) in number order; n^2 pairs, the one pair of a two-agent team for n = 1."""
    first, second = ROLES[domain]
    return [(seat(first, a), seat(second, b)) for a in range(1, n + 1) for b in range(1, n + 1)]


def pairs_of(name, pairs):
    """The artefacts of the pairings agent `name` took part in (pairs: (first seat, second seat) -> artefacts, as
    rollout.Turn holds them), in its partners' number order: what its history entry shows (D15)."""
    return [a for key, a in pairs.items() if name in key]


def seat_order(pairs):
    """The sort key of a turn's seats (pairs as rollout.Turn holds them): the first role's agents, then the
    second's, each in number order (how a verdict and the attribution model's prompt list them, D15)."""
    firsts = {key[0] for key in pairs}
    return lambda name: (name not in firsts, number_of(name))


def diagonal(pairs):
    """The pairings (agent m of one role, agent m of the other), one per number m: between them they hold every
    agent's own artefact exactly once, so each agent's check runs once (teams.verdicts.attribute_team)."""
    return {key: a for key, a in pairs.items() if number_of(key[0]) == number_of(key[1])}


def partner(name, kappa):
    """The seat of the same number in the role kappa maps this seat's role to: where its policy sits when the seats
    are exchanged (Fig. 3a, D15)."""
    return seat(kappa[role_of(name)], number_of(name))


def own_artefact(name, pairs):
    """What agent `name` wrote itself in a turn (its program, test case, answer), read from any pairing it took part
    in (all of them record it alike)."""
    return pairs_of(name, pairs)[0].own(role_of(name))
