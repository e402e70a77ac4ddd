"""Prefill/decode disaggregation (chapter 08): one process prefills, ships the KV cache, another decodes.

The account it changes is **stage placement**: prefill (compute-bound, T tokens per forward) and
decode (bandwidth-bound, one token per row per forward) run on different workers, so each can be
sized and parallelised for its own latency target (TTFT for prefill, ITL for decode) and a long
prefill never stalls other requests' decode steps.  The price is new traffic: the prompt's KV
cache, ``kv_cache_bytes(cfg, T)`` bytes, crosses a link once per request.

What it does *not* do by itself is raise throughput: the same FLOPs and the same bytes are spent,
now on two pools plus a transfer.  vLLM's documentation of its implementation says so in as many
words ("Disaggregated prefill DOES NOT improve throughput", vLLM docs, *Disaggregated Prefilling
(experimental)*, docs.vllm.ai/en/latest/features/disagg_prefill/), and gives its two reasons for it:
tuning TTFT and ITL separately, and controlling tail ITL.  DistServe (Zhong et al. 2024, OSDI,
"DistServe: Disaggregating Prefill and Decoding for Goodput-optimized Large Language Model Serving",
arXiv:2401.09670) measures the gain as *goodput*: the **maximum request rate** (requests/s; per GPU
when comparing deployments of different sizes) at which the system still meets an **SLO-attainment
target** — e.g. 90 % of requests meet both their TTFT SLO and their TPOT SLO.  It is found by sweeping
the arrival rate, not counted in one run, and it is a latency-constrained rate, not raw tokens/s.

:func:`run_disaggregated` runs the two roles as two processes with chapter 07's launcher
(:func:`llm_dataflow.launch.run_distributed`, gloo on CPU): rank 0 prefills and sends the KV cache
(one ``[L, 2, H_kv, T, d_h]`` tensor) and the first token with ``torch.distributed.send``; rank 1
receives them into its own :class:`~llm_dataflow.model.KVCache` and decodes.  The output equals the
single engine's ``Decoder.generate`` (tested).
"""
from __future__ import annotations

import math
import time

import torch

from .core.accounting import prefill_flops
from .core.config import ModelConfig, as_model_config, model_config
from .core.hardware import HardwareSpec, LINKS, as_hardware, as_link
from .core.kv import kv_cache_bytes
from .core.parallel import check_parallel
from .core.units import no_overflow, require_positive
from .launch import run_distributed
from .model import Decoder

__all__ = [
    "disagg_worker", "run_disaggregated", "single_engine", "kv_transfer_time", "kv_transfer_table",
]

_TORCH = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _build(cfg_name: str, seed: int, dtype: str):
    if not isinstance(dtype, str) or dtype not in _TORCH:
        raise ValueError(f"dtype={dtype!r} is not allowed; allowed: {', '.join(_TORCH)}")

    torch.manual_seed(seed)  # both ranks build bit-identical weights from the seed
    return Decoder(model_config(cfg_name), dtype=_TORCH[dtype])


@torch.inference_mode()
def single_engine(cfg_name: str, seed: int, prompt: list, max_new_tokens: int, dtype: str = "fp32") -> list:
    """The reference: one process, ``Decoder.generate`` of the seeded model → the new tokens (list).

    Raises:
        ValueError: unknown preset ``cfg_name`` or ``dtype`` (allowed: fp32, bf16, fp16).
    """
    model = _build(cfg_name, seed, dtype)
    ids = torch.tensor([prompt])
    return model.generate(ids, max_new_tokens)[0, len(prompt):].tolist()


@torch.inference_mode()
def disagg_worker(rank: int, world_size: int, cfg_name: str, seed: int, prompt: list, max_new_tokens: int,
                  dtype: str = "fp32") -> dict:
    """One rank of the disaggregated engine (a module-level target for ``run_distributed``).

    Rank 0 (prefill worker): prefill ``prompt`` ([1, T]), take the first token, send a header
    ``int64 [2] = (T, first token)`` and then the KV cache ``[L, 2, H_kv, T, d_h]`` to rank 1.
    Rank 1 (decode worker): receive both into its own cache (``lengths = T``) and decode
    ``max_new_tokens − 1`` further tokens.

    Returns:
        rank 0: ``{"role": "prefill", "kv_bytes_sent", "prefill_s", "send_s"}``;
        rank 1: ``{"role": "decode", "tokens" (list, all max_new_tokens), "kv_bytes_received",
        "recv_s", "decode_s", "itl_s" (list)}``.  Times are measured wall seconds.

    Raises:
        ValueError: ``world_size`` ≠ 2.
    """
    import torch.distributed as dist

    if world_size != 2:
        raise ValueError(f"world_size={world_size} is not allowed; disaggregation here uses exactly 2 ranks")
    model = _build(cfg_name, seed, dtype)
    cfg = model.cfg
    T = len(prompt)
    if rank == 0:
        cache = model.new_cache(1, T)
        t0 = time.perf_counter()
        first = int(model(torch.tensor([prompt]), cache, last_only=True)[0, -1].argmax())
        t1 = time.perf_counter()
        # one contiguous message: L·2·H_kv·T·d_h elements (the K and V of every layer, T tokens)
        kv = torch.stack([torch.stack([cache.k[i][0, :, :T], cache.v[i][0, :, :T]]) for i in range(cfg.n_layers)])
        dist.send(torch.tensor([T, first], dtype=torch.int64), dst=1)
        dist.send(kv.contiguous(), dst=1)
        t2 = time.perf_counter()
        return {"role": "prefill", "kv_bytes_sent": kv.numel() * kv.element_size(), "prefill_s": t1 - t0,
                "send_s": t2 - t1}
    cache = model.new_cache(1, T + max_new_tokens)
    t0 = time.perf_counter()
    head = torch.empty(2, dtype=torch.int64)
    dist.recv(head, src=0)
    n, first = int(head[0]), int(head[1])
    kv = torch.empty(cfg.n_layers, 2, cfg.n_kv_heads, n, cfg.head_dim, dtype=model.dtype)
    dist.recv(kv, src=0)
    for i in range(cfg.n_layers):
        cache.k[i][0, :, :n].copy_(kv[i, 0])
        cache.v[i][0, :, :n].copy_(kv[i, 1])
    cache.lengths[:] = n
    t1 = time.perf_counter()
    tokens, times = [first], [t1]
    for _ in range(max_new_tokens - 1):
        tok = int(model(torch.tensor([[tokens[-1]]]), cache)[0, -1].argmax())
        tokens.append(tok)
        times.append(time.perf_counter())
    return {"role": "decode", "tokens": tokens, "kv_bytes_received": kv.numel() * kv.element_size(),
            "recv_s": t1 - t0, "decode_s": times[-1] - t1, "itl_s": [b - a for a, b in zip(times, times[1:])]}


def run_disaggregated(cfg_name: str = "tiny-llama", prompt: list | None = None, max_new_tokens: int = 16,
                      seed: int = 0, dtype: str = "fp32", timeout_s: float = 60.0) -> dict:
    """Run prefill on one process and decode on another (``run_distributed(disagg_worker, 2, …)``).

    Returns:
        ``{"tokens": list, "kv_bytes": int, "kv_cache_bytes": kv_cache_bytes(cfg, T, 1, dtype),
        "prefill": rank-0 dict, "decode": rank-1 dict}``.

    Raises:
        ValueError: empty prompt, ``max_new_tokens`` < 1, unknown preset or dtype.
        RuntimeError / TimeoutError: from the launcher.
    """
    cfg = model_config(cfg_name)
    if dtype not in _TORCH:
        raise ValueError(f"dtype={dtype!r} is not allowed; allowed: {', '.join(_TORCH)}")
    require_positive("max_new_tokens", max_new_tokens)
    if prompt is None:
        prompt = list(range(1, 17))
    if not prompt:
        raise ValueError("prompt is empty; give at least one token id")
    r0, r1 = run_distributed(disagg_worker, 2, cfg_name, seed, list(prompt), max_new_tokens, dtype,
                             backend="gloo", timeout_s=timeout_s)
    return {"tokens": r1["tokens"], "kv_bytes": r0["kv_bytes_sent"],
            "kv_cache_bytes": kv_cache_bytes(cfg, len(prompt), 1, dtype), "prefill": r0, "decode": r1}


@no_overflow('prompt_len')
def kv_transfer_time(cfg: ModelConfig | str, prompt_len: int, link_name: str, dtype: str = "bf16", *,
                     tp: int = 1, nics: int | None = None) -> float:
    """Seconds to move one request's prompt KV cache over ``link_name`` from a prefill instance
    that ran with tensor parallelism ``tp``: ``latency + bytes on the busiest link /
    bandwidth_per_direction`` (the α–β model; the link's latency is illustrative, see
    :class:`~llm_dataflow.core.hardware.LinkSpec`).

    Under TP the KV cache is already sharded: each GPU holds the K and V of its own KV heads,
    ``kv_cache_bytes / tp`` (``tp ≤ n_kv_heads``; beyond that the heads are replicated and only
    ``n_kv_heads`` distinct shards exist; MLA's latent is replicated, one shard).  Each GPU sends
    its shard over its own NIC, so ``nics`` links carry the shards in parallel — by default one per
    GPU, as on an HGX/DGX H100 node (eight 400 Gb/s ConnectX-7 NICs, one per GPU: NVIDIA DGX H100
    User Guide).  ``nics=1`` sends everything through one port.  The decode instance must receive
    as many shards in parallel (the same split; a different TP there re-shards the heads).

    Args:
        cfg: preset name or :class:`ModelConfig`.  prompt_len: tokens (≥ 1).
        link_name: a link preset (:data:`~llm_dataflow.core.hardware.LINKS`).
        dtype: KV dtype.  tp: the prefill instance's tensor-parallel degree
            (:func:`~llm_dataflow.core.parallel.check_parallel` must accept it).
        nics: links used in parallel (default ``tp``).

    Raises:
        ValueError: ``cfg`` neither a preset name nor a ModelConfig, ``link_name`` not a link
            preset, unknown ``dtype``, ``prompt_len`` not a positive integer, a TP degree the
            model does not allow, ``nics`` not a positive integer (each message names the
            argument).
            Counts (``prompt_len``) so large that a result overflows a float: a
            ValueError naming them.
    """

    cfg = as_model_config(cfg)
    require_positive("prompt_len", prompt_len)
    check_parallel(cfg, tp=tp)
    nics = tp if nics is None else require_positive("nics", nics)
    ln = as_link(link_name, "link_name")
    shards = 1 if cfg.is_mla else min(tp, cfg.n_kv_heads)    # distinct KV shards (replicas are not resent)
    links_used = min(nics, shards)
    per_link = kv_cache_bytes(cfg, prompt_len, 1, dtype) / shards * math.ceil(shards / links_used)
    return ln.latency_s + per_link / ln.bandwidth_per_direction


@no_overflow('prompt_len')
def kv_transfer_table(cfg: ModelConfig | str, prompt_len: int, dtype: str = "bf16",
                      hw: HardwareSpec | str = "H100-SXM", links: tuple | None = None, *, tp: int = 1) -> list:
    """One row per link: KV bytes, transfer time (s, :func:`kv_transfer_time` with one NIC per
    GPU) and its ratio to the ideal prefill time ``prefill_flops / (tp · peak)`` on ``tp`` GPUs of
    ``hw`` (dense ``dtype`` peak; a lower bound on prefill time, so the ratio is an upper bound on
    the transfer's relative cost).

    ``links``: link preset names (default, or empty: every entry of :data:`~llm_dataflow.core.hardware.LINKS`).

    Raises:
        ValueError: ``cfg`` neither a preset name nor a ModelConfig, ``hw`` neither a hardware
            preset name nor a HardwareSpec, ``links`` not a list or tuple of link preset names,
            unknown ``dtype``, ``prompt_len`` not a positive integer, a TP degree the model does
            not allow (each message names the argument).
            Counts (``prompt_len``) so large that a result overflows a float: a
            ValueError naming them.
    """

    cfg = as_model_config(cfg)
    hw = as_hardware(hw)
    require_positive("prompt_len", prompt_len)
    check_parallel(cfg, tp=tp)
    if links is not None and not isinstance(links, (list, tuple)):
        raise ValueError(f"links={links!r} is not allowed; give a tuple of link preset names or None")
    names = tuple(links) if links else tuple(LINKS)
    for name in names:
        if not isinstance(name, str):
            raise ValueError(f"links contains {name!r}; each must be a link preset name")
        as_link(name, "links")
    t_pre = prefill_flops(cfg, prompt_len) / (tp * hw.flops(dtype))
    rows = []
    for name in names:
        t = kv_transfer_time(cfg, prompt_len, name, dtype, tp=tp)
        rows.append({"link": name, "KV bytes": kv_cache_bytes(cfg, prompt_len, 1, dtype), "transfer s": t,
                     "ideal prefill s": t_pre, "transfer / prefill": t / t_pre})
    return rows
