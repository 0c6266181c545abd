"""scaling/memory.py, scaling/footprint.py and tools/memory.py: exact parameter counts, the activation formula
against what autograd saves, monotonicity of the plan, its table and the fit report."""

import os
import re

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

import config
from infra.models import QWEN3, config_of
from scaling import footprint, memory
from scaling.footprint import layer_act_bytes, outside_layers_bytes, param_count
from scaling.memory import GiB, fit_report, fits, format_plan, plan
from tools.memory import dry_run
from tools.memory import main as memory_main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples", "problems.jsonl")


def configs(args):
    """(the student's, the teacher's) config of train.py's parsed args."""
    return config_of(args.student), config_of(args.teacher)


def plan_inputs(args, n_policies, world=1):
    return (*configs(args), memory.plan_keywords(args, n_policies, world))


S, T = QWEN3["Qwen3-1.7B"], QWEN3["Qwen3-14B"]


def _tiny_config(arch, **kw):
    common = dict(
        vocab_size=301,
        hidden_size=96,
        intermediate_size=160,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=512,
    )
    common.update(kw)
    return Qwen3Config(**common) if arch == "qwen3" else LlamaConfig(**common)


def _build(cfg):
    return (Qwen3ForCausalLM if cfg.model_type == "qwen3" else LlamaForCausalLM)(cfg)


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("bias", [False, True])
def test_param_count_is_exact(arch, tie, bias):
    extra = dict(mlp_bias=bias) if arch == "llama" else {}
    cfg = _tiny_config(arch, tie_word_embeddings=tie, attention_bias=bias, **extra)
    model = _build(cfg)
    assert param_count(cfg) == sum(p.numel() for p in model.parameters())
    # the same through the dict path (QWEN3 table style)
    as_dict = {
        k: getattr(cfg, k)
        for k in (
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "intermediate_size",
            "vocab_size",
            "tie_word_embeddings",
            "attention_bias",
            "model_type",
        )
    }
    as_dict.update(extra)
    assert param_count(as_dict) == param_count(cfg)


def test_param_count_of_real_shapes_matches_the_model_cards():
    assert param_count(S) == 1_720_574_976  # "1.7B, 1.4B non-embedding" (tied)
    assert param_count(T) == 14_768_307_200  # "14.8B"
    assert (
        4.0e9 < param_count(QWEN3["Qwen3-4B"]) < 4.1e9
        and 8.1e9 < param_count(QWEN3["Qwen3-8B"]) < 8.3e9
    )
    # config only, nothing built
    real = Qwen3Config(**{k: v for k, v in S.items() if k != "model_type"})
    assert param_count(real) == param_count(S)


def _saved_bytes(model, L, pad, amp, B=2):
    """Bytes of the distinct non-parameter storages autograd saves for one base-model forward of B x L tokens
    (walks the graph's _saved_* attributes), leaving out the weights autocast copies (they do not scale with L)."""
    torch.manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (B, L))
    mask = torch.ones(B, L, dtype=torch.long)
    if pad:
        mask[0, L - 3 :] = 0
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        h = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen, stack, done = {}, [h.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in done:
            continue
        done.add(node)
        for name in dir(node):
            if not name.startswith("_saved_") or (
                node.name() == "MmBackward0" and name == "_saved_mat2"
            ):
                continue  # mm(x, W^T): mat2 is a weight or autocast's bf16 copy of one
            try:
                value = getattr(node, name)
            except Exception:
                continue
            for x in value if isinstance(value, (tuple, list)) else [value]:
                if (
                    isinstance(x, torch.Tensor)
                    and x.untyped_storage().data_ptr() not in params
                ):
                    seen[x.untyped_storage().data_ptr()] = x.untyped_storage().nbytes()
        stack += [n for n, _ in node.next_functions]
    return sum(seen.values())


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
@pytest.mark.parametrize("amp", [False, True])
@pytest.mark.parametrize("pad", [False, True])
def test_activation_formula_matches_what_autograd_saves(arch, amp, pad):
    """Per token and layer, layer_act_bytes (+ outside_layers_bytes, + the saved mask a*L^2 per sequence per
    layer when padded) against the real saved tensors, as the growth from L = 40 to L = 80 (B = 2)."""
    cfg = _tiny_config(arch, tie_word_embeddings=True)
    model = _build(cfg).float().train()
    p, a = 4, (2 if amp else 4)
    measured = _saved_bytes(model, 80, pad, amp) - _saved_bytes(model, 40, pad, amp)

    def formula(L):
        per_token = cfg.num_hidden_layers * layer_act_bytes(
            cfg, p, a, masked=pad
        ) + outside_layers_bytes(cfg, p)
        return 2 * L * per_token + (cfg.num_hidden_layers * 2 * a * L * L if pad else 0)

    predicted = formula(80) - formula(40)
    assert abs(predicted - measured) / measured < 0.03, (predicted, measured)


def test_checkpointing_lowers_activations_and_total():
    on, off = plan(S, T, grad_checkpointing=True), plan(S, T, grad_checkpointing=False)
    assert (
        on["bytes"]["activations, checkpointing"]
        < on["bytes"]["activations, no checkpointing"] / 5
    )
    assert on["phases"]["update"] < off["phases"]["update"]
    assert on["phases"]["rollout"] == off["phases"]["rollout"]


def test_shared_policy_lowers_weights_optimizer_and_update_but_doubles_the_generate_batch():
    two, one = plan(S, T, n_policies=2), plan(S, T, n_policies=1)
    assert (
        one["persistent"] < two["persistent"]
        and one["phases"]["update"] < two["phases"]["update"]
    )
    assert one["settings"]["generate_batch"] == 2 * two["settings"]["generate_batch"]
    # with the rollout batch halved (same prompts per generate call) the shared policy is smaller in total
    assert plan(S, T, n_policies=1, rollout_batch=64)["total"] < two["total"]


def test_shorter_responses_lower_kv_cache_activations_and_teacher():
    long, short = plan(S, T, response_len=4096), plan(S, T, response_len=2048)
    for item in (
        "KV cache (one generate call)",
        "activations, checkpointing",
        "activations, no checkpointing",
        "teacher scoring activations",
    ):
        assert short["bytes"][item] < long["bytes"][item], item
    assert short["total"] < long["total"]


def test_smaller_batches_lower_their_phase():
    assert (
        plan(S, T, micro_batch=1)["phases"]["update"]
        < plan(S, T, micro_batch=8)["phases"]["update"]
    )
    small, big = plan(S, T, rollout_batch=8), plan(S, T, rollout_batch=128)
    assert (
        small["bytes"]["KV cache (one generate call)"] * 16
        == big["bytes"]["KV cache (one generate call)"]
    )
    assert (
        plan(S, T, kv_bytes=4)["bytes"]["KV cache (one generate call)"]
        == 2 * big["bytes"]["KV cache (one generate call)"]
    )  # bf16 autocast caches in bf16 by default
    assert (
        plan(S, T, rollout_chunk=16)["bytes"]["KV cache (one generate call)"] * 8
        == big["bytes"]["KV cache (one generate call)"]
    )  # 128 prompts per policy in rounds of 16
    assert (
        plan(S, T, rollout_attention="math")["phases"]["rollout"]
        > big["phases"]["rollout"]
    )


def test_kv_cache_formula_and_persistent_items():
    pl = plan(S, T, rollout_batch=4, n_policies=2)
    # 2 (K, V) x layers x B x Hkv x (prompt + new, rounded up to the sampler's bucket) x head_dim x 2 bytes (bf16)
    assert (
        pl["bytes"]["KV cache (one generate call)"]
        == 2 * 28 * 4 * 8 * (8192 + 4096) * 128 * 2
    )
    odd = plan(S, T, rollout_batch=4, prompt_len=8000, response_len=4000)["bytes"][
        "KV cache (one generate call)"
    ]
    assert odd == 2 * 28 * 4 * 8 * 12032 * 128 * 2  # 12,000 tokens -> 94 buckets of 128
    P = param_count(S)
    assert pl["bytes"]["student weights (fp32 master)"] == 2 * 4 * P
    assert pl["bytes"]["AdamW moments (2 x fp32)"] == 2 * 8 * P
    assert pl["bytes"]["rollout copies (bf16, launch.rollout_copies)"] == 2 * 2 * P
    assert (
        "rollout copies (bf16, launch.rollout_copies)"
        not in plan(S, T, precision="fp32")["bytes"]
    )
    assert pl["bytes"]["teacher weights"] == 2 * param_count(T)
    assert pl["total"] == pl["persistent"] + max(pl["phases"].values())
    off = plan(S, T, rollout_batch=4, teacher_offload=True)
    assert off["persistent"] == pl["persistent"] - pl["bytes"]["teacher weights"]


def test_format_plan_lists_every_item_in_gib():
    pl = plan(S, T)
    text = format_plan(pl)
    for item in (
        "student weights (fp32 master)",
        "AdamW moments",
        "teacher weights",
        "gradients",
        "KV cache",
        "activations, checkpointing",
        "teacher scoring activations",
        "LM-head logits chunk",
        "TOTAL",
    ):
        assert item in text, item
    assert f"{pl['total'] / GiB:.2f} GiB" in text.splitlines()[-1]
    assert all(
        line.rstrip().endswith(("GiB", "not used", "largest", "not the sum)"))
        or ":" in line
        or line.startswith(("persistent", "phase"))
        for line in text.splitlines()
    )


def test_fit_report_names_options_and_finds_what_fits():
    small = plan(
        QWEN3["Qwen3-1.7B"],
        QWEN3["Qwen3-1.7B"],
        prompt_len=512,
        response_len=256,
        rollout_batch=8,
    )
    ok = fit_report(S, S, 80, prompt_len=512, response_len=256, rollout_batch=8)
    assert (
        fits(small, 80)
        and ok.splitlines()[1].startswith("  as given")
        and ok.splitlines()[1].endswith(" fits")
    )
    # every option lowers something here
    text = fit_report(S, T, 80, grad_checkpointing=False)
    assert "does not fit" in text
    for name in memory.OPTIONS:
        assert name in text, name
    assert "smaller rollout batch" in text and "smallest combinations that fit" in text
    assert "rollout batch" in text.splitlines()[-1]


def test_dry_run_uses_train_args():
    args = config.get_args(
        [
            "--problems",
            EXAMPLES,
            "--student",
            "Qwen3-1.7B",
            "--teacher",
            "Qwen3-14B",
            "--shared-policy",
            "--max-new-tokens",
            "1024",
            "--batch",
            "16",
            "--micro-batch",
            "2",
            "--grad-checkpointing",
            "--precision",
            "bf16",
        ]
    )
    text = dry_run(args)
    assert (
        "1 student policy" in text
        and "response 1024" in text
        and "rollout batch 16" in text
    )
    assert "grad checkpointing on" in text and "GPU 80 GiB" in text
    # under torchrun each of 4 GPUs rolls out 4 of the 16 episodes
    four = dry_run(args, world=4)
    peak = lambda t: float(re.search(r"TOTAL peak.* ([0-9.]+) GiB", t).group(1))
    assert (
        "rollout batch 4" in four
        and "TOTAL peak = persistent + rollout" in text
        and peak(four) < peak(text)
    )
    small = dry_run(
        config.get_args(
            [
                "--student",
                "tiny-qwen3",
                "--teacher",
                "tiny-qwen3",
                "--problems",
                EXAMPLES,
            ]
        )
    )
    # code + math: 4 roles
    assert "4 student policies" in small and small.splitlines()[-1].endswith(" fits")
    with pytest.raises(
        ValueError, match="no-such-model-dir'. no such file or directory"
    ):
        config_of(os.path.join(ROOT, "no-such-model-dir"))


def test_command_line_reads_train_flags_and_loads_nothing(tmp_path, capsys):
    out = str(tmp_path / "never")
    memory_main(
        [
            "--gib",
            "141",
            "--student",
            "Qwen/Qwen3-1.7B",
            "--teacher",
            "Qwen/Qwen3-14B",
            "--problems",
            EXAMPLES,
            "--batch",
            "128",
            "--grad-checkpointing",
            "--out",
            out,
        ]
    )
    text = capsys.readouterr().out
    assert (
        "teacher 14,768,307,200" in text
        and "TOTAL peak" in text
        and "GPU 141 GiB" in text
    )
    # planned for a GPU by default
    assert "'precision': 'bf16'" in text and not os.path.exists(out)
    with pytest.raises(SystemExit) as e:
        memory_main(
            [
                "--student",
                "Qwen3-1.7B",
                "--teacher",
                "Qwen3-14B",
                "--problems",
                str(tmp_path / "gone"),
            ]
        )
    assert e.value.code == 2 and "gone" in capsys.readouterr().err


@pytest.mark.parametrize("teacher", ["Qwen3-14B", "Qwen3-8B"])
def test_the_gpu_preset_fits_one_h200_without_memory_flags_and_the_paper_preset_does_not(
    teacher,
):
    for preset, fit in (("gpu", True), ("paper", False)):
        args = config.get_args(
            [
                "--problems",
                EXAMPLES,
                "--student",
                "Qwen3-1.7B",
                "--teacher",
                teacher,
                "--preset",
                preset,
                "--precision",
                "bf16",
            ]
        )
        s, t, kw = plan_inputs(args, 2)  # a one-domain file: two policies
        assert fits(plan(s, t, **kw), 141) == fit, preset


def test_optimizer_offload_moves_the_moments_to_the_host_and_one_policy_s_into_the_step():
    kw = dict(micro_batch=1, rollout_batch=4, rollout_chunk=4, grad_checkpointing=True)
    on, off = (
        plan(S, T, **kw),
        plan(S, T, optimizer_offload=True, teacher_offload=True, **kw),
    )
    P, moments = param_count(S), on["bytes"]["AdamW moments (2 x fp32)"]
    assert off["persistent"] == on["persistent"] - moments - 2 * param_count(T)
    assert off["host"] == {
        "AdamW moments (2 x fp32)": 2 * 8 * P,
        "teacher weights": 2 * param_count(T),
    }
    assert on["host"] == {}
    # the step window: one policy's moments (not both) beside the gradients and AdamW's temporary
    assert (
        off["bytes"]["AdamW step window"]
        == 8 * P + 4 * P
        == on["bytes"]["AdamW step window"] + 8 * P
    )
    # activations far below the window: the window sets the phase
    small = dict(kw, prompt_len=64, response_len=64)
    assert (
        plan(S, T, optimizer_offload=True, **small)["phases"]["update"]
        == 2 * 4 * P + 12 * P
    )
    text = format_plan(off)
    assert (
        "AdamW moments (--optimizer-offload)" in text
        and "teacher weights (--teacher-offload)" in text
    )
    assert re.search(
        r"= host +%.2f GiB" % ((2 * 8 * P + 2 * param_count(T)) / GiB), text
    )


@pytest.mark.parametrize(
    "student, gib, flags, usable",
    [
        ("Qwen3-1.7B", 80, ["--optimizer-offload", "--teacher-offload"], 72.0),
        (
            "Qwen3-4B",
            141,
            ["--optimizer-offload", "--teacher-offload", "--grad-checkpointing"],
            126.9,
        ),
    ],
)
def test_the_papers_method_fits_its_cards_with_the_offloads(
    student, gib, flags, usable
):
    """Two independent policies (a one-domain file), the gpu preset, the Qwen3-14B teacher."""
    args = config.get_args(
        [
            "--problems",
            EXAMPLES,
            "--student",
            student,
            "--teacher",
            "Qwen3-14B",
            "--preset",
            "gpu",
            "--precision",
            "bf16",
        ]
        + flags
    )
    s, t, kw = plan_inputs(args, 2)
    assert fits(plan(s, t, **kw), gib) and plan(s, t, **kw)["total"] < usable * GiB
    without = config.get_args(
        [
            "--problems",
            EXAMPLES,
            "--student",
            student,
            "--teacher",
            "Qwen3-14B",
            "--preset",
            "gpu",
            "--precision",
            "bf16",
        ]
        + flags[1:]
    )
    assert not fits(
        plan(*plan_inputs(without, 2)[:2], **plan_inputs(without, 2)[2]), gib
    )


def test_the_fit_report_offers_the_papers_method_first_and_marks_a_shared_policy():
    args = config.get_args(
        [
            "--problems",
            EXAMPLES,
            "--student",
            "Qwen3-1.7B",
            "--teacher",
            "Qwen3-14B",
            "--preset",
            "gpu",
            "--precision",
            "bf16",
        ]
    )
    s, t, kw = plan_inputs(args, 2)
    text = fit_report(s, t, 80, **kw)
    singles = text.split("one change at a time")[1].split("smallest combinations")[0]
    # 2,048 would lengthen the preset's 1,024-token responses
    assert "--max-new-tokens 2048" not in singles
    # rounds of 16 change nothing for 16 prompts
    assert "--rollout-chunk 16" not in singles
    assert "--optimizer-offload" in singles and "--teacher-offload" in singles
    combos = [
        ln
        for ln in text.split("smallest combinations")[1].splitlines()[1:]
        if ln.strip()
    ]
    shared = [i for i, ln in enumerate(combos) if "--shared-policy" in ln]
    assert (
        shared and min(shared) > 0 and shared == list(range(min(shared), len(combos)))
    )  # the paper's first
    assert all(
        ln.endswith(memory.NOT_PAPER) for ln in combos if "--shared-policy" in ln
    )
    assert "--optimizer-offload" in combos[0] and "--teacher-offload" in combos[0]
    assert all(
        memory.NOT_PAPER in ln for ln in singles.splitlines() if "--shared-policy" in ln
    )


def test_qwen3_0_6b_is_planned_offline():
    # "0.6B, 0.44B non-embedding" (tied)
    assert param_count(QWEN3["Qwen3-0.6B"]) == 596_049_920
    assert config_of("Qwen/Qwen3-0.6B") == QWEN3["Qwen3-0.6B"]


def test_check_fits_refuses_offloads_the_host_cannot_hold_and_names_only_the_papers_method(
    monkeypatch,
):
    base = [
        "--problems",
        EXAMPLES,
        "--student",
        "Qwen3-1.7B",
        "--teacher",
        "Qwen3-14B",
        "--preset",
        "gpu",
        "--precision",
        "bf16",
    ]
    free = {"cuda": 80 * GiB, "cpu": 40 * GiB}
    monkeypatch.setattr(
        memory, "available_bytes", lambda device: free[device.split(":")[0]]
    )
    # a GPU machine, as far as the flags are concerned
    monkeypatch.setattr(config, "device", lambda name: name)
    base += ["--device", "cuda"]
    # a one-domain file: two policies, as the paper
    with pytest.raises(ValueError) as e:
        memory.check_fits(config.get_args(base), configs(config.get_args(base)), 2)
    assert "it would fit with --optimizer-offload --teacher-offload (python" in str(
        e.value
    )
    with pytest.raises(
        ValueError, match=r"keep 53.1 GiB in host memory .* 40.0 GiB of RAM available"
    ):
        memory.check_fits(
            config.get_args(base + ["--optimizer-offload", "--teacher-offload"]),
            configs(
                config.get_args(base + ["--optimizer-offload", "--teacher-offload"])
            ),
            2,
        )
    free["cpu"] = 64 * GiB
    assert memory.check_fits(
        config.get_args(base + ["--optimizer-offload", "--teacher-offload"]),
        configs(config.get_args(base + ["--optimizer-offload", "--teacher-offload"])),
        2,
    )
    # two processes on this machine: twice the host memory
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(
        ValueError, match=r"keep 106.3 GiB in host memory .* 2 processes here"
    ):
        memory.check_fits(
            config.get_args(base + ["--optimizer-offload", "--teacher-offload"]),
            configs(
                config.get_args(base + ["--optimizer-offload", "--teacher-offload"])
            ),
            2,
        )
    # only one policy fits: the shared policy, said not to be the paper's method
    free["cuda"] = 50 * GiB
    with pytest.raises(ValueError) as e:
        memory.check_fits(config.get_args(base), configs(config.get_args(base)), 2)
    assert "--shared-policy" + memory.NOT_PAPER in str(e.value)


def test_fsdp_divides_the_policies_fp32_state_by_the_ranks_and_adds_what_it_gathers():
    kw = dict(micro_batch=1, rollout_batch=4, rollout_chunk=4, grad_checkpointing=True)
    P, s = param_count(S), footprint.shape(S)
    whole, eight = plan(S, T, **kw), plan(S, T, fsdp_ranks=8, **kw)
    for item in (
        "student weights (fp32 master)",
        "AdamW moments (2 x fp32)",
        "gradients (fp32, update only)",
        "AdamW step temporary",
    ):
        assert eight["bytes"][item] * P == whole["bytes"][item] * -(-P // 8), item
    for item in (
        "rollout copies (bf16, launch.rollout_copies)",
        "teacher weights",
        "KV cache (one generate call)",
    ):
        assert eight["bytes"][item] == whole["bytes"][item], item  # whole on every rank
    root = s["V"] * s["C"] + s["C"]  # tied: the embedding is the LM head
    # the root and two decoder layers, gathered, and their gradients
    units = 4 * (root + 2 * (P - root) / s["L"])
    assert (
        eight["bytes"]["FSDP2 gathered units (fp32)"]
        == eight["bytes"]["FSDP2 unsharded gradients"]
        == round(units)
    )
    # one rank: nothing divided, the gathers still happen
    one = plan(S, T, fsdp_ranks=1, **kw)
    assert (
        one["total"] > whole["total"]
        and one["gather"] == 2 * 12 * P
        and whole["gather"] == 0
    )
    # FSDP2's CPUOffloadPolicy: the fp32 state on the host
    off = plan(S, T, fsdp_ranks=1, fsdp_offload=True, **kw)
    assert off["persistent"] == one["persistent"] - 2 * 12 * P
    # weights, moments, gradients; one step's temporary ...
    assert sum(off["host"].values()) == 2 * 16 * P + 4 * P
    assert off["bytes"]["AdamW step window"] == 0  # ... and the step on the host
    text = format_plan(eight)
    assert (
        "students sharded over 8 ranks (--fsdp)" in text
        and "FSDP2 gathered units" in text
    )
    assert "host memory of rank 0 while it saves" in text


def test_the_4b_students_fit_eight_96_gib_gpus_with_fsdp_and_not_without():
    """The paper's lengths and batches, two Qwen3-4B policies (a one-domain file), the Qwen3-14B teacher."""
    flags = [
        "--problems",
        EXAMPLES,
        "--student",
        "Qwen3-4B",
        "--teacher",
        "Qwen3-14B",
        "--precision",
        "bf16",
        "--grad-checkpointing",
        "--micro-batch",
        "1",
        "--rollout-chunk",
        "4",
    ]
    s, t, kw = plan_inputs(config.get_args(flags + ["--fsdp"]), 2, world=8)
    assert kw["fsdp_ranks"] == 8 and fits(plan(s, t, **kw), 96)
    s, t, kw = plan_inputs(config.get_args(flags), 2, world=8)
    assert not fits(plan(s, t, **kw), 96)


def test_check_fits_holds_rank_0_s_gathered_checkpoint_against_the_ram(monkeypatch):
    monkeypatch.setattr(
        memory,
        "available_bytes",
        lambda device: (96 if device.startswith("cuda") else 80) * GiB,
    )
    monkeypatch.setattr(config, "device", lambda name: name)
    args = config.get_args(
        [
            "--problems",
            EXAMPLES,
            "--student",
            "Qwen3-4B",
            "--teacher",
            "Qwen3-14B",
            "--precision",
            "bf16",
            "--grad-checkpointing",
            "--micro-batch",
            "1",
            "--rollout-chunk",
            "4",
            "--fsdp",
            "--device",
            "cuda",
        ]
    )
    with pytest.raises(ValueError, match=r"89.9 GiB of full states while rank 0 saves"):
        memory.check_fits(args, configs(args), 2, world=8)
    monkeypatch.setattr(
        memory,
        "available_bytes",
        lambda device: (96 if device.startswith("cuda") else 512) * GiB,
    )
    assert memory.check_fits(args, configs(args), 2, world=8)["total"] < 86.4 * GiB
