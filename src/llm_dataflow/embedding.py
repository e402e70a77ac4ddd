"""Chapter 02 — token IDs to hidden states: the embedding gather and its bytes.

The embedding is a gather: row ``ids[b, t]`` of the table ``W_E [V, D]`` becomes
``X[b, t, :]``.  Only the gathered rows are read; the rest of the table stays where it is.
"""
from __future__ import annotations

import torch

from .core.config import model_config
from .core.units import GB, MB, check_dtype, dtype_bits, require_positive
from .tokenization import check_token_ids

__all__ = ["embedding_gather", "embedding_reference", "gather_bytes", "input_vs_state", "embedding_calc"]


def _check_gather(ids, table) -> None:
    """``table`` a ``[V, D]`` tensor and ``ids`` a tensor of IDs in ``[0, V)``, else ValueError."""
    if not isinstance(table, torch.Tensor) or table.dim() != 2:
        raise ValueError(f"table has shape {tuple(getattr(table, 'shape', ()))}; it must be a [V, D] tensor")
    if not isinstance(ids, torch.Tensor):
        raise ValueError(f"ids={ids!r:.60} is not allowed; give an int32 or int64 tensor [B, T]")
    check_token_ids(ids, table.shape[0], "ids")


def embedding_gather(ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Gather rows of ``table [V, D]`` for ``ids [B, T]`` (int32 or int64) → ``[B, T, D]`` with
    ``torch.index_select`` on the flattened IDs (one row read per ID, ``D × bytes`` each).

    Raises:
        ValueError: ``table`` not 2-D, ``ids`` not an int32/int64 tensor, or an ID outside
            ``[0, V)`` (:func:`~llm_dataflow.tokenization.check_token_ids` names it, its position and V).
    """
    _check_gather(ids, table)
    return torch.index_select(table, 0, ids.reshape(-1)).reshape(*ids.shape, table.shape[1])


def embedding_reference(ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """The library reference: ``torch.nn.Embedding`` holding ``table``, applied to ``ids``."""
    emb = torch.nn.Embedding.from_pretrained(table, freeze=True)
    return emb(ids.long())


def gather_bytes(ids: torch.Tensor, table: torch.Tensor) -> dict:
    """Bytes of one gather (ints, bytes).

    Returns:
        ``{"ids", "table", "rows read", "unique rows read", "output"}``: the ID tensor, the whole
        table, rows read as issued (``B·T·D·bytes``), distinct rows (what must come from memory
        at least once) and the output ``[B, T, D]``.

    Raises:
        ValueError: as :func:`embedding_gather` (no count is made for IDs the gather would refuse).
    """
    _check_gather(ids, table)
    row = table.shape[1] * table.element_size()
    return {"ids": ids.numel() * ids.element_size(), "table": table.numel() * table.element_size(),
            "rows read": ids.numel() * row, "unique rows read": int(torch.unique(ids).numel()) * row,
            "output": ids.numel() * row}


def input_vs_state(n_tokens: int, d_model: int, id_dtype: str = "int32", act_dtype: str = "bf16") -> tuple[int, int]:
    """``(id bytes, hidden-state bytes)`` for ``n_tokens`` tokens: the input is
    ``n_tokens × 4 B`` (INT32), the state one layer reads is ``n_tokens × d_model × 2 B`` (BF16).
    1000 tokens at ``d_model`` 4096: 4,000 B vs 8,192,000 B.

    Raises:
        ValueError: non-positive sizes or unknown dtypes.
    """
    require_positive("n_tokens", n_tokens)
    require_positive("d_model", d_model)
    check_dtype(id_dtype, ("int32", "int64"), "id_dtype")
    check_dtype(act_dtype, field="act_dtype")
    return n_tokens * dtype_bits(id_dtype) // 8, n_tokens * d_model * dtype_bits(act_dtype) // 8


def _percent(share: float) -> str:
    """``share`` (0..1) as a percentage with two significant figures below 10 % (``"0.78%"``,
    ``"0.00078%"`` for one token of Llama-3-8B, never ``"0.00%"``) and whole numbers above."""
    pct = 100 * share
    return f"{pct:.0f}%" if pct >= 10 else f"{pct:#.2g}%"


def embedding_calc(model: str = "Llama-3-8B", seq_len: int = 1000, batch: int = 1, id_dtype: str = "int32",
                   act_dtype: str = "bf16") -> dict:
    """Calculator: IDs in vs hidden states out for a preset (all rows distinct, the upper bound).
    "table read by the gather" is the share of the table the rows can cover, with two significant
    figures (one token of Llama-3-8B: 8,192 B of 1.05 GB, ``"0.00078%"``).

    Raises:
        ValueError: unknown preset, non-positive sizes, unknown dtypes.
    """
    cfg = model_config(model)
    require_positive("batch", batch)
    require_positive("seq_len", seq_len)
    ids_b, state_b = input_vs_state(batch * seq_len, cfg.d_model, id_dtype, act_dtype)
    table = cfg.vocab_size * cfg.d_model * dtype_bits(act_dtype) // 8
    return {"token IDs (bytes)": ids_b, "hidden states per layer (MB)": round(state_b / MB, 3),
            "state / IDs": f"{state_b // ids_b:,}×", "embedding table (GB)": round(table / GB, 3),
            "table read by the gather": _percent(min(state_b, table) / table)}
