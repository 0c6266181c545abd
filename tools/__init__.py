"""The project's commands, each `python -m tools.NAME`: the memory plan, the benchmark loaders, the prepared GPU
check, the sampler's benchmark, contexts and transcripts a reader looks at, the lambda sweep, and the walk through
one step. They import whatever they show; nothing imports them."""
