"""The baselines of Table 1 that replace MAS-OPD's teacher: the single agent (SA+ST, SA+MT) and the GRPO family
with the rewards of App. D.4. Beside the paper's files: train.py and eval.py dispatch here, nothing else does."""
