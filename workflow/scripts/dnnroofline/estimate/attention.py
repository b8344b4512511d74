"""Attention on fake CUDA tensors as a GPU runs it, where this host has no GPU.

Torch picks ``scaled_dot_product_attention``'s kernel by asking the device; on a host
without a GPU it takes the math path, which no sm80+ GPU runs. :func:`gpu_attention`
(used by :mod:`dnnroofline.estimate.op_recorder` around a recorded CUDA step) runs the
fused kernel that :func:`fused_attention_choice`, torch's own rules, picks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


def fused_attention_choice(
    dtype: torch.dtype,
    shapes: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]],
    mask: torch.dtype | None = None,
    is_causal: bool = False,
) -> str:
    """The kernel ``scaled_dot_product_attention`` runs on an sm80+ GPU (Ampere, Ada,
    Hopper, Blackwell), as torch's CUDA dispatch (``sdp_utils.cpp``) picks it:
    ``flash`` for fp16/bf16 with one head size of at most 256 and no mask;
    ``efficient`` (memory-efficient) where head sizes are multiples of 8 (fp16/bf16) or
    4 (fp32) and any mask is additive; else ``math``. On sm90/sm100 with cuDNN 9.9+ torch
    prefers cuDNN's fused kernel where it can: another fused kernel, counted by the same
    rule (op_rules: QK^T and PV, softmax and scale), so the choice between fused kernels
    changes no count here. ``shapes``: (query, key, value), each (..., length, head size);
    ``mask``: the mask's dtype, None without one."""
    (*_, q_len, q_dim), (*_, k_len, k_dim), (*_, _, v_dim) = shapes
    four_d = all(len(s) == 4 for s in shapes)
    half = dtype in (torch.float16, torch.bfloat16)
    causal_ok = not is_causal or q_len == k_len  # flash: no causal mask over L != S
    if four_d and half and mask is None and causal_ok and q_dim == k_dim == v_dim <= 256:
        return "flash"
    align = 8 if half else 4
    if (
        four_d
        and (half or dtype == torch.float32)
        and (mask is None or mask.is_floating_point)
        and q_dim == k_dim
        and q_dim % align == 0
        and v_dim % align == 0
    ):
        return "efficient"
    return "math"


@contextlib.contextmanager
def gpu_attention(device: str) -> Iterator[None]:
    """``scaled_dot_product_attention`` on fake CUDA tensors as a GPU runs it, where this
    host has no GPU: torch's own choice asks the device and, finding none, takes the math
    path (two bmm and a softmax, in fp32), which no sm80+ GPU runs. Here the fused kernel
    of :func:`fused_attention_choice` runs instead, autocast casting the inputs first as
    it casts this op's. ``torch.nn.functional``'s name is replaced for the step, not
    intercepted in a function mode: ``multi_head_attention_forward`` calls it from inside
    its own ``__torch_function__``, where a mode does not see it. With a GPU here, or on
    a CPU step, the dispatch is torch's own."""
    functional = torch.nn.functional
    original = functional.scaled_dot_product_attention
    if device != "cuda" or torch.cuda.is_available():
        yield
        return
    aten = torch.ops.aten

    def fused(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False):  # fmt: skip
        if torch.is_autocast_enabled("cuda"):
            low = torch.get_autocast_dtype("cuda")
            query, key, value = (
                t.to(low) if t.dtype == torch.float32 else t for t in (query, key, value)
            )
        shapes = (tuple(query.shape), tuple(key.shape), tuple(value.shape))
        mask = None if attn_mask is None else attn_mask.dtype
        choice = fused_attention_choice(query.dtype, shapes, mask, is_causal)
        if choice == "flash" and not enable_gqa:
            return aten._scaled_dot_product_flash_attention(
                query, key, value, dropout_p, is_causal, False, scale=scale
            )[0]
        if choice == "efficient" and not enable_gqa:
            grad = any(t.requires_grad for t in (query, key, value))
            return aten._scaled_dot_product_efficient_attention(
                query, key, value, attn_mask, grad, dropout_p, is_causal, scale=scale
            )[0]
        return original(query, key, value, attn_mask, dropout_p, is_causal, scale=scale,
                        enable_gqa=enable_gqa)  # fmt: skip

    functional.scaled_dot_product_attention = fused
    try:
        yield
    finally:
        functional.scaled_dot_product_attention = original
