"""The live line of a rollout turn (rollout.run_episodes with RolloutConfig.progress): what runs, responses done
and tokens per second, so that a CPU rollout that takes minutes shows it is moving; and the last line of a run that
ends early (last_line).
"""

import sys
import time
from dataclasses import dataclass, field

from tqdm import tqdm


@dataclass
class TurnProgress:
    """The figures of run_episodes' progress line for one turn: what runs (a generate call's prefill reads its
    prompts in one forward, on a CPU for minutes), responses done and tokens per second, updated at each of the
    sampler's host reads (generate's on_check) and exactly as each generate call returns."""

    bar: tqdm
    turn: str  # "turn t/T"
    start: float = field(default_factory=time.perf_counter)
    tokens: int = 0  # of the generate calls that returned
    rows: int = 0
    call_tokens: int = 0  # of the call under way, as far as its host reads tell
    call_rows: int = 0

    @classmethod
    def open(cls, t, cfg, n_responses):
        """Turn t's line (shown with cfg.progress), counting n_responses."""
        head = f"turn {t + 1}/{cfg.max_turns}"
        return cls(
            tqdm(
                total=n_responses,
                desc=head,
                leave=False,
                disable=not cfg.progress,
                bar_format="{desc}: {n}/{total} responses{postfix} [{elapsed}]",
            ),
            head,
        )

    def reading(self, n_prompts):
        self.bar.set_description_str(f"{self.turn}: reading {n_prompts} prompts")

    def check(self, new_tokens, rows_done):
        self.bar.set_description_str(f"{self.turn}: sampling", refresh=False)
        self.call_tokens += new_tokens
        self.call_rows = rows_done
        self.show()

    def call_done(self, sampled):
        self.tokens += sum(map(len, sampled.tokens))
        self.rows += len(sampled.tokens)
        self.call_tokens = self.call_rows = 0
        self.show()

    def show(self):
        tokens = self.tokens + self.call_tokens
        self.bar.n = self.rows + self.call_rows
        self.bar.set_postfix_str(
            f"{tokens:,} tokens, {tokens / (time.perf_counter() - self.start):.1f} tok/s"
        )

    def running_programs(self):
        self.bar.set_description_str(f"{self.turn}: running programs")

    def close(self):
        self.bar.close()


def last_line(text):
    """Print `text` on stderr as the last line a run shows: its progress bars end first, as each would draw itself
    again below the line when the process exits."""
    for bar in list(tqdm._instances):
        bar.close()
    print(text, file=sys.stderr, flush=True)
