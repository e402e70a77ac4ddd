"""The package's layers, checked from the code: the standard-library core and what stands on it.

* ``llm_dataflow.core`` imports only the standard library and itself; ``import llm_dataflow`` and a
  whole ``plan`` run load neither torch nor numpy (a fresh interpreter each);
* no import cycle among the package's modules, no module imports another's private name, no
  function-level import of a package module, no module over 800 lines (parsed with ``ast``:
  run ``pytest tests/test_layers.py`` anywhere, nothing of the package is executed for these);
* ``python -m llm_dataflow plan`` starts and prints within 0.5 s (CPU time, best of 5);
* every public name ``ldf`` had before the core moved into ``core/`` still resolves.
"""
import ast
import pathlib
import resource
import subprocess
import sys
import time

import pytest

PKG = pathlib.Path(__file__).resolve().parents[1] / "src" / "llm_dataflow"
MAX_LINES = 800

#: Function-level imports the core may make: genuinely optional heavy dependencies, imported only
#: on the path that needs them (module, imported name).  ``inspect`` builds the message of an
#: overflow error only when one happens.
CORE_LAZY_IMPORTS = {
    ("core/plan.py", "matplotlib"),          # --plot only: the figure needs matplotlib
    ("core/plan.py", "matplotlib.pyplot"),
    ("core/units.py", "inspect"),            # no_overflow's error message (standard library)
}


def _modules() -> dict[str, pathlib.Path]:
    """Dotted module name (``llm_dataflow.core.fit``) → file, for every module of the package."""
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = p.relative_to(PKG.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


MODULES = _modules()


def _resolve(mod: str, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    is_pkg = MODULES[mod].name == "__init__.py"
    base = mod.split(".")
    base = base if is_pkg else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(mod: str):
    """Yield ``(target, names, function_level, lineno)`` for each import in ``mod``; a
    ``from pkg import sub`` of a submodule yields the submodule."""
    tree = ast.parse(MODULES[mod].read_text(encoding="utf-8"))

    def walk(node, in_def):
        for child in ast.iter_child_nodes(node):
            deep = in_def or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for a in child.names:
                    yield a.name, [], in_def, child.lineno
            elif isinstance(child, ast.ImportFrom):
                target = _resolve(mod, child)
                names = [a.name for a in child.names]
                subs = [n for n in names if f"{target}.{n}" in MODULES]
                for n in subs:
                    yield f"{target}.{n}", [], in_def, child.lineno
                if len(subs) < len(names):
                    yield target, [n for n in names if n not in subs], in_def, child.lineno
            yield from walk(child, deep)

    yield from walk(tree, False)


def _package_edges():
    edges = {m: set() for m in MODULES}
    for m in MODULES:
        for target, _, _, _ in _imports(m):
            if target in MODULES and target != m:
                edges[m].add(target)
    return edges


def test_no_import_cycle():
    edges = _package_edges()
    # a package's __init__ imports its submodules and a submodule imports its package's
    # siblings, not the package: edges into an __init__ from inside it would be a cycle too
    state, stack, cycles = {}, [], []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for t in sorted(edges[m]):
            if state.get(t) == "open":
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = "done"

    for m in sorted(MODULES):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_no_private_name_imported_from_another_module():
    bad = [f"{MODULES[m].relative_to(PKG)}:{line}: {t}.{n}"
           for m in MODULES for t, names, _, line in _imports(m)
           if t.split(".")[0] == "llm_dataflow" and t != m
           for n in names if n.startswith("_") and n != "__version__"]
    assert not bad, "private names imported across modules: " + ", ".join(bad)


def test_no_function_level_import_of_a_package_module():
    bad = [f"{MODULES[m].relative_to(PKG)}:{line}: {t}"
           for m in MODULES for t, _, fn, line in _imports(m)
           if fn and t.split(".")[0] == "llm_dataflow"]
    assert not bad, "function-level imports of package modules (import at the top): " + ", ".join(bad)


def test_core_imports_only_the_standard_library_and_itself():
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    bad = []
    for m in MODULES:
        if not (m == "llm_dataflow.core" or m.startswith("llm_dataflow.core.")):
            continue
        rel = str(MODULES[m].relative_to(PKG))
        for t, _, fn, line in _imports(m):
            top = t.split(".")[0]
            if top == "llm_dataflow":
                if not (t == "llm_dataflow.core" or t.startswith("llm_dataflow.core.")):
                    bad.append(f"{rel}:{line}: {t} (a layer above the core)")
            elif fn and (rel, t) not in CORE_LAZY_IMPORTS:
                bad.append(f"{rel}:{line}: {t} (function-level; not in CORE_LAZY_IMPORTS)")
            elif not fn and top not in stdlib:
                bad.append(f"{rel}:{line}: {t} (not the standard library)")
    assert not bad, "the core must import only the standard library and itself: " + ", ".join(bad)


def test_no_module_over_800_lines():
    long = {str(p.relative_to(PKG)): n for p in MODULES.values()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def _fresh(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(PKG.parent), "PATH": "/usr/bin:/bin"})


def test_core_and_plan_load_neither_torch_nor_numpy():
    code = """
import io, json, sys, contextlib
import llm_dataflow as ldf
import llm_dataflow.core
from llm_dataflow.core.plan import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    rc = main(["plan", "Llama-3.1-70B", "--hardware", "H100-SXM", "--tp", "8", "--json"])
assert rc == 0 and json.loads(out.getvalue())["fits"] is True
ldf.weight_bytes("Llama-2-7B"); ldf.memory_fit("Llama-2-7B", "H100-SXM")
print(sorted(m for m in ("torch", "numpy", "matplotlib", "pandas", "ipywidgets") if m in sys.modules))
"""
    r = _fresh(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]", r.stdout


def test_plan_main_returns_the_status_and_names_the_field():
    code = """
import contextlib, io
from llm_dataflow.core.plan import main
err = io.StringIO()
with contextlib.redirect_stderr(err):
    rc = main(["plan", "Llama-2-7B", "--hardware", "H100-SXM", "--tp", "3"])
print(rc, err.getvalue().strip().splitlines()[-1])
"""
    r = _fresh(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ("2 python -m llm_dataflow: error: argument --tp: 3 does not divide "
                                "n_heads=32; allowed: divisors of n_heads")


def test_plan_command_starts_within_half_a_second():
    """The CPU time of the whole command (interpreter start, imports, the table), best of 5: on a
    shared machine waiting for a core adds wall time that is not the command's (a quiet run's
    wall time is within a few ms of its CPU time)."""
    cmd = [sys.executable, "-m", "llm_dataflow", "plan", "Llama-3.1-70B", "--hardware", "H100-SXM", "--tp", "8"]
    from llm_dataflow.core.plan import plan_report
    expected = plan_report("Llama-3.1-70B", "H100-SXM", tp=8)["fit"]
    cpu, wall = [], []
    for _ in range(5):
        c0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                           env={"PYTHONPATH": str(PKG.parent), "PATH": "/usr/bin:/bin"})
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall.append(time.perf_counter() - t0)
        cpu.append(c1.ru_utime - c0.ru_utime + c1.ru_stime - c0.ru_stime)
        assert r.returncode == 0 and expected in r.stdout, r.stderr
    assert min(cpu) <= 0.5, (f"python -m llm_dataflow plan took {min(cpu):.2f} s of CPU time (best of 5; "
                             f"wall {min(wall):.2f} s)")


#: ``dir(ldf)``'s public names before the core moved into ``llm_dataflow/core`` (captured from main).
NAMES_BEFORE_CORE = """
ACCUMULATOR_BYTES ALL_REDUCE_ALGORITHMS ATTENTION_KERNELS BOOK_RC BOUND_METHODS BlockAllocator
CHAPTER_TOPICS COLLECTIVE_OPS CacheLevel CacheSpeedup CheckpointFiles ChipGeneration CommCounter
DECODE_GEMV_PATH DEMOS DTYPE_BITS DecodeBandwidth DecodeRun Decoder DecoderLayer GB GENERATIONS
GemmTraffic GiB HARDWARE HF_CONFIG_ALIASES HF_CONFIG_DEFAULTS HardwareSpec KB KNOWN_MODEL_GAPS
KVCache KV_DTYPES KV_QUANT_DTYPES KiB LINEAR_KERNELS LINKS LLAMA3_CHAT_TEMPLATE
LLAMA3_SPECIAL_TOKENS LazyRead LedgerRow Linear LinearChoice LinkSpec LoadHop LoopTiming MATMUL_OPS
MAX_BATCHED_TOKENS MAX_BLOCKS MAX_DIGITS MAX_DIM MAX_EXPERTS MAX_GAMMA_LIST MAX_LAYERS
MAX_PARAM_COUNT MAX_PER_OCTAVE MAX_PIPELINE_EVENTS MAX_SIM_REQUESTS MAX_WORKING_SET_BYTES
MAX_WORKLOAD_REQUESTS MAX_WORKLOAD_TOKENS MB MIN_FONT_PT MLA_FORMS MODEL_PRESETS MOVEMENTS
MeasuredRoofline MemoryFit MemoryTier MiB ModelConfig MountainPoint NormBuffers ON_CHIP_NAMES
OutOfBlocksError PACKED_WEIGHT_SUFFIXES PAGED_ATTENTION_PAPER_ORCA PAGED_ATTENTION_PAPER_UTILISATION
PHASES PROFILER_METRICS PagedKVCache PrecisionPlan PublishedMeasurement QUANT_METADATA_SUFFIXES
QUANT_SCHEMES QuantLinear QuantSpec QuantizedTensor REFERENCE_HARDWARE REFERENCE_LINKS
RUNTIME_RESERVE_FRACTION Request SAFETENSORS_DTYPE_BITS SAFETENSORS_DTYPE_BYTES
SAFETENSORS_MAX_HEADER SPECIAL_TOKEN_NAMES SUPPORTED_MODEL_TYPES ServeResult SpecStats StepBounds
StepContext StepCost TB TMA_VS_TMEM TORCH_DTYPE_NAMES TensorSpec TiB UNFUSED_STEPS UNUSED_CANDIDATES
WEIGHT_FORMATS acceptance_by_position accepted_count_pmf accounting activation_bytes
aggregate_hardware analytic_op_costs apply_rope arithmetic_intensity attention_flops_per_token
attention_hbm_accesses attention_partial attention_reference attention_traffic
available_memory_bytes batch_calculator batching best_gamma best_time blocks_needed book_corpus
build_decoder build_target_from_draft cache_levels calculator calculator_html calculator_rows
call_overhead capacity card_messages check_dtype check_ep_degree check_parallel check_schedule
check_tp_degree checkpoint_dir_from_env checkpoint_files chips choose_linear_kernel
collective_bytes_per_rank collective_steps collective_time collectives config cpu_supports_bf16
cpu_threads critical_batch decode_bandwidth decode_calculator decode_step_bounds decode_step_bytes
decode_step_flops decode_step_lower_bound demo_all demo_collectives demo_context_parallel
demo_expert_parallel demo_inputs demo_pipeline_parallel demo_tensor_parallel dequantize_weight
describe_device device disagg disagg_worker dram_onset dtype_bits dtype_bytes embedding
embedding_calc embedding_gather embedding_reference encode_chat ep_bytes_per_token ep_moe_forward
evict_from_page_cache expected_experts_hit expected_tokens_per_step figures fit flash
flash_attention fmt_bytes fmt_gb fmt_gib fmt_measured fmt_num fmt_si fmt_time formats free_port
fused_block_rows fusion fusion_benchmark fusion_bytes fusion_verdicts gather_bytes gemm gemm_tile_report
gemm_traffic gemv_bandwidth gemv_bandwidths generate generation generations_table greedy_decode
hardware hf_config hf_greedy_decode hf_peer_model host_to_device_seconds hosted_install_cell
id_bytes ids_tensor input_vs_state inspect_checkpoint int8_weight_matmul kv kv_bytes
kv_bytes_per_token kv_cache_bytes kv_cache_report kv_cache_speedup kv_layer_bytes_per_token
kv_read_over_steps kv_scale_bytes_per_tensor kv_tokens_held kv_transfer_table kv_transfer_time
last_level_cache_bytes launch layer_costs layer_nbytes layer_partition layer_weight_bytes ledger
ledger_summary ledger_totals linear linear_candidates linear_choice linear_kernel link live
load_model_arg load_sharded_checkpoint loading logit_error make_speculative_pair make_workload
matmul_flops matmul_params matmul_ridge_tokens measure measure_load_path measure_roofline memory
memory_fit memory_mountain memory_tiers merge_attention_partials minilm_checkpoint minilm_tokenizer
model model_config mountain_sizes movement_totals norm_buffers norm_fused norm_unfused offload
offload_run offload_table op_ledger op_regions ops p2p_time pack_int4 paged paged_attention parallel
parallel_step_time param_count parse_cache_size parse_lscpu_caches past_last_level_bytes
peak_memory_bytes pick_backend pipeline_bubble_fraction pipeline_forward pipeline_schedule plan
plan_report plot_mountain plot_pipeline_timeline plot_topology precision_plan prefill_bounds
prefill_bytes prefill_flops prefill_lower_bound progress published published_measurements
published_table quant quant_report quant_spec quantize_decoder quantize_weight
quantized_weight_bytes rank_device read_rows_lazily read_safetensors_header read_tokenizer_config
reader_tiers render_chat request_ledger require_nonnegative require_positive reset_linear_choice
ridge_point ring_all_reduce ring_attention ring_attention_bytes_per_rank ring_hops rms_norm roofline
rope_cos_sin route row_range run_disaggregated run_distributed seed_all serve_continuous
serve_static serving_metrics shard_decoder_tp shard_moe_ep simulate_kv_memory single_engine
slot_mapping slot_of speculative speculative_calculator speculative_generate speculative_speedup
static_views_enabled stream_bandwidth swiglu synchronize tail_waste tensor_file_range
tensor_parameters tensor_specs tier_bandwidth tiled_matmul time_calls time_decode_step time_fn
time_prefill time_speculative timed_greedy_generate to_si tokenization torch_threads
tp_bytes_per_token_per_layer tp_forward tp_generate tp_layer_forward train_byte_bpe translate_card
two_tier_ring_time units unpack_int4 use_book_style valid_tp_degrees weight_bytes weight_bytes_read
write_sharded_checkpoint
""".split()


@pytest.mark.parametrize("name", NAMES_BEFORE_CORE)
def test_every_earlier_name_still_resolves(name):
    import llm_dataflow as ldf
    assert getattr(ldf, name) is not None
    assert name in dir(ldf)
