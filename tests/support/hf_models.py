"""Tiny Hugging Face model folders and a task they can learn, made here with no network.

A byte-level tokenizer (every byte its own token, no merges, `<pad>` and `<eos>` beside)
built with `tokenizers`, a Llama-style or GPT-2-style causal LM of about a hundred thousand
parameters from its config, saved with save_pretrained as a hub folder would hold them; an
echo task: each prompt names a short string, the completion repeats it; and a labelled set:
whether a short string holds the letter `d`, half of them do.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any

PAD, EOS = "<pad>", "<eos>"
ALPHABET = "abcd"


def byte_tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {symbol: index for index, symbol in enumerate([*alphabet, PAD, EOS])}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token=PAD, eos_token=EOS)


def tiny_model_folder(folder: Path, style: str = "llama") -> Path:
    """A randomly initialised `style` ("llama" or "gpt2") model and its tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig

    tokenizer = byte_tokenizer()
    special = {
        # Wider than a hub model's 0.02: a random base whose frozen head can tell tokens
        # apart, so adapters alone can learn (a pretrained base's head can).
        "initializer_range": 0.1,
        "vocab_size": len(tokenizer),
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.eos_token_id,
    }
    if style == "llama":
        config: Any = LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            tie_word_embeddings=False,
            **special,
        )
    else:
        config = GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=64, **special)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def echo_examples(count: int, seed: int) -> list[dict[str, str]]:
    rng = random.Random(seed)
    examples = []
    for _ in range(count):
        word = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(2, 4)))
        examples.append({"prompt": f"echo {word}:", "completion": word})
    return examples


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def echo_task(folder: Path, train: int = 256, validation: int = 32) -> tuple[Path, Path]:
    """train.jsonl and validation.jsonl of the echo task (different strings each)."""
    folder.mkdir(parents=True, exist_ok=True)
    return (
        write_jsonl(folder / "train.jsonl", echo_examples(train, seed=1)),
        write_jsonl(folder / "validation.jsonl", echo_examples(validation, seed=2)),
    )


HAS, HAS_NOT = "has-d", "no-d"


def letter_examples(
    count: int, seed: int, labels: tuple[Any, Any] = (HAS, HAS_NOT)
) -> list[dict[str, Any]]:
    """`{"text", "label"}`: a string of 3 to 6 letters of abcd, labelled labels[0] where it
    holds a `d` (every other example) and labels[1] where it does not."""
    rng = random.Random(seed)
    examples = []
    for index in range(count):
        letters = [rng.choice("abc") for _ in range(rng.randint(3, 6))]
        holds = index % 2 == 0
        if holds:
            letters[rng.randrange(len(letters))] = "d"
        examples.append({"text": "".join(letters), "label": labels[0] if holds else labels[1]})
    rng.shuffle(examples)
    return examples


def write_csv(path: Path, records: list[dict[str, Any]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=["text", "label"])
        writer.writeheader()
        writer.writerows(records)
    return path


def letter_task(
    folder: Path, suffix: str = ".csv", labels: tuple[Any, Any] = (HAS, HAS_NOT)
) -> tuple[Path, Path]:
    """train and validation files of the letter task, CSV or JSONL (different strings)."""
    folder.mkdir(parents=True, exist_ok=True)
    write = write_csv if suffix == ".csv" else write_jsonl
    return (
        write(folder / f"train{suffix}", letter_examples(512, seed=1, labels=labels)),
        write(folder / f"validation{suffix}", letter_examples(64, seed=2, labels=labels)),
    )
