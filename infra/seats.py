"""The names of the policies a run trains, one per agent: its seat. In the paper's workflow the seats are the two
roles themselves ("coder", "tester"); a team of 2n agents (App. E.1, teams/) adds agent m > 1 of a role as the
role's name and its number ("coder2"). A seat has its own policy, its own prompt and its own directory in a
checkpoint; the agents of a role share the role's template and condition (Eq. 23: RAS contrasts by role type).
"""

import re

from prompts import ROLES


def seat(role, m):
    """The name of agent m (1-based) of `role`."""
    return role if m == 1 else f"{role}{m}"


def role_of(name):
    """The role a seat plays: its name without the agent's number ("tester3" -> "tester")."""
    return re.sub(r"\d+$", "", name)


def number_of(name):
    """The agent's number within its role: 1 for the role's own name."""
    digits = re.search(r"\d+$", name)
    return int(digits.group()) if digits else 1


def seats(domain, n):
    """The 2n seats of a workflow's team, role by role in the workflow's order, agents in number
    order: the workflow's two roles for n = 1."""
    return tuple(seat(role, m) for role in ROLES[domain] for m in range(1, n + 1))


def team_seats(problems, n):
    """Every seat the problems' workflows need (each domain's 2n), sorted: a policy each."""
    return sorted({s for p in problems for s in seats(p["domain"], n)})
