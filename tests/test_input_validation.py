"""Every public calculator rejects bad input cleanly (issue 16, kind 5).

Property, for each public calculator (an analytic function of numbers, names and configs: no
tensors, no measurement, no files): **any input either returns a finite, non-negative result or
raises ValueError naming the argument, within a second.**  Inputs mix valid values (presets,
known dtype and hardware names, small and large counts) with wrong types and extreme values
(None, bools, strings, NaN, ±inf, ±10**30).  Hypothesis runs derandomized (the same examples
every run) and stores nothing.

``test_every_public_function_is_classified`` keeps the list complete: a new public function must
be added either to ``CALCULATORS`` or to ``NOT_CALCULATORS`` with the reason it is not one.
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import os
import pkgutil
import re
import signal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llm_dataflow as ldf

SECONDS = 1.0
#: examples per calculator: a fixed budget in every run; HYPOTHESIS_PROFILE=long (conftest.py)
#: searches with that profile's budget instead
EXAMPLES = 40 if os.environ.get("HYPOTHESIS_PROFILE", "default") == "default" else settings.default.max_examples

# --- strategies -----------------------------------------------------------------------------------
JUNK = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([10**30, -10**30, 2**63]),
                 st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4), st.just([]), st.just({}),
                 st.just((1, 2)))
COUNT = st.one_of(st.integers(0, 70), st.sampled_from([128, 4096, 2**20, 10**9]))
POSITIVE_FLOAT = st.one_of(st.floats(0, 1), st.sampled_from([0.1, 2.5, 1e3, 1e12]))
PRESETS = sorted(ldf.MODEL_PRESETS)
CONFIGS = st.sampled_from([ldf.model_config(n) for n in PRESETS])
HW_NAMES = sorted(ldf.HARDWARE)
LINK_NAMES = sorted(ldf.LINKS)
DTYPES = sorted(ldf.DTYPE_BITS) + ["fp12", "int3"]
VALID = {  # parameter name -> strategy of plausible values (JUNK is mixed in for every parameter)
    "cfg": st.one_of(CONFIGS, st.sampled_from(PRESETS)),
    "model": st.one_of(st.sampled_from(PRESETS), CONFIGS),
    "hw": st.one_of(st.sampled_from(HW_NAMES), st.sampled_from([ldf.hardware(n) for n in HW_NAMES])),
    "hardware": st.sampled_from(HW_NAMES), "hardware_name": st.sampled_from(HW_NAMES),
    "link": st.sampled_from(LINK_NAMES), "link_name": st.sampled_from(LINK_NAMES),
    "pp_link": st.sampled_from(LINK_NAMES), "intra_link": st.sampled_from(LINK_NAMES),
    "inter_link": st.sampled_from(LINK_NAMES), "links": st.lists(st.sampled_from(LINK_NAMES), max_size=3).map(tuple),
    "op": st.sampled_from(ldf.COLLECTIVE_OPS),
    "mla": st.sampled_from(ldf.MLA_FORMS), "embedding": st.sampled_from(["rows", "table"]),
    "phase": st.sampled_from(ldf.PHASES), "attention": st.sampled_from(ldf.ATTENTION_KERNELS),
    "kernel": st.sampled_from(ldf.ATTENTION_KERNELS), "fmt": st.sampled_from(list(ldf.WEIGHT_FORMATS)),
    "scheme": st.sampled_from(ldf.QUANT_SCHEMES), "weights": st.sampled_from(list(ldf.WEIGHT_FORMATS)),
    "name": st.sampled_from(PRESETS + HW_NAMES + LINK_NAMES + list(ldf.GENERATIONS)),
    "quant": st.one_of(st.none(), st.sampled_from([ldf.QuantSpec.int4_groupwise(128), ldf.QuantSpec.fp8_block(128)])),
    "alpha": st.floats(0, 1), "reserve_fraction": st.floats(0, 1), "cost_ratio": POSITIVE_FLOAT,
    "verify_ratio": POSITIVE_FLOAT, "rate_per_s": POSITIVE_FLOAT, "mean_prompt": POSITIVE_FLOAT,
    "mean_output": POSITIVE_FLOAT, "t_stage": POSITIVE_FLOAT, "t_comm": POSITIVE_FLOAT, "nbytes": POSITIVE_FLOAT,
    "flops": POSITIVE_FLOAT, "value": POSITIVE_FLOAT, "seconds": POSITIVE_FLOAT,
    "all_logits": st.booleans(), "active": st.booleans(), "residual": st.booleans(), "binary": st.booleans(),
    "separators": st.booleans(),
    "kind": st.sampled_from(["time", "bandwidth", "flops"]),
    "unit": st.sampled_from(["tokens/s", "tokens/s/GPU", "us", "TFLOP/s", "GB/s", "PFLOP/s", "B", "s"]),
    "params": st.one_of(st.none(), st.fixed_dictionaries({"M": COUNT, "N": COUNT, "K": COUNT})),
    "accepted": st.lists(st.integers(-1, 9), max_size=8), "block_table": st.lists(st.integers(-1, 9), max_size=6),
    "shape": st.lists(st.integers(0, 4096), max_size=4),
    "quantization_config": st.one_of(st.none(), st.fixed_dictionaries({"bits": st.integers(0, 9)})),
    "info": st.fixed_dictionaries({"data_offsets": st.lists(st.integers(-5, 100), max_size=3)}),
    "rows": st.just([]), "caches": st.none(), "text": st.sampled_from(["32K", "1024 KB", "48 MiB", "2M", "x"]),
    "allowed": st.none(), "field": st.sampled_from(["dtype", "x"]),
    "gamma": st.one_of(st.integers(1, 20), st.just(10**30)), "max_gamma": st.integers(1, 20),
    "layer": st.integers(-1, 100), "digits": st.integers(0, 6),
    "model_type": st.sampled_from(ldf.VISION_MODEL_TYPES),
    "vision_config": st.one_of(st.just({}), st.fixed_dictionaries({}, optional={"hidden_size": COUNT,
                                                                              "patch_size": COUNT,
                                                                              "vision_use_head": st.booleans()})),
    "outer": st.one_of(st.none(), st.fixed_dictionaries({}, optional={"spatial_merge_size": COUNT,
                                                                     "vision_feature_layer": JUNK})),
}
DTYPE_PARAMS = {"dtype", "kv_dtype", "act_dtype", "id_dtype", "compute_dtype", "scale_dtype", "kv", "activations",
                "compute"}


def strategy_for(name: str):
    if name in VALID:
        valid = VALID[name]
    elif name in DTYPE_PARAMS:
        valid = st.one_of(st.none(), st.sampled_from(DTYPES))
    else:  # counts, sizes, lengths, degrees, seeds
        valid = COUNT
    return st.one_of(valid, valid, JUNK)   # two parts valid to one part junk


def kwargs_strategy(fn):
    required, optional = {}, {}
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        (required if p.default is p.empty else optional)[p.name] = strategy_for(p.name)
    return st.fixed_dictionaries(required, optional=optional)


# --- the property ---------------------------------------------------------------------------------
class _Timeout(BaseException):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def bounded_call(fn, kwargs):
    """``("ok", result)``, ``("ValueError", err)``, ``("timeout", None)`` or ``("other", err)``.

    The second is CPU time of this process (``ITIMER_PROF``), so neighbours on a shared machine
    do not make a fast calculator look slow; a wall-clock limit of 10 s backs it up."""
    old = {sig: signal.signal(sig, _alarm) for sig in (signal.SIGPROF, signal.SIGALRM)}
    signal.setitimer(signal.ITIMER_PROF, SECONDS)
    signal.setitimer(signal.ITIMER_REAL, 10 * SECONDS)
    try:
        return "ok", fn(**kwargs)
    except ValueError as err:
        return "ValueError", err
    except _Timeout:
        return "timeout", None
    except Exception as err:  # noqa: BLE001 — the property forbids every other exception
        return "other", err
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, handler in old.items():
            signal.signal(sig, handler)


def bad_numbers(x, path="result", depth=0):
    """Paths of numbers in ``x`` that are NaN, infinite or negative."""
    if depth > 6:
        return []
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return []
    if isinstance(x, int):   # exact, so finite however large (math.isfinite would overflow)
        return [] if x >= 0 else [f"{path}={x!r}"]
    if isinstance(x, float):
        return [] if (math.isfinite(x) and x >= 0) else [f"{path}={x!r}"]
    if isinstance(x, dict):
        return [b for k, v in x.items() for b in bad_numbers(v, f"{path}[{k!r}]", depth + 1)]
    if isinstance(x, (list, tuple)):
        return [b for i, v in enumerate(x[:200]) for b in bad_numbers(v, f"{path}[{i}]", depth + 1)]
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return [b for f in dataclasses.fields(x) for b in bad_numbers(getattr(x, f.name), f"{path}.{f.name}", depth + 1)]
    return []


#: Words that name an argument of these parameter names: a preset lookup says which registry
#: (``model='x' is not a preset``), a config is named by its fields.
ALIASES = {"name": {"model", "hardware", "link", "generation"}, "cfg": {"model"}, "model": {"cfg"},
           "hw": {"hardware"}, "hardware_name": {"hardware", "hw"}, "hardware": {"hw"}, "link_name": {"link"},
           "pp_link": {"link"}, "intra_link": {"link"}, "inter_link": {"link"}}
CONFIG_FIELDS = {f.name for f in dataclasses.fields(ldf.ModelConfig)}


def names_an_argument(message: str, fn, kwargs) -> bool:
    """The message names a parameter of ``fn`` (or its registry, see ALIASES); for a config
    argument, a field of the config; for a dict argument (a config.json), one of its keys."""
    params = set(inspect.signature(fn).parameters)
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_.]*", message)) | set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", message))
    allowed = set(params) | {a for p in params for a in ALIASES.get(p, ())}
    if params & {"cfg", "model"}:
        allowed |= CONFIG_FIELDS
    for v in kwargs.values():
        if isinstance(v, dict):
            allowed |= {k for k in v if isinstance(k, str)} | {"model_type"}
    return bool(words & allowed)


#: Calculators whose documented result may be ``math.inf``: ``critical_batch`` returns it when a
#: decode step never turns compute-bound up to ``max_batch``; ``critical_batch_per_kernel``'s
#: fields likewise.
INFINITY_ALLOWED = {ldf.critical_batch, ldf.critical_batch_per_kernel}


def check_property(fn, kwargs):
    outcome, value = bounded_call(fn, kwargs)
    if outcome == "ok":
        bad = [] if (fn in INFINITY_ALLOWED and value == math.inf) else bad_numbers(value)
        if fn in INFINITY_ALLOWED:   # a dataclass of critical batches may hold math.inf ("never")
            bad = [b for b in bad if not b.endswith("=inf")]
        assert not bad, f"{fn.__name__}(**{kwargs!r}) returned non-finite or negative numbers: {bad[:3]}"
    elif outcome == "ValueError":
        assert names_an_argument(str(value), fn, kwargs), \
            f"{fn.__name__}(**{kwargs!r}) raised ValueError not naming an argument: {value}"
    elif outcome == "timeout":
        pytest.fail(f"{fn.__name__}(**{kwargs!r}) did not return within {SECONDS} s")
    else:
        pytest.fail(f"{fn.__name__}(**{kwargs!r}) raised {type(value).__name__}: {value}")


# --- which functions are calculators --------------------------------------------------------------
def _from_hf(config):
    return ldf.ModelConfig.from_hf(config)


CALCULATOR_NAMES = """
weight_bytes weight_bytes_breakdown weight_bytes_read layer_weight_bytes expected_experts_hit kv_bytes kv_read_over_steps
activation_bytes tp_bytes_per_token_per_layer ep_bytes_per_token matmul_params attention_flops_per_token
decode_step_flops decode_step_bytes prefill_flops prefill_bytes
generation generations_table
collective_bytes_per_rank collective_steps collective_time p2p_time ring_hops two_tier_ring_time
model_config tensor_specs param_count
kv_transfer_time kv_transfer_table
input_vs_state embedding_calc
check_parallel valid_tp_degrees memory_fit tensor_shares engine_memory non_torch_bytes check_quant_shards
engine_spec non_torch_estimate sglang_preload_bytes cuda_graph_estimate kv_layout max_model_len_limit config_warnings
quant_spec_from_config checkpoint_precision
attention_hbm_accesses
precision_plan
fused_block_rows fusion_bytes
gemm_traffic gemm_tile_report tile_waves
hardware link arithmetic_intensity ridge_point custom_hardware runtime_memory_bytes hardware_arg
kv_layer_bytes_per_token kv_bytes_per_token kv_tokens_held kv_cache_bytes kv_scale_bytes_per_tensor kv_cache_report
state_bytes_per_sequence vision_param_count
request_ledger movement_totals movement_times memory_tiers ledger_summary
capacity tensor_parameters tensor_file_range
parse_cache_size mountain_sizes
analytic_op_costs attention_traffic layer_costs op_regions matmul_ridge_tokens attention_floors
blocks_needed tail_waste slot_of simulate_kv_memory
check_tp_degree layer_partition pipeline_schedule pipeline_bubble_fraction check_ep_degree
ring_attention_bytes_per_rank parallel_step_time
plan_report
aggregate_hardware to_si
quant_spec quant_report
decode_step_bounds prefill_bounds decode_step_lower_bound prefill_lower_bound critical_batch decode_calculator
critical_batch_per_kernel row_precision covering_rows published_range
batch_calculator
expected_tokens_per_step speculative_speedup best_gamma speculative_calculator accepted_count_pmf
acceptance_by_position
id_bytes
engine_defaults sampler_warmup_bytes
dtype_bits dtype_bytes check_dtype fmt_bytes fmt_gb fmt_gib fmt_measured fmt_num fmt_si fmt_time
make_workload
""".split()
CALCULATORS = {n: getattr(ldf, n) for n in CALCULATOR_NAMES}
CALCULATORS["ModelConfig"] = ldf.ModelConfig
CALCULATORS["ModelConfig.from_hf"] = _from_hf
MINE = {"model_config", "tensor_specs", "param_count", "capacity", "tensor_parameters", "tensor_file_range",
        "expected_tokens_per_step", "speculative_speedup", "best_gamma", "speculative_calculator",
        "accepted_count_pmf", "acceptance_by_position", "id_bytes", "ModelConfig", "ModelConfig.from_hf"}

# Public functions that are not calculators, by kind: they take or return tensors or modules
# (kernels and their references), measure this machine, read or write files, launch processes,
# draw figures or widgets, or check preconditions for one of those.
_KERNELS = """embedding_gather embedding_reference gather_bytes flash_attention attention_partial
merge_attention_partials norm_unfused norm_fused norm_buffers tiled_matmul rms_norm rope_cos_sin apply_rope
attention_reference swiglu route row_range linear slot_mapping paged_attention shard_decoder_tp tp_forward
tp_generate tp_layer_forward pipeline_forward shard_moe_ep ep_moe_forward ring_attention build_decoder demo_inputs
pack_int4 unpack_int4 quantize_weight dequantize_weight quantize_decoder quantized_weight_bytes logit_error
int8_weight_matmul ring_all_reduce ids_tensor layer_nbytes greedy_decode hf_peer_model hf_greedy_decode
speculative_generate build_target_from_draft make_speculative_pair serve_static serve_continuous
serving_metrics check_schedule op_ledger ledger_totals ledger_view encode_chat""".split()
_MEASURE = """device describe_device synchronize time_fn progress cpu_threads seed_all host_to_device_seconds
host_round_trip_seconds stream_bandwidth gemv_bandwidth gemv_bandwidths matmul_flops cpu_supports_bf16 measure_roofline best_time
decode_bandwidth time_prefill time_decode_step peak_memory_bytes fusion_benchmark fusion_verdicts reader_tiers
cache_levels available_memory_bytes time_calls memory_mountain call_overhead tier_bandwidth dram_onset
last_level_cache_bytes past_last_level_bytes parse_lscpu_caches kv_cache_speedup offload_run offload_table
linear_choice linear_candidates reset_linear_choice choose_linear_kernel demo_collectives
timed_greedy_generate time_speculative tier_probe_bytes physical_ram_bytes run_stamp measured_count""".split()
_FILES_PROCESSES_UI = """minilm_checkpoint read_safetensors_header evict_from_page_cache read_rows_lazily
write_sharded_checkpoint checkpoint_files load_sharded_checkpoint inspect_checkpoint measure_load_path
checkpoint_dir_from_env minilm_tokenizer book_corpus train_byte_bpe render_chat read_tokenizer_config
load_model_arg run_distributed rank_device pick_backend free_port start_method disagg_worker run_disaggregated
single_engine demo_tensor_parallel demo_pipeline_parallel demo_expert_parallel demo_context_parallel demo_all
calculator calculator_html calculator_rows static_views_enabled hosted_install_cell use_book_style with_thousands
plot_mountain all_diagrams write_diagrams phone_sized
plot_pipeline_timeline plot_topology published_measurements published_table read_published_rows require_positive
require_nonnegative check_token_ids card_messages translate_card stamp_measuring_cells value_template
decode_input read_engine_text parse_command find_command explain explain_text efficiency_range""".split()
NOT_CALCULATORS = {**{n: "tensors or modules (a kernel or its reference)" for n in _KERNELS},
                   **{n: "measures this machine" for n in _MEASURE},
                   **{n: "files, processes, figures, widgets or a validation helper (tested elsewhere)"
                      for n in _FILES_PROCESSES_UI}}

#: Known failures in modules this test's author does not own: ``{name: (owner, [minimal inputs])}``
#: (hypothesis's shrunk examples).  Each input is checked first, so the xfail does not depend on
#: the search finding it again; once the owner fixes the function, strict xfail fails the test
#: until the entry is removed.
KNOWN_FAILURES: dict[str, tuple[str, list]] = {}   # all 38 fixed (issue 16, kind 5)


def _public_functions():
    out = {}
    for m in pkgutil.iter_modules(ldf.__path__):
        if m.name.startswith("_"):
            continue
        mod = importlib.import_module(f"llm_dataflow.{m.name}")
        for n in getattr(mod, "__all__", []):
            obj = getattr(mod, n)
            if callable(obj) and not inspect.isclass(obj):  # functions, lru_cache wrappers
                out[n] = m.name
    return out


def test_every_public_function_is_classified():
    public = _public_functions()
    missing = sorted(n for n in public if n not in CALCULATORS and n not in NOT_CALCULATORS)
    assert not missing, f"classify these public functions (CALCULATORS or NOT_CALCULATORS): {missing}"
    stale = sorted(n for n in list(CALCULATOR_NAMES) + list(NOT_CALCULATORS) if n not in public)
    assert not stale, f"no longer public: {stale}"


def _param(name):
    marks = []
    if name in KNOWN_FAILURES:
        owner, examples = KNOWN_FAILURES[name]
        marks = [pytest.mark.xfail(strict=True, reason=f"the owner of {owner} fixes: {name} on {examples!r}")]
    return pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", [_param(n) for n in CALCULATORS])
def test_calculator_rejects_bad_input_cleanly(name):
    fn = CALCULATORS[name]
    target = fn if name != "ModelConfig.from_hf" else _from_hf
    strategy = kwargs_strategy(target) if name not in SPECIAL else SPECIAL[name]

    for kwargs in KNOWN_FAILURES.get(name, ("", []))[1]:
        check_property(target, kwargs)

    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(kwargs=strategy)
    def prop(kwargs):
        check_property(target, kwargs)

    prop()


# Calculators whose arguments need a shape of their own.
_HF_KEYS = sorted({k for t in ldf.HF_CONFIG_DEFAULTS.values() for k in t})
SPECIAL = {
    "ModelConfig": st.fixed_dictionaries(
        {f: strategy_for(f) if f not in ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff",
                                         "vocab_size") else st.one_of(st.integers(1, 64), JUNK)
         for f in ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab_size")},
        optional={"n_routed_experts": st.one_of(st.integers(0, 2000), JUNK),
                  "n_experts_per_token": st.one_of(st.integers(0, 9), JUNK),
                  "moe_d_ff": st.one_of(st.integers(1, 64), JUNK), "norm_eps": st.one_of(st.floats(), JUNK),
                  "rope_theta": st.one_of(st.floats(), JUNK), "sliding_window": st.one_of(st.integers(-1, 9), JUNK),
                  "layer_types": st.one_of(st.lists(st.sampled_from(["full_attention", "sliding_attention", "x"]),
                                                    max_size=4), JUNK),
                  "model_type": st.one_of(st.sampled_from(ldf.SUPPORTED_MODEL_TYPES), JUNK),
                  "tie_embeddings": st.one_of(st.booleans(), JUNK), "dense_layers": st.one_of(st.just((0,)), JUNK),
                  "unmodelled": st.one_of(st.none(), st.just({"hidden_act": "gelu"}), JUNK)}),
    "ModelConfig.from_hf": st.fixed_dictionaries({"config": st.one_of(
        st.dictionaries(st.sampled_from(_HF_KEYS + ["rope_theta", "rope_scaling", "moe_layer_freq"]),
                        st.one_of(st.integers(0, 64), JUNK), max_size=6).map(
            lambda d: {**d, "model_type": "llama"}),
        st.fixed_dictionaries({"model_type": st.sampled_from(ldf.SUPPORTED_MODEL_TYPES)},
                              optional={k: st.one_of(st.integers(1, 64), JUNK) for k in
                                        ("hidden_size", "num_attention_heads", "num_hidden_layers",
                                         "num_key_value_heads", "head_dim", "sliding_window",
                                         "num_experts", "n_routed_experts", "num_local_experts",
                                         "max_window_layers", "use_sliding_window", "layer_types",
                                         "rope_scaling", "rope_parameters", "tie_word_embeddings")}),
        JUNK)}),
}


def test_issue_inputs():
    """The sweep's own examples: a number where a QuantSpec is due; a huge γ."""
    cfg = ldf.model_config("tiny-llama")
    outcome, err = bounded_call(ldf.weight_bytes, {"cfg": cfg, "quant": 3})
    assert outcome == "ValueError" and "quant" in str(err)
    outcome, err = bounded_call(ldf.accepted_count_pmf, {"alpha": 0.5, "gamma": 10**30})
    assert outcome == "ValueError" and "gamma" in str(err)
    assert ldf.accepted_count_pmf(0.5, 2) == [0.5, 0.25, 0.25]
    outcome, rows = bounded_call(ldf.request_ledger, {"cfg": cfg, "prompt_len": 4, "output_len": 10**30})
    assert outcome == "ok" and not bad_numbers(rows)
    # huge γ where the answer is a closed form is fine; where it is a list of γ + 1 entries it is refused
    assert ldf.expected_tokens_per_step(0.5, 10**30) == 2.0
    assert ldf.acceptance_by_position([], 2) == [(0, 0, None), (0, 0, None)]   # untested: undefined, not NaN


HUGE = 10**400   # an exact int no float can hold


@pytest.mark.parametrize("fn,kwargs,field", [
    (ldf.decode_step_bounds, {"cfg": "Llama-2-7B", "hw": "H100-SXM", "batch": HUGE}, "batch"),
    (ldf.prefill_lower_bound, {"cfg": "DeepSeek-V3", "hw": "H100-SXM", "prompt_len": HUGE}, "prompt_len"),
    (ldf.critical_batch, {"cfg": "Llama-2-7B", "hw": "H100-SXM", "context_len": HUGE}, "context_len"),
    (ldf.activation_bytes, {"cfg": "Llama-2-7B", "tokens": HUGE}, "tokens"),
    (ldf.decode_calculator, {"batch": HUGE}, "batch"),
    (ldf.ledger_summary, {"prompt_len": HUGE}, "prompt_len"),
    (ldf.memory_fit, {"cfg": "Llama-2-7B", "hw": "H100-SXM", "context": HUGE}, "context"),
    (ldf.parallel_step_time, {"batch": HUGE}, "batch"),
    (ldf.ring_attention_bytes_per_rank, {"batch": HUGE, "seq": 1, "n_kv_heads": 1, "head_dim": 1, "n_ranks": 2},
     "batch"),
    (ldf.kv_transfer_time, {"cfg": "Llama-2-7B", "prompt_len": HUGE, "link_name": "NVLink4"}, "prompt_len"),
    (ldf.collective_time, {"op": "all_reduce", "nbytes": 1.0, "n_ranks": HUGE, "algorithm": "one_shot"}, "n_ranks"),
    (ldf.p2p_time, {"nbytes": HUGE}, "nbytes"),
    (ldf.decode_step_flops, {"cfg": 1e300}, "cfg"),
])
def test_counts_beyond_a_float(fn, kwargs, field):
    """Exact ints beyond a float's range (or a bare parameter count above MAX_PARAM_COUNT) are
    refused with a ValueError naming the argument, not an OverflowError from deep inside."""
    outcome, err = bounded_call(fn, kwargs)
    assert outcome == "ValueError" and field in str(err), (outcome, err)


def test_huge_counts_that_have_an_answer():
    # (1 − k/E)^n → 0: every expert is hit; an exact int count returns exactly
    assert ldf.expected_experts_hit(8, 2, HUGE) == 8.0
    assert ldf.attention_flops_per_token("tiny-llama", HUGE) > 0
    assert ldf.valid_tp_degrees("Llama-3.1-70B", HUGE) == ldf.valid_tp_degrees("Llama-3.1-70B", 64)
