"""The toy world: MAS-OPD end to end on a laptop CPU, through the same train.py, eval.py and everything beneath
them as the real path. It imports the method and its supports; nothing in the method imports it.

    python -m toy               # the demo: build (cached), evaluate, train, evaluate, print the table
    python -m toy.ablation      # Table 2 and the coordination metrics of Figs. 3-4, in the toy world
    python -m toy.learned_study # the same with a learned teacher (learned.py) beside the hand-written one

world.py holds the problems, the role-blind simulated agents and the cached build of the students; expert.py the
teacher, a language model written by hand that is competent on every prefix; learned.py a teacher that was
trained instead; cli.py what the commands' flags share, read before torch loads.
"""
