"""PagedAttention: a block allocator, block tables, prefix sharing, and attention through them
(chapter 06).

Kwon et al. 2023, "Efficient Memory Management for Large Language Model Serving with
PagedAttention" (SOSP'23, arXiv:2309.06180) store the KV cache in fixed-size **blocks** of
``block_size`` tokens, allocated on demand from a free list; each sequence's **block table**
maps logical block ``i`` (positions ``i·block_size … (i+1)·block_size - 1``) to a physical
block.  Only the last block of a sequence can be partly empty (tail waste < block_size tokens).
Sequences that share a prefix share its physical blocks (reference counts); a write into a
shared block first copies it (**copy-on-write**).  The paper reports that prior systems, which
reserve contiguous memory per request, hold token states in only 20.4–38.2 % of their KV
memory (§1, Fig. 2); :func:`simulate_kv_memory` reproduces the effect on a seeded request mix.

Index math (property-tested): position ``p`` lives in physical block ``table[p // block_size]``
at offset ``p % block_size``, i.e. flat slot ``table[p // block_size]·block_size + p % block_size``.

Pool layout: per layer, K and V pools ``[N_blocks, block_size, H_kv, d_h]`` (vLLM's layout,
block-major); one block id indexes the same slots in every layer.
"""
from __future__ import annotations

import math
import random

import torch

from .core.config import ModelConfig
from .flash import merge_attention_partials
from .model import row_range
from .core.units import require_nonnegative, require_positive

__all__ = [
    "OutOfBlocksError", "BlockAllocator", "blocks_needed", "tail_waste", "slot_of", "slot_mapping",
    "paged_attention", "PagedKVCache", "simulate_kv_memory", "MAX_SIM_REQUESTS", "MAX_BLOCKS", "PAGED_ATTENTION_PAPER_UTILISATION",
    "PAGED_ATTENTION_PAPER_ORCA",
]

#: Fraction of KV-cache memory holding token states in prior systems (Orca variants), as
#: reported by Kwon et al. 2023 (arXiv:2309.06180, §1 and Fig. 2): 20.4 % to 38.2 %.
PAGED_ATTENTION_PAPER_UTILISATION = (0.204, 0.382)

#: Per policy, the share of KV memory holding token states that Kwon et al. 2023
#: (arXiv:2309.06180, Fig. 2) report for Orca (Max), Orca (Pow2) and Orca (Oracle), keyed by the
#: matching :func:`simulate_kv_memory` policy names (their traces, OPT models, max length 2048).
PAGED_ATTENTION_PAPER_ORCA = {"contiguous_max": 0.204, "contiguous_pow2": 0.268, "contiguous_oracle": 0.382}


class OutOfBlocksError(RuntimeError):
    """No free KV block is left (a serving engine would preempt or queue a request here)."""


# --- index math --------------------------------------------------------------------------------
def blocks_needed(n_tokens: int, block_size: int) -> int:
    """Blocks a sequence of ``n_tokens`` occupies: ``ceil(n_tokens / block_size)`` (0 for 0).

    Raises:
        ValueError: ``n_tokens < 0`` or ``block_size < 1``.
    """
    require_nonnegative("n_tokens", n_tokens)
    require_positive("block_size", block_size)
    return -(-n_tokens // block_size)


def tail_waste(n_tokens: int, block_size: int) -> int:
    """Token slots allocated but empty in the last block: ``blocks·block_size - n_tokens``
    (``0 … block_size-1``).

    Raises:
        ValueError: as :func:`blocks_needed`.
    """
    return blocks_needed(n_tokens, block_size) * block_size - n_tokens


def _check_block_table(block_table) -> None:
    if not isinstance(block_table, (list, tuple)) or not all(
            isinstance(b, int) and not isinstance(b, bool) and b >= 0 for b in block_table):
        raise ValueError(f"block_table={block_table!r} is not allowed; give a list of non-negative block ids")


def slot_of(block_table, position: int, block_size: int) -> tuple[int, int]:
    """``(physical block, offset)`` of logical ``position`` through ``block_table`` (a sequence of ints).

    Raises:
        ValueError: ``block_table`` not a list or tuple of non-negative integers (block ids),
            ``block_size`` not a positive integer, ``position`` negative or past the table's
            ``len(block_table)·block_size`` slots.
    """
    _check_block_table(block_table)
    require_positive("block_size", block_size)
    require_nonnegative("position", position)
    i = position // block_size
    if i >= len(block_table):
        raise ValueError(f"position={position} is beyond the block table's {len(block_table)} blocks of "
                         f"{block_size} tokens; allowed: 0..{len(block_table) * block_size - 1}")
    return int(block_table[i]), position % block_size


def slot_mapping(block_table, positions, block_size: int) -> torch.Tensor:
    """Flat slots ``table[p // bs]·bs + p % bs`` for ``positions`` (LongTensor ``[n]``) → ``[n]``.

    A flat slot indexes the pool viewed as ``[N_blocks·block_size, H_kv, d_h]`` (vLLM's
    ``slot_mapping``).

    Raises:
        ValueError: ``block_table`` not a list or tuple of non-negative block ids, ``block_size``
            not a positive integer, or a position negative or beyond the table.
    """
    _check_block_table(block_table)
    require_positive("block_size", block_size)
    positions = torch.as_tensor(positions, dtype=torch.int64)
    table = torch.as_tensor(list(block_table), dtype=torch.int64)
    if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= table.numel() * block_size):
        raise ValueError(f"positions must lie in 0..{table.numel() * block_size - 1} for a table of "
                         f"{table.numel()} blocks of {block_size}; got {positions.min().item()}..{positions.max().item()}")
    return table[positions // block_size] * block_size + positions % block_size


# --- the allocator -----------------------------------------------------------------------------
#: Most blocks a :class:`BlockAllocator` manages: 4,194,304, i.e. 67 million tokens at vLLM's
#: default 16 tokens per block — more than eight H200s (8 × 141 GB) hold for a production model
#: (Llama-3-8B stores 128 KiB of BF16 KV per token).  The allocator keeps two Python lists of
#: that length.
MAX_BLOCKS = 2**22


class BlockAllocator:
    """Fixed-size block allocator with a free list and reference counts.

    Args:
        num_blocks: physical blocks in the pool.  block_size: tokens per block.

    Attributes:
        ref: list of reference counts per physical block (0 = free).

    Raises:
        ValueError: ``num_blocks`` or ``block_size`` not a positive integer, ``num_blocks`` more
            than :data:`MAX_BLOCKS`.
    """

    def __init__(self, num_blocks: int, block_size: int):
        require_positive("num_blocks", num_blocks)
        if num_blocks > MAX_BLOCKS:
            raise ValueError(f"num_blocks={num_blocks} is not allowed; at most MAX_BLOCKS={MAX_BLOCKS:,}")
        require_positive("block_size", block_size)
        self.num_blocks, self.block_size = num_blocks, block_size
        self.ref = [0] * num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))  # a stack: block 0 is handed out first

    @property
    def num_free(self) -> int:
        """Blocks on the free list."""
        return len(self._free)

    def allocate(self) -> int:
        """Pop a free block, set its reference count to 1 and return its id.

        Raises:
            OutOfBlocksError: the free list is empty.
        """
        if not self._free:
            raise OutOfBlocksError(f"all {self.num_blocks} blocks are in use")
        b = self._free.pop()
        self.ref[b] = 1
        return b

    def share(self, block: int) -> int:
        """Add a reference to an allocated ``block`` (prefix sharing); returns it.

        Raises:
            ValueError: ``block`` is free or out of range.
        """
        self._check_live(block)
        self.ref[block] += 1
        return block

    def free(self, block: int) -> None:
        """Drop one reference; the block returns to the free list when none is left.

        Raises:
            ValueError: ``block`` is already free or out of range.
        """
        self._check_live(block)
        self.ref[block] -= 1
        if self.ref[block] == 0:
            self._free.append(block)

    def _check_live(self, block: int) -> None:
        if not isinstance(block, int) or not 0 <= block < self.num_blocks:
            raise ValueError(f"block={block!r} is out of range; allowed 0..{self.num_blocks - 1}")
        if self.ref[block] == 0:
            raise ValueError(f"block={block} is free; only allocated blocks can be shared or freed")


# --- the kernel ---------------------------------------------------------------------------------
def _pad_tables(block_tables, device) -> torch.Tensor:
    if isinstance(block_tables, torch.Tensor):
        return block_tables.to(device=device, dtype=torch.int64)
    width = max((len(t) for t in block_tables), default=0)
    return torch.tensor([list(t) + [-1] * (width - len(t)) for t in block_tables], dtype=torch.int64,
                        device=device).reshape(len(block_tables), width)


def paged_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, block_tables, seq_lens,
                    causal: bool = True, window: int | None = None) -> torch.Tensor:
    """Attention that reads K/V block by block through each sequence's block table.

    Shapes: ``q [B, H, T, d_h]`` (the last T tokens of each row), ``k_pool, v_pool
    [N_blocks, block_size, H_kv, d_h]``, ``block_tables``: B lists of physical block ids (or a
    LongTensor ``[B, max_blocks]`` padded with -1), ``seq_lens [B]``: tokens stored per row
    *including* the T new ones (rows may differ) → ``[B, H, T, d_h]``.

    Query ``t`` of row ``b`` sits at position ``seq_lens[b] - T + t`` and sees keys
    ``j ≤`` that position (``causal``) and ``j >`` position − ``window``.  For each logical block
    the kernel gathers one physical block per row (``block_size·H_kv·d_h`` elements — never the
    contiguous history), computes its partial softmax and merges it with
    :func:`llm_dataflow.flash.merge_attention_partials` (online softmax, as vLLM's
    PagedAttention kernel does per thread block).  Exact against contiguous attention
    (``ldf.attention_reference``).

    Raises:
        ValueError: shapes that do not fit, a row whose table is too short for its length,
            ``seq_lens`` < T, or a bad window.
    """
    B, H, T, d = q.shape
    if k_pool.dim() != 4 or k_pool.shape != v_pool.shape or k_pool.shape[3] != d:
        raise ValueError(f"k_pool/v_pool {tuple(k_pool.shape)}/{tuple(v_pool.shape)} must be [N_blocks, "
                         f"block_size, H_kv, d_h={d}]")
    bs, Hkv = k_pool.shape[1], k_pool.shape[2]
    if H % Hkv:
        raise ValueError(f"n_heads={H} is not a multiple of n_kv_heads={Hkv}")
    if window is not None:
        require_positive("window", window)
    G = H // Hkv
    lens = torch.as_tensor(seq_lens, dtype=torch.int64, device=q.device).reshape(-1)
    tables = _pad_tables(block_tables, q.device)
    if lens.numel() != B or tables.shape[0] != B:
        raise ValueError(f"seq_lens ({lens.numel()}) and block_tables ({tables.shape[0]}) need B={B} rows")
    if int(lens.min()) < T:
        raise ValueError(f"seq_lens must be >= T={T} (they include the new tokens); got {lens.tolist()}")
    have = (tables >= 0).sum(1)
    need = -(-lens // bs)
    if bool((have < need).any()):
        raise ValueError(f"a block table is shorter than its sequence: blocks {have.tolist()}, needed {need.tolist()}")
    acc_dtype = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    qg = q.view(B, Hkv, G, T, d).to(acc_dtype) / math.sqrt(d)
    qpos = (lens - T)[:, None] + torch.arange(T, device=q.device)            # [B, T]
    o = torch.zeros(B, Hkv, G, T, d, dtype=acc_dtype, device=q.device)
    m = torch.full((B, Hkv, G, T), -math.inf, dtype=acc_dtype, device=q.device)
    l = torch.zeros_like(m)
    for j in range(int(need.max())):
        phys = tables[:, j].clamp_min(0)                                     # [B]; padded rows are masked
        kb = k_pool[phys].permute(0, 2, 1, 3).to(acc_dtype)[:, :, None]      # [B, H_kv, 1, bs, d_h] read
        vb = v_pool[phys].permute(0, 2, 1, 3).to(acc_dtype)[:, :, None]
        s = qg @ kb.transpose(-1, -2)                                        # [B, H_kv, G, T, bs]
        kpos = j * bs + torch.arange(bs, device=q.device)                    # [bs]
        ok = kpos[None, None, :] < lens[:, None, None]                       # stored tokens only
        if causal:
            ok = ok & (kpos[None, None, :] <= qpos[:, :, None])
        if window is not None:
            ok = ok & (kpos[None, None, :] > qpos[:, :, None] - window)
        s = s.masked_fill(~ok[:, None, None], -math.inf)                     # [B, 1, 1, T, bs]
        mb = s.amax(-1)
        p = torch.exp(s - torch.where(torch.isneginf(mb), torch.zeros_like(mb), mb)[..., None])
        lb = p.sum(-1)
        ob = (p @ vb) / torch.where(lb > 0, lb, torch.ones_like(lb))[..., None]
        o, m, l = merge_attention_partials(o, m, l, ob, mb, lb)
    return o.reshape(B, H, T, d).to(q.dtype)


# --- a paged cache for the Decoder --------------------------------------------------------------
class _PagedState:
    def __init__(self, cfg, batch, num_blocks, block_size, dtype, device):
        self.allocator = BlockAllocator(num_blocks, block_size)
        # [L, 2, N_blocks, block_size, H_kv, d_h]: the whole pool, allocated once
        self.buf = torch.zeros(cfg.n_layers, 2, num_blocks, block_size, cfg.n_kv_heads, cfg.head_dim,
                               dtype=dtype, device=device)
        self.tables = [[] for _ in range(batch)]
        self.lengths = torch.zeros(batch, dtype=torch.int64)
        self.gathered_bytes = 0   # bytes update() copied out of the blocks into contiguous K/V


class PagedKVCache:
    """A KV cache stored in blocks through per-row block tables; the Decoder runs on it.

    Implements the cache protocol of :class:`llm_dataflow.model.KVCache` (``batch``,
    ``max_len``, ``lengths``, ``update``, ``advance``, ``reset``, ``rows``, ``nbytes``,
    ``bytes_used``), so ``Decoder.forward(ids, paged_cache)`` works unchanged, plus
    :meth:`fork` for prefix sharing with copy-on-write.

    Memory: the pool ``[L, 2, N_blocks, block_size, H_kv, d_h]`` is allocated once; a row takes
    blocks from the free list only as its tokens arrive (``ceil(len/block_size)`` blocks, tail
    waste < one block), not ``max_len`` positions up front.

    ``update`` writes through the block table (slot mapping) and, because the Decoder's attention
    (``F.scaled_dot_product_attention`` or its decode matmuls) needs contiguous K/V, returns them
    *gathered* into fresh ``[B, H_kv, S, d_h]`` tensors: every layer, every step, the whole
    history of every row is copied out of its blocks — ``2·B·S·H_kv·d_h`` elements per layer,
    counted in :attr:`gathered_bytes`.  That copy is exactly what a paged attention kernel exists
    to avoid; :func:`paged_attention` is that kernel (it reads the blocks in place).  The cache is
    here to show allocation, sharing and copy-on-write, not paged attention's speed.

    Args:
        cfg: model config.  batch: rows.  num_blocks: physical blocks in the pool.
        block_size: tokens per block (vLLM's default is 16).  max_len: the largest length a row
            may reach (default ``num_blocks·block_size``).  dtype, device: of the pool.

    Raises:
        ValueError: ``cfg`` not a ModelConfig, non-positive sizes, ``num_blocks`` more than
            :data:`MAX_BLOCKS`.  OutOfBlocksError (from ``update``/``fork``): pool exhausted.
    """

    def __init__(self, cfg: ModelConfig, batch: int, num_blocks: int, block_size: int = 16,
                 dtype: torch.dtype = torch.float32, device=None, max_len: int | None = None, *, _view=None):
        if _view is not None:
            self._st, self._r0, self.batch = _view
        else:
            if not isinstance(cfg, ModelConfig):
                raise ValueError(f"cfg={cfg!r} is not allowed; it must be a ModelConfig (see ldf.model_config)")
            require_positive("batch", batch)
            require_positive("num_blocks", num_blocks)
            require_positive("block_size", block_size)
            self._st, self._r0, self.batch = _PagedState(cfg, batch, num_blocks, block_size, dtype, device), 0, batch
        self.cfg = cfg
        self.block_size = self._st.allocator.block_size
        self.max_len = max_len if max_len is not None else self._st.allocator.num_blocks * self.block_size
        require_positive("max_len", self.max_len)
        self.lengths = self._st.lengths[self._r0:self._r0 + self.batch]   # a view: advance() is shared
        self.dtype, self.device = self._st.buf.dtype, self._st.buf.device

    # -- views of the pool --
    @property
    def allocator(self) -> BlockAllocator:
        return self._st.allocator

    @property
    def block_tables(self) -> list:
        """This cache's rows' block tables (lists of physical block ids)."""
        return self._st.tables[self._r0:self._r0 + self.batch]

    def k_pool(self, layer: int) -> torch.Tensor:
        """``[N_blocks, block_size, H_kv, d_h]`` keys of ``layer``."""
        return self._st.buf[layer, 0]

    def v_pool(self, layer: int) -> torch.Tensor:
        """``[N_blocks, block_size, H_kv, d_h]`` values of ``layer``."""
        return self._st.buf[layer, 1]

    @property
    def nbytes(self) -> int:
        """Bytes of the blocks this cache's rows hold (shared blocks counted once)."""
        blocks = {b for t in self.block_tables for b in t}
        return len(blocks) * self.block_size * self.bytes_per_token

    @property
    def pool_nbytes(self) -> int:
        """Bytes of the whole preallocated pool (all blocks, free or not)."""
        return self._st.buf.numel() * self._st.buf.element_size()

    @property
    def gathered_bytes(self) -> int:
        """Bytes :meth:`update` has copied out of the blocks into contiguous K and V since the
        pool was made (all rows and views of the pool; ``2·B·S·H_kv·d_h·elem`` per call)."""
        return self._st.gathered_bytes

    @property
    def bytes_per_token(self) -> int:
        """``2·L·H_kv·d_h·elem`` bytes per stored token."""
        return 2 * self.cfg.n_layers * self.cfg.n_kv_heads * self.cfg.head_dim * self._st.buf.element_size()

    @property
    def bytes_used(self) -> int:
        """Bytes of tokens stored (``sum(lengths)·bytes_per_token``; a shared prefix counts per row)."""
        return int(self.lengths.sum()) * self.bytes_per_token

    # -- rows, reset, fork --
    def rows(self, index) -> "PagedKVCache":
        """A cache over rows ``index`` (int or contiguous slice) sharing pool, tables and lengths.

        Raises:
            ValueError: non-contiguous or out-of-range rows.
        """
        r0, r1 = row_range(index, self.batch)
        return PagedKVCache(self.cfg, 0, 0, max_len=self.max_len, _view=(self._st, self._r0 + r0, r1 - r0))

    def _check_row(self, row):
        if not isinstance(row, int) or not 0 <= row < self.batch:
            raise ValueError(f"row={row!r} is out of range; allowed 0..{self.batch - 1}")

    def reset(self, row: int | None = None) -> None:
        """Free the blocks of ``row`` (all rows when ``None``) and set its length to 0."""
        for r in range(self.batch) if row is None else [row]:
            self._check_row(r)
            t = self._st.tables[self._r0 + r]
            for b in t:
                self.allocator.free(b)
            t.clear()
            self.lengths[r] = 0

    def fork(self, src: int, dst: int) -> None:
        """Make row ``dst`` share row ``src``'s tokens (prefix sharing): ``dst`` gets the same
        block table, each block's reference count grows by one; no K/V is copied.  A later write
        into a shared block copies it first (:meth:`update`, copy-on-write).

        Raises:
            ValueError: bad rows, or ``src == dst``.
        """
        self._check_row(src)
        self._check_row(dst)
        if src == dst:
            raise ValueError("fork needs two different rows")
        self.reset(dst)
        for b in self._st.tables[self._r0 + src]:
            self._st.tables[self._r0 + dst].append(self.allocator.share(b))
        self.lengths[dst] = self.lengths[src]

    def _prepare_row(self, r: int, new_len: int) -> None:
        # make row r's table cover new_len tokens, copying a shared block before it is written
        table, bs = self._st.tables[self._r0 + r], self.block_size
        start = int(self.lengths[r])
        for i in range(start // bs, blocks_needed(new_len, bs)):
            if i < len(table):
                old = table[i]
                if self.allocator.ref[old] > 1:                    # copy-on-write: L·2·bs·H_kv·d_h elements
                    new = self.allocator.allocate()
                    self._st.buf[:, :, new] = self._st.buf[:, :, old]
                    self.allocator.free(old)
                    table[i] = new
            else:
                table.append(self.allocator.allocate())

    # -- the protocol the decoder uses --
    def update(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``k_new, v_new [B, H_kv, T, d_h]`` through the block tables; return K, V
        ``[B, H_kv, S, d_h]`` gathered into new contiguous tensors (``S = max(lengths) + T``; key
        index = position; entries beyond a row's own length are zeros or stale, masked by the
        decoder).  The gather copies ``2·B·S·H_kv·d_h`` elements (:attr:`gathered_bytes`).

        Raises:
            ValueError: wrong shape or a row would pass ``max_len``.  OutOfBlocksError.
        """
        B, Hkv, T, dh = k_new.shape
        if (B, Hkv, dh) != (self.batch, self.cfg.n_kv_heads, self.cfg.head_dim) or v_new.shape != k_new.shape:
            raise ValueError(f"k_new/v_new {tuple(k_new.shape)} must be [B={self.batch}, "
                             f"H_kv={self.cfg.n_kv_heads}, T, d_h={self.cfg.head_dim}]")
        lens = self.lengths.tolist()
        S = max(lens) + T
        if S > self.max_len:
            raise ValueError(f"writing T={T} tokens after {max(lens)} stored passes max_len={self.max_len}")
        bs = self.block_size
        kp = self.k_pool(layer).view(-1, Hkv, dh)                 # [N_blocks·bs, H_kv, d_h] flat slots
        vp = self.v_pool(layer).view(-1, Hkv, dh)
        for r in range(B):
            self._prepare_row(r, lens[r] + T)                     # idempotent after the first layer
            slots = slot_mapping(self._st.tables[self._r0 + r], torch.arange(lens[r], lens[r] + T), bs).to(kp.device)
            kp[slots] = k_new[r].transpose(0, 1)                  # write T·H_kv·d_h elements
            vp[slots] = v_new[r].transpose(0, 1)
        nblk = blocks_needed(S, bs)
        tables = torch.tensor([(t + [0] * nblk)[:nblk] for t in self.block_tables], dtype=torch.int64,
                              device=kp.device)                   # [B, nblk]; padding reads block 0, masked
        # the gather: a fresh contiguous copy of every row's history (the copy paged kernels avoid)
        k = self.k_pool(layer)[tables].reshape(B, nblk * bs, Hkv, dh)[:, :S].transpose(1, 2)
        v = self.v_pool(layer)[tables].reshape(B, nblk * bs, Hkv, dh)[:, :S].transpose(1, 2)
        self._st.gathered_bytes += 2 * B * S * Hkv * dh * self._st.buf.element_size()
        return k, v

    def advance(self, n_tokens: int) -> None:
        """Grow every row's stored length by ``n_tokens`` (called once per forward)."""
        self.lengths += n_tokens


# --- simulation --------------------------------------------------------------------------------
#: Most requests :func:`simulate_kv_memory` draws.
MAX_SIM_REQUESTS = 2**16


def simulate_kv_memory(n_requests: int = 256, max_len: int = 2048, block_size: int = 16, *,
                       mean_prompt: float = 160.0, mean_output: float = 340.0, capacity_tokens: int | None = None,
                       seed: int = 0) -> dict:
    """Seeded snapshot of a running batch: KV slots holding tokens vs slots reserved.

    Each request draws a prompt length and a final output length (log-normal, σ = 1, means
    ``mean_prompt``/``mean_output``, clipped so prompt + output ≤ ``max_len``) and a progress
    point: it has generated ``g ~ Uniform{0..output}`` tokens, so it holds ``prompt + g`` tokens.
    Policies (those of the PagedAttention paper's Fig. 2, with the Orca variants it compares):

    * ``contiguous_max`` — reserve ``max_len`` slots per request (Orca (Max));
    * ``contiguous_pow2`` — reserve the next power of two ≥ prompt + output (Orca (Pow2));
    * ``contiguous_oracle`` — reserve exactly prompt + output (Orca (Oracle)): still wasteful,
      because slots for tokens not yet generated are reserved from the start;
    * ``paged`` — ``blocks_needed(prompt + g)`` blocks: waste is the last block's tail only.

    Returns a dict: ``tokens_held``, for each policy ``<policy>_reserved`` (slots) and
    ``<policy>_utilisation`` (held / reserved), and, for a KV budget of ``capacity_tokens`` slots
    (default ``max_len · n_requests / 16``: room for one request in 16 at full length), ``<policy>_fit``: how many of the requests (in order)
    are admitted before the budget is exhausted.  No timing, no eviction: a snapshot.  The paged
    count is the blocks for the tokens held *now*; requests still generating will need more
    blocks later (a real server preempts or swaps when they run out), so ``paged_fit`` is an
    upper bound on what fits for the whole run.  ``contiguous_max_utilisation`` is simply
    ``tokens_held / (n_requests · max_len)``: it depends only on the length mix.
    Compare with the paper's 20.4 / 26.8 / 38.2 % for Orca Max / Pow2 / Oracle
    (:data:`PAGED_ATTENTION_PAPER_ORCA`; Kwon et al. 2023, arXiv:2309.06180, Fig. 2), measured
    on their traces, not on this synthetic mix; this snapshot has no external fragmentation,
    which could only make the contiguous policies look better than they are.

    At most :data:`MAX_SIM_REQUESTS` requests (65,536: about a quarter of a second of CPU; the
    utilisations settle long before).

    Raises:
        ValueError: ``n_requests`` not a positive integer or more than :data:`MAX_SIM_REQUESTS`;
            ``max_len``, ``block_size`` or ``capacity_tokens`` not a positive integer;
            ``mean_prompt`` or ``mean_output`` not a positive finite number; ``seed`` not an
            integer.
    """
    require_positive("n_requests", n_requests)
    if n_requests > MAX_SIM_REQUESTS:
        raise ValueError(f"n_requests={n_requests} is not allowed; at most MAX_SIM_REQUESTS={MAX_SIM_REQUESTS:,}")
    require_positive("max_len", max_len)
    require_positive("block_size", block_size)
    require_positive("mean_prompt", mean_prompt, integer=False)
    require_positive("mean_output", mean_output, integer=False)
    if capacity_tokens is None:
        capacity_tokens = max_len * n_requests // 16
    require_positive("capacity_tokens", capacity_tokens)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed={seed!r} is not allowed; it must be an integer")
    rng = random.Random(seed)
    sigma = 1.0

    def draw(mean):  # log-normal with the given mean: mu = ln(mean) - sigma²/2
        try:
            v = rng.lognormvariate(math.log(mean) - sigma ** 2 / 2, sigma)
        except OverflowError:   # a mean near the float limit: the draw is clipped to max_len below anyway
            v = math.inf
        return max(1, int(round(min(v, max_len))))

    held, res = [], {"contiguous_max": [], "contiguous_pow2": [], "contiguous_oracle": [], "paged": []}
    for _ in range(n_requests):
        p = min(draw(mean_prompt), max_len - 1)
        o = min(draw(mean_output), max_len - p)
        g = rng.randint(0, o)
        n = p + g
        held.append(n)
        res["contiguous_max"].append(max_len)
        res["contiguous_pow2"].append(min(max_len, 1 << (p + o - 1).bit_length()))
        res["contiguous_oracle"].append(p + o)
        res["paged"].append(blocks_needed(n, block_size) * block_size)
    out = {"n_requests": n_requests, "max_len": max_len, "block_size": block_size,
           "capacity_tokens": capacity_tokens, "tokens_held": sum(held)}
    for name, r in res.items():
        out[f"{name}_reserved"] = sum(r)
        out[f"{name}_utilisation"] = sum(held) / sum(r)
        used, fit = 0, 0
        for x in r:
            if used + x > capacity_tokens:
                break
            used += x
            fit += 1
        out[f"{name}_fit"] = fit
    return out
