"""The hand-written KV-cached sampler: exact against transformers, and every sampling knob behaves."""
import pytest
import torch

from sampler import _sample, generate

LENGTHS = (5, 17, 1, 30, 9)


def _prompts(seed=0, lengths=LENGTHS):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (n,), generator=g).tolist() for n in lengths]


def _rescore(model, prompt, tokens):
    """Teacher-forced log-probs of `tokens` after `prompt`, one unpadded full forward."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1:-1].float()
    return logits.log_softmax(-1).gather(1, torch.tensor(tokens)[:, None]).squeeze(1)


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_greedy_matches_transformers_generate(arch, qwen3, llama):
    model = {"qwen3": qwen3, "llama": llama}[arch]
    prompts = _prompts()
    out = generate(model, prompts, 24, temperature=0)
    for p, toks in zip(prompts, out.tokens):
        ref = model.generate(torch.tensor([p]), max_new_tokens=24, do_sample=False, eos_token_id=None,
                             pad_token_id=0)[0, len(p):].tolist()
        assert toks == ref


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_logprobs_match_teacher_forced_forward(arch, qwen3, llama):
    model = {"qwen3": qwen3, "llama": llama}[arch]
    prompts = _prompts(1)
    out = generate(model, prompts, 20, temperature=0.7, top_p=0.9, top_k=50, generator=torch.Generator().manual_seed(3))
    for p, toks, lps in zip(prompts, out.tokens, out.logprobs):
        assert len(toks) == len(lps) == 20
        torch.testing.assert_close(torch.tensor(lps), _rescore(model, p, toks), atol=1e-4, rtol=0)


def test_per_row_stop_keeps_and_scores_the_stop_token(qwen3):
    prompts = _prompts(2)
    # sampled, same seed: finished rows keep drawing, so a stop does not shift the other rows' random stream
    free = generate(qwen3, prompts, 16, generator=torch.Generator().manual_seed(0))
    row0 = free.tokens[0]
    k = next(i for i in range(1, len(row0)) if row0[i] not in row0[:i])  # a token new at position k > 0
    stop = row0[k]  # row 0 must stop right after it; other rows at their first `stop`, if any
    out = generate(qwen3, prompts, 16, stop_ids=[stop], generator=torch.Generator().manual_seed(0))
    for p, full, toks, lps in zip(prompts, free.tokens, out.tokens, out.logprobs):
        cut = full.index(stop) + 1 if stop in full else len(full)
        assert toks == full[:cut]
        torch.testing.assert_close(torch.tensor(lps), _rescore(qwen3, p, toks), atol=1e-4, rtol=0)
    assert len(out.tokens[0]) == k + 1 < 16 and out.tokens[0][-1] == stop


def test_seeded_generator_is_reproducible(qwen3):
    prompts = _prompts(3)
    a = generate(qwen3, prompts, 12, generator=torch.Generator().manual_seed(7))
    b = generate(qwen3, prompts, 12, generator=torch.Generator().manual_seed(7))
    c = generate(qwen3, prompts, 12, generator=torch.Generator().manual_seed(8))
    assert a.tokens == b.tokens and a.logprobs == b.logprobs
    assert a.tokens != c.tokens


def test_top_k_one_and_tiny_top_p_are_greedy(qwen3):
    prompts = _prompts(4)
    greedy = generate(qwen3, prompts, 10, temperature=0).tokens
    assert generate(qwen3, prompts, 10, top_k=1, generator=torch.Generator().manual_seed(0)).tokens == greedy
    assert generate(qwen3, prompts, 10, top_p=1e-9, generator=torch.Generator().manual_seed(0)).tokens == greedy


def test_top_k_only_samples_among_the_k_best(qwen3):
    prompts = _prompts(5)
    out = generate(qwen3, prompts, 15, temperature=1.5, top_k=3, generator=torch.Generator().manual_seed(1))
    for p, toks in zip(prompts, out.tokens):
        with torch.no_grad():
            logits = qwen3(torch.tensor([p + toks])).logits[0, len(p) - 1:-1]
        top3 = logits.topk(3, dim=-1).indices
        assert all(t in top3[i].tolist() for i, t in enumerate(toks))


def test_top_p_only_samples_inside_the_nucleus(llama):
    prompts = _prompts(6)
    out = generate(llama, prompts, 15, top_p=0.05, generator=torch.Generator().manual_seed(2))
    for p, toks in zip(prompts, out.tokens):
        with torch.no_grad():
            probs = llama(torch.tensor([p + toks])).logits[0, len(p) - 1:-1].softmax(-1)
        for i, t in enumerate(toks):  # mass of strictly more likely tokens must be below top_p
            assert probs[i][probs[i] > probs[i, t]].sum() < 0.05


def test_hostile_arguments(qwen3):
    assert generate(qwen3, [[1, 2]], 0).tokens == [[]]
    with pytest.raises(ValueError, match="non-empty"):
        generate(qwen3, [[1], []], 4)
    with pytest.raises(ValueError, match="non-empty"):
        generate(qwen3, [], 4)
    with pytest.raises(ValueError, match="unsupported model"):
        generate(torch.nn.Linear(2, 2), [[1]], 4)


def test_sampling_frequencies_follow_the_distribution():
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.0])
    logits = probs.log().expand(40000, 5).clone()  # the last token has -inf logit
    draws = _sample(logits, 1.0, 1.0, 0, torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=5).float() / len(draws)
    torch.testing.assert_close(freq, probs, atol=0.01, rtol=0)
    assert freq[4] == 0
    # temperature 0.5 squares and renormalises the probabilities
    draws = _sample(logits[:, :4], 0.5, 1.0, 0, torch.Generator().manual_seed(1))
    sq = probs[:4] ** 2
    torch.testing.assert_close(torch.bincount(draws, minlength=4).float() / len(draws), sq / sq.sum(), atol=0.01, rtol=0)


def test_bf16_autocast_generation_stays_close_to_fp32(qwen3):
    prompts = _prompts(7)
    ref = generate(qwen3, prompts, 6, temperature=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = generate(qwen3, prompts, 6, temperature=0)
    for a, b in zip(ref.logprobs, out.logprobs):
        torch.testing.assert_close(torch.tensor(b), torch.tensor(a), atol=0.1, rtol=0)
