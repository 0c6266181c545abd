"""Teams of 2n agents, n per role (App. E.1; DECISIONS.md D15), beside the paper's pair: their Phase 1 over every
pairing of the two roles' agents (workflow.py), PAC's verdict line per agent and the attribution model's route
(verdicts.py), their evaluation (evaluation.py), and what train.py and eval.py take from here (phases.py). It
imports the pair's functions (rollout.py, prompts.py, attribution.py) and infra/; the pair imports nothing of it."""
