"""The size of the GPT in ampfleet/workers/training/models/gpt.py, worked out without torch.

Shared by the recipes that train it (charlm, gpt-bench): parameters and the activations one
micro-batch keeps for its backward pass.
"""

from __future__ import annotations

FLOAT_BYTES = 4  # estimated in fp32: what a CPU rank without bf16 autocast holds

SAVED_PER_TOKEN_PER_LAYER = 16
"""Widths of d_model that one block saves per token for backward: LayerNorm inputs and
outputs (4), q, k, v (3), attention and projection outputs (2), MLP hidden before and after
GELU (8), rounded down to 16."""


def gpt_parameters(*, vocab_size: int, block_size: int, d_model: int, n_layers: int) -> int:
    """Token and position embeddings (the head is tied to the token embedding), per block
    qkv (3 d^2), projection (d^2), MLP (8 d^2) and two LayerNorms (4 d), a final LayerNorm."""
    per_block = 12 * d_model * d_model + 4 * d_model
    return (vocab_size + block_size) * d_model + n_layers * per_block + 2 * d_model


def gpt_activation_bytes(
    *, batch_size: int, block_size: int, vocab_size: int, d_model: int, n_layers: int
) -> int:
    """Saved activations of every block, plus the logits, their log-softmax and gradient."""
    per_token = SAVED_PER_TOKEN_PER_LAYER * d_model * n_layers + 3 * vocab_size
    return FLOAT_BYTES * batch_size * block_size * per_token
