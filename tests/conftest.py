"""Shared fixtures: the in-code tokenizer, tiny random models, scripted agents, a code + math problem file."""
import json

import pytest

from models import make_tokenizer, tiny_model
from sampler import Generation
from tests.test_workflows import APPLES, SUM


@pytest.fixture(scope="session")
def tok():
    return make_tokenizer()


@pytest.fixture(scope="session")
def qwen3():
    return tiny_model("qwen3", layers=2, hidden=64, heads=4, kv_heads=2, seed=0)


@pytest.fixture(scope="session")
def llama():
    return tiny_model("llama", layers=2, hidden=64, heads=4, kv_heads=2, seed=1)


class Scripted:
    """A scripted agent: call k (one per turn when it sits in one seat) answers script[k] to every prompt.

    Records the decoded prompts it was given so tests can check what the agent saw."""

    def __init__(self, tok, script):
        self.tok, self.script, self.seen = tok, list(script), []

    def __call__(self, prompts):
        k = min(len(self.seen), len(self.script) - 1)
        self.seen.append([self.tok.decode(p) for p in prompts])
        ids = self.tok(self.script[k], add_special_tokens=False)["input_ids"] + [self.tok.convert_tokens_to_ids("<|im_end|>")]
        return Generation([list(ids) for _ in prompts], [[-1.0] * len(ids) for _ in prompts])


@pytest.fixture
def scripted(tok):
    return lambda script: Scripted(tok, script)


@pytest.fixture(scope="module")
def problems(tmp_path_factory):
    """A problem file with one code (stdio) and one math problem: every role plays."""
    path = tmp_path_factory.mktemp("data") / "p.jsonl"
    path.write_text(json.dumps(SUM) + "\n" + json.dumps(APPLES) + "\n")
    return str(path)
