"""Tests for llm_dataflow.paged: allocator, block-table index math, paged attention and cache."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

import llm_dataflow as ldf


# --- index math (property tests) -----------------------------------------------------------------
@given(n=st.integers(0, 10_000), bs=st.integers(1, 300))
def test_blocks_and_tail_waste(n, bs):
    nb = ldf.blocks_needed(n, bs)
    w = ldf.tail_waste(n, bs)
    assert nb * bs == n + w and 0 <= w < bs
    assert (nb - 1) * bs < n <= nb * bs or n == nb == 0


@st.composite
def _table(draw):
    bs = draw(st.integers(1, 17))
    n_phys = draw(st.integers(1, 40))
    table = draw(st.lists(st.integers(0, n_phys - 1), min_size=1, max_size=n_phys, unique=True))
    n_tok = draw(st.integers(1, len(table) * bs))
    return bs, n_phys, table, n_tok


@settings(max_examples=200, deadline=None)
@given(_table())
def test_slot_mapping_is_a_bijection_into_the_tables_blocks(args):
    bs, n_phys, table, n_tok = args
    slots = ldf.slot_mapping(table, torch.arange(n_tok), bs)
    assert len(set(slots.tolist())) == n_tok                                  # no two tokens collide
    assert set((slots // bs).tolist()) <= set(table)                          # only the row's blocks
    assert (slots < n_phys * bs).all()
    for p in (0, n_tok - 1, n_tok // 2):
        blk, off = ldf.slot_of(table, p, bs)
        assert slots[p] == blk * bs + off and 0 <= off < bs and blk == table[p // bs]
    # consecutive positions in one logical block are consecutive slots
    for p in range(n_tok - 1):
        if (p + 1) % bs:
            assert slots[p + 1] == slots[p] + 1


@given(bs=st.integers(1, 16), nblk=st.integers(1, 8))
def test_slot_of_rejects_positions_beyond_the_table(bs, nblk):
    table = list(range(nblk))
    with pytest.raises(ValueError, match="position"):
        ldf.slot_of(table, nblk * bs, bs)
    with pytest.raises(ValueError, match="position"):
        ldf.slot_of(table, -1, bs)


def test_bad_block_size():
    with pytest.raises(ValueError, match="block_size"):
        ldf.blocks_needed(10, 0)
    with pytest.raises(ValueError, match="block_size"):
        ldf.BlockAllocator(4, 0)
    with pytest.raises(ValueError, match="n_tokens"):
        ldf.blocks_needed(-1, 16)


# --- allocator ------------------------------------------------------------------------------------
def test_allocator_free_list_and_refcounts():
    a = ldf.BlockAllocator(3, 16)
    b0, b1, b2 = a.allocate(), a.allocate(), a.allocate()
    assert (b0, b1, b2) == (0, 1, 2) and a.num_free == 0
    with pytest.raises(ldf.OutOfBlocksError):
        a.allocate()
    a.share(b1)
    a.free(b1)
    assert a.num_free == 0 and a.ref[b1] == 1
    a.free(b1)
    assert a.num_free == 1 and a.allocate() == b1
    a.free(b0)
    with pytest.raises(ValueError, match="free"):
        a.free(b0)                                               # double free
    with pytest.raises(ValueError, match="out of range"):
        a.share(3)


# --- paged attention kernel ---------------------------------------------------------------------
@pytest.mark.parametrize("T", [1, 3])
@pytest.mark.parametrize("window", [None, 4, 100])
def test_paged_attention_matches_contiguous(T, window):
    g = torch.Generator().manual_seed(0)
    B, H, Hkv, d, bs = 3, 4, 2, 8, 5
    lens = [7, 13, 3]
    tabs = [[3, 0], [5, 9, 1], [11]]
    kp = torch.randn(12, bs, Hkv, d, generator=g)
    vp = torch.randn(12, bs, Hkv, d, generator=g)
    q = torch.randn(B, H, T, d, generator=g)
    out = ldf.paged_attention(q, kp, vp, tabs, lens, window=window)
    for b in range(B):
        k = kp[tabs[b]].reshape(-1, Hkv, d)[:lens[b]].transpose(0, 1)[None]
        v = vp[tabs[b]].reshape(-1, Hkv, d)[:lens[b]].transpose(0, 1)[None]
        torch.testing.assert_close(out[b:b + 1], ldf.attention_reference(q[b:b + 1], k, v, window=window))


def test_paged_attention_rejects_short_table():
    kp = torch.zeros(4, 2, 1, 4)
    with pytest.raises(ValueError, match="block table"):
        ldf.paged_attention(torch.zeros(1, 1, 1, 4), kp, kp, [[0]], [3])


# --- the cache under the Decoder ------------------------------------------------------------------
def _model():
    torch.manual_seed(0)
    return ldf.Decoder(ldf.model_config("tiny-llama"))


def test_decoder_on_paged_cache_matches_contiguous_ragged():
    m = _model()
    cfg = m.cfg
    ids = torch.randint(0, cfg.vocab_size, (2, 9))
    pc = ldf.PagedKVCache(cfg, 2, num_blocks=16, block_size=4)
    c = m.new_cache(2, 32)
    torch.testing.assert_close(m(ids, pc), m(ids, c))
    # make rows ragged: refill row 1 with a shorter prompt
    short = torch.randint(0, cfg.vocab_size, (1, 3))
    pc.reset(1)
    c.reset(1)
    torch.testing.assert_close(m(short, pc.rows(1)), m(short, c.rows(1)))
    assert pc.lengths.tolist() == [9, 3] and len(pc.block_tables[1]) == 1
    for _ in range(5):
        nid = torch.randint(0, cfg.vocab_size, (2, 1))
        torch.testing.assert_close(m(nid, pc), m(nid, c))
    assert pc.lengths.tolist() == c.lengths.tolist() == [14, 8]
    assert [len(t) for t in pc.block_tables] == [4, 2]
    assert pc.bytes_used == c.bytes_used
    assert pc.nbytes == 6 * 4 * pc.bytes_per_token < c.nbytes


def test_prefix_sharing_and_copy_on_write():
    m = _model()
    cfg = m.cfg
    prompt = torch.randint(0, cfg.vocab_size, (1, 10))          # 10 tokens: blocks of 4 → 3 blocks
    pc = ldf.PagedKVCache(cfg, 3, num_blocks=12, block_size=4)
    m(prompt, pc.rows(0))
    pc.fork(0, 1)
    pc.fork(0, 2)
    assert pc.block_tables[0] == pc.block_tables[1] == pc.block_tables[2]
    assert [pc.allocator.ref[b] for b in pc.block_tables[0]] == [3, 3, 3]
    assert pc.allocator.num_free == 12 - 3
    c = m.new_cache(3, 16)
    m(prompt.expand(3, -1).contiguous(), c)
    nid = torch.tensor([[1], [2], [3]])
    torch.testing.assert_close(m(nid, pc), m(nid, c))           # rows diverge: the tail block is copied
    t = pc.block_tables
    assert t[0][:2] == t[1][:2] == t[2][:2]                      # full prefix blocks still shared
    assert len({t[0][2], t[1][2], t[2][2]}) == 3                 # tail: two copies + the original
    assert pc.allocator.num_free == 12 - 5
    pc.reset(0)
    pc.reset(1)
    pc.reset(2)
    assert pc.allocator.num_free == 12


def test_out_of_blocks():
    cfg = ldf.model_config("tiny-llama")
    pc = ldf.PagedKVCache(cfg, 1, num_blocks=2, block_size=4)
    k = torch.zeros(1, cfg.n_kv_heads, 9, cfg.head_dim)
    with pytest.raises(ValueError, match="max_len"):
        pc.update(0, k, k)
    with pytest.raises(ldf.OutOfBlocksError):
        ldf.PagedKVCache(cfg, 1, num_blocks=2, block_size=4, max_len=100).update(0, k, k)


def test_simulation_is_seeded_and_paging_wastes_less_than_a_block_per_request():
    a = ldf.simulate_kv_memory(200, 2048, 16, seed=3)
    assert a == ldf.simulate_kv_memory(200, 2048, 16, seed=3)
    assert a["paged_reserved"] - a["tokens_held"] < 200 * 16
    assert a["contiguous_max_reserved"] == 200 * 2048
    assert a["paged_utilisation"] > a["contiguous_oracle_utilisation"] > a["contiguous_max_utilisation"]
    assert a["paged_fit"] > a["contiguous_max_fit"] == a["capacity_tokens"] // 2048
    lo, hi = ldf.PAGED_ATTENTION_PAPER_UTILISATION
    assert (lo, hi) == (0.204, 0.382)


def test_paper_orca_numbers_and_max_policy_is_length_mix_only():
    lo, hi = ldf.PAGED_ATTENTION_PAPER_UTILISATION
    orca = ldf.PAGED_ATTENTION_PAPER_ORCA
    assert (orca["contiguous_max"], orca["contiguous_pow2"], orca["contiguous_oracle"]) == (0.204, 0.268, 0.382)
    assert min(orca.values()) == lo and max(orca.values()) == hi
    a = ldf.simulate_kv_memory(300, 2048, 16, seed=1)
    assert a["contiguous_max_utilisation"] == a["tokens_held"] / (300 * 2048)
    # paged reservations are for tokens held now: never fewer slots than tokens, < one block more each
    assert a["tokens_held"] <= a["paged_reserved"] < a["tokens_held"] + 300 * 16


def test_update_counts_the_contiguous_gather():
    # the Decoder's attention needs contiguous K/V, so update() copies every row's whole history
    # out of its blocks in every layer: 2·B·S·H_kv·d_h elements per layer and call
    cfg = ldf.model_config("tiny-llama")
    torch.manual_seed(0)
    model = ldf.Decoder(cfg)
    pc = ldf.PagedKVCache(cfg, batch=2, num_blocks=16, block_size=4)
    with torch.no_grad():
        model(torch.randint(0, cfg.vocab_size, (2, 7)), pc)               # prefill: S = 7
        per_layer = 2 * 2 * 7 * cfg.n_kv_heads * cfg.head_dim * 4
        assert pc.gathered_bytes == cfg.n_layers * per_layer
        before = pc.gathered_bytes
        model(torch.randint(0, cfg.vocab_size, (2, 1)), pc)               # one decode step: S = 8
        assert pc.gathered_bytes - before == cfg.n_layers * 2 * 2 * 8 * cfg.n_kv_heads * cfg.head_dim * 4
    assert pc.rows(1).gathered_bytes == pc.gathered_bytes                  # one counter per pool
