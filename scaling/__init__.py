"""Past one laptop: how much memory a step needs before any weights load (memory.py, eval_memory.py, on
footprint.py's byte counts), what waits in host memory between its uses (offload.py), several ranks under
torchrun (distributed.py) and the students sharded with FSDP2 (sharding.py). It imports nothing of the project
but the paper's leaves (config.py's values, prompts.py's roles, sampler.py's cache bucket); infra/ builds on it."""
