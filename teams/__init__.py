"""Teams of 2n agents, n per role (App. E.1): what a team adds to the pair's method beside the
paper's files. The seats and pairings are infra/seats.py's; PAC's verdict line per agent and the
attribution model's route are here (verdicts.py)."""
