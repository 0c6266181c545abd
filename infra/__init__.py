"""What a run reads and writes, and what it shows: where models come from (models.py) and the seats they sit in
(seats.py), problem files and the episodes' records (data.py), the two judges of what an agent produced (answers.py:
a program's output, a math answer), what a training run starts from (launch.py), checkpoints (checkpoint.py), the
run directory (runs.py) and what one may hold (rundir.py), a step's figures and an evaluation's (metrics.py), the
live line of a rollout (progress.py), how a run stops (stopping.py), the report (report.py, png.py), and what every
command does before torch loads, eval.py's flags among it (cli.py). It imports sandbox/, scaling/ and the paper's
leaves (config.py, prompts.py, sampler.py, loss.py), nothing of the method's files above them."""
