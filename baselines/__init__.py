"""The baselines of Table 1 that replace MAS-OPD's teacher, each with its own command: the single agent (SA+ST,
SA+MT; python -m baselines.single) and the GRPO family with the rewards of App. D.4 (python -m baselines.grpo, its
flags and its evaluation here). It imports train.py's loop and eval.py's evaluation; nothing of the method imports
it."""
