"""The infrastructure the paper takes for granted, apart from the method's files at the top level: models and
tokenizers, problem files, the program sandbox and the two judges (a program on test cases, a math answer
against the reference), the memory plan, checkpoints, data parallelism, the step's figures and the run report,
and what a training run starts from. Nothing here imports rollout, attribution, teacher, train or eval."""
