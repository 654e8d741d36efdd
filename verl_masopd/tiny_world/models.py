"""Tiny offline models: a byte-level BPE tokenizer with a Qwen3-style chat template and
Qwen3-architecture causal LMs, built with no network and deterministically from a seed.

Tests and the embedded default run on these; real runs point at real checkpoints by path.

    python -m verl_masopd.tiny_world.models --out DIR --size tiny --seed 0
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [PAD_TOKEN, IM_START, IM_END]
THINK_TOKENS = ["<think>", "</think>"]
MAX_VOCAB_SIZE = 1024  # an upper bound: the corpus yields fewer merges

# Qwen3's template reduced to plain chat: no tools, no reasoning_content. With
# enable_thinking=False the generation prompt carries the empty think block, as Qwen3's does.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{- raise_exception('unsupported chat role: ' ~ message['role']) }}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)

# The text the BPE merges are learnt from: the kind of text the project's prompts and answers hold.
_CORPUS = [
    "You are a helpful assistant. Solve the problem step by step and put the final answer in \\boxed{}.",
    "You are the coder. Write a Python program that reads from standard input and prints the answer.",
    "You are the tester. Write test cases with input and expected output for the program below.",
    "You are the reasoner. Think about the problem and explain the solution to the tool user.",
    "def solve():\n    n = int(input())\n    values = list(map(int, input().split()))\n    print(sum(values))\n",
    "import sys\n\ndef main():\n    data = sys.stdin.read().split()\n    return len(data)\n\n"
    "if __name__ == '__main__':\n    main()\n",
    "for i in range(n):\n    if x[i] > 0:\n        total += x[i]\n    else:\n        count -= 1\nreturn total\n",
    "```python\nprint('hello world')\n```\n```output\nhello world\n```",
    "The answer is 42. Therefore x = 3, y = 4 and x^2 + y^2 = 25, so the distance is 5.",
    "Let f(x) = 2x + 1. Then f(3) = 7 and the sum of the first 10 integers is 55.",
    "Input:\n3\n1 2 3\nOutput:\n6\n",
    "The previous attempt failed on the test case. Please fix the bug and try again.",
    "I agree with the solution. The final answer is \\boxed{12}.",
    # the compact prompts of the tiny world (workflow.prompt_style=compact) and the PAC block
    "Reasoner. Answer as #### n. After a disagreement say hold or revise first.",
    "Tool-User. Write a ```python program that prints the answer. After a disagreement say hold or revise first.",
    "Coder. Write a ```python program that reads stdin and prints the answer.",
    "Tester. Write a test: an ```input block, then the ```output block.",
    "Q: Ann has 3 pens and gets 4 more. How many pens does Ann have now?\nYou: #### 7\n"
    "tool_user_0: ```python\nprint(3 + 4)\n```\nReport: reasoner_0 7, tool_user_0 8, disagree\nhold\n#### 7",
    "Q: Input: numbers on one line. Print the largest.\nYou: ```input\n3 1 2\n```\n```output\n3\n```\n"
    "coder_0: ```python\nprint(max(map(int,input().split())))\n```\n"
    "Report: tester_0 in 3 1 2 want 3, coder_0 got 3; agree",
    "[Privileged feedback on the previous turn, verified against the reference solution]\n"
    "The previous turn ended in a conflict.\n"
    "The reasoner's output (you) was wrong: the reasoner should revise its output.\n"
    "The tool_user's output was correct: the tool_user should hold its output.\n"
    "The coder's output was correct: the coder should hold its output. The tester's output (you) was wrong.",
]

SIZES = {
    # about 0.9M parameters
    "tiny": dict(
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
    ),
    # about 9.7M parameters
    "small": dict(
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=12,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=32,
    ),
}


def build_tokenizer(out_dir: str | os.PathLike | None = None) -> PreTrainedTokenizerFast:
    """Byte-level BPE tokenizer learnt from a fixed corpus (deterministic), saved to `out_dir` if given."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=MAX_VOCAB_SIZE - len(THINK_TOKENS),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_CORPUS, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD_TOKEN,
        eos_token=IM_END,
        additional_special_tokens=[IM_START],
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=32768,
    )
    wrapped.add_tokens(THINK_TOKENS)
    wrapped.chat_template = CHAT_TEMPLATE
    if out_dir is not None:
        wrapped.save_pretrained(str(out_dir))
    return wrapped


def build_model(out_dir: str | os.PathLike, size: str = "tiny", seed: int = 0) -> Qwen3ForCausalLM:
    """A randomly initialised Qwen3ForCausalLM of `size`, weights fixed by `seed`, saved (float32)
    with its tokenizer so that AutoTokenizer/AutoModelForCausalLM.from_pretrained(out_dir) load it."""
    if size not in SIZES:
        raise ValueError(f"unknown tiny model size {size!r}; choose one of {sorted(SIZES)}")
    tokenizer = build_tokenizer(out_dir)
    model = new_model(tokenizer, SIZES[size], seed)
    model.save_pretrained(str(out_dir))
    return model


def new_model(tokenizer, size: dict, seed: int, max_positions: int = 4096) -> Qwen3ForCausalLM:
    """A randomly initialised float32 Qwen3ForCausalLM with `size` (Qwen3Config fields) for
    `tokenizer`, its weights fixed by `seed`."""
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        dtype="float32",
        **size,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).to(torch.float32)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def builder_fingerprint() -> str:
    """Hash of this module's source: a cache of built models is valid while it is unchanged."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def cached_model(cache_root: str | os.PathLike, size: str = "tiny", seed: int = 0) -> str:
    """Path of a built model under `cache_root/<fingerprint>/<size>-seed<seed>`, built on first use.

    The model is built in a temporary folder and renamed into place, so concurrent callers
    never see a half-written model.
    """
    target = Path(cache_root) / builder_fingerprint() / f"{size}-seed{seed}"
    if not (target / "config.json").exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        build_model(staging, size=size, seed=seed)
        try:
            staging.rename(target)
        except OSError:
            shutil.rmtree(staging)
            if not (target / "config.json").exists():
                raise
    return str(target)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Build a tiny offline Qwen3-style model and tokenizer.")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--size", default="tiny", choices=sorted(SIZES))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    model = build_model(args.out, size=args.size, seed=args.seed)
    print(f"built {args.size} model ({model.num_parameters()} parameters) in {args.out}")


if __name__ == "__main__":
    main()
