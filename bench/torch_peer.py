#!/usr/bin/env python3
"""PyTorch / Hugging Face peer for specline's CUDA backend benchmarks.

For each model shape, builds a randomly initialised transformers
LlamaForCausalLM (from a LlamaConfig, nothing downloaded) in bf16/fp16 on the
device, with attn_implementation="sdpa", and measures (medians over repeats,
after warm-up; torch.cuda.Event timing on CUDA, perf_counter on CPU):

  decode modes (batch 1, greedy, --prompt-tokens prompt, --decode-tokens new):
    eager             manual loop model(input_ids, past_key_values, use_cache)
                      + argmax with HF's default DynamicCache (what generate()
                      does, minus its bookkeeping)
    generate          model.generate(), default (dynamic) cache, eager
    compile           (--compile) StaticCache + torch.compile(mode=
                      "reduce-overhead", fullgraph) of one decode step, manual
                      loop: the strongest PyTorch peer
    compile-generate  generate(cache_implementation="static"), which
                      auto-compiles the forward (reduce-overhead) on CUDA
    Compile modes run in a child process with a hard time cap
    (--compile-timeout, covering build + compile + measurement); compile time
    is reported as (first run - median steady run).

  prefill: one --prefill-tokens prompt (batch 1, logits for the last position
    only, as a server does), tokens/s and TFLOP/s.

  card ceilings through PyTorch: device-to-device copy of a 2 GiB tensor
    (GB/s counts bytes read + written) and an n^3 GEMM (torch.matmul, random
    data, --dtype), GFLOP = 2 n^3.

Formulas (the same conventions as bench/decode_bench.cc):
  weight bytes per token = bytes of every parameter except the input
      embedding (all layer matrices, the norms, the untied LM head); the one
      embedding row and the KV cache reads are not counted.
  decode GB/s = weight bytes per token / median per-token latency;
      "% copy" = that / measured copy bandwidth.
  prefill FLOPs(T) = 2 * (matrix params - lm_head) * T     (layer matmuls)
                   + 2 * vocab * dim                       (LM head, last pos)
                   + 2 * n_layers * n_heads * head_dim * T * (T + 1)
                     (QK^T and PV, causal: = 4 * n_layers * dim * T^2 / 2 + O(T))

Example (GPU):  python3 bench/torch_peer.py --compile --json torch_peer.json
Quick CPU test: python3 bench/torch_peer.py --device cpu --shapes tiny \
                  --decode-tokens 8 --prefill-tokens 64 --repeats 2
"""

import argparse
import datetime
import gc
import inspect
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

import torch

# name: (dim, hidden, layers, heads, kv_heads, vocab)
PRESETS = {
    "tiny": (64, 172, 2, 4, 2, 32000),
    "stories110m": (768, 2048, 12, 12, 12, 32000),
    "tinyllama": (2048, 5632, 22, 32, 4, 32000),
    "llama2-7b": (4096, 11008, 32, 32, 32, 32000),
}
DECODE_MODES = ("eager", "generate", "compile", "compile-generate")
COMPILE_MODES = ("compile", "compile-generate")


def decode_summary(r):
    """One line for a decode measurement, or its failure."""
    if "failed" in r:
        return r["failed"]
    return (f"{r['tok_per_s']:.1f} tok/s, {r['ms_per_token_median']:.3f} ms/token, "
            f"{r['GBps']:.1f} GB/s")


def log(*a):
    print(*a, flush=True)


def err_str(e):
    s = f"{type(e).__name__}: {e}".strip().replace("\n", " ")
    return s[:400]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="tinyllama,llama2-7b",
                   help="comma list of presets: " + ",".join(PRESETS))
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1, help="warm-up runs before the repeats")
    p.add_argument("--prompt-tokens", type=int, default=16)
    p.add_argument("--decode-tokens", type=int, default=128)
    p.add_argument("--prefill-tokens", type=int, default=2048)
    p.add_argument("--compile", action="store_true",
                   help="also run the 'compile' mode (StaticCache + torch.compile reduce-overhead)")
    p.add_argument("--modes", default=None,
                   help="explicit comma list of decode modes (%s); default eager,generate "
                        "(+compile with --compile)" % ",".join(DECODE_MODES))
    p.add_argument("--compile-timeout", type=float, default=300.0,
                   help="seconds per compile mode per shape (child process killed after)")
    p.add_argument("--no-prefill", action="store_true")
    p.add_argument("--no-ceilings", action="store_true")
    p.add_argument("--copy-mib", type=int, default=None,
                   help="copy-bandwidth tensor size (default 2048 on cuda, 256 on cpu)")
    p.add_argument("--gemm-n", type=int, default=None,
                   help="GEMM size n (default 8192 on cuda, 1024 on cpu)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write all results here")
    # internal: run one compile mode for one shape and write its result
    p.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--_child-out", dest="child_out", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.modes:
        a.mode_list = [m.strip() for m in a.modes.split(",") if m.strip()]
        bad = [m for m in a.mode_list if m not in DECODE_MODES]
        if bad:
            p.error(f"unknown mode(s) {bad}; choose from {DECODE_MODES}")
    else:
        a.mode_list = ["eager", "generate"] + (["compile"] if a.compile else [])
    a.shape_list = [s.strip() for s in a.shapes.split(",") if s.strip()]
    bad = [s for s in a.shape_list if s not in PRESETS]
    if bad:
        p.error(f"unknown shape(s) {bad}; choose from {list(PRESETS)}")
    return a


def torch_dtype(a):
    return torch.bfloat16 if a.dtype == "bf16" else torch.float16


# ---------------------------------------------------------------- timing

class Clock:
    """Timestamps on the device timeline: CUDA events, or perf_counter on CPU."""

    def __init__(self, device):
        self.cuda = torch.device(device).type == "cuda"

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def seconds(self, a, b):
        """Seconds from mark a to mark b (call after sync())."""
        if self.cuda:
            return a.elapsed_time(b) / 1e3
        return b - a


def median(xs):
    return statistics.median(xs) if xs else None


# ---------------------------------------------------------------- environment

def environment(a):
    import transformers
    env = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "torch_cuda": torch.version.cuda,
        "device": a.device,
        "dtype": a.dtype,
        "attn_implementation": "sdpa",
    }
    if torch.device(a.device).type == "cuda" and torch.cuda.is_available():
        idx = torch.device(a.device).index or 0
        prop = torch.cuda.get_device_properties(idx)
        env.update({
            "gpu_name": torch.cuda.get_device_name(idx),
            "gpu_capability": "%d.%d" % torch.cuda.get_device_capability(idx),
            "gpu_memory_GiB": round(prop.total_memory / 2**30, 1),
            "gpu_sm_count": prop.multi_processor_count,
            "cudnn": torch.backends.cudnn.version(),
        })
        drv = None
        try:  # private API, present in recent torch (returns e.g. 12080)
            v = torch._C._cuda_getDriverVersion()
            drv = f"CUDA driver API {v // 1000}.{(v % 1000) // 10}"
        except Exception:
            pass
        try:
            import pynvml  # torch.cuda uses it for utilization(); may be absent
            pynvml.nvmlInit()
            d = pynvml.nvmlSystemGetDriverVersion()
            d = d.decode() if isinstance(d, bytes) else d
            drv = f"{d} ({drv})" if drv else d
        except Exception:
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                     capture_output=True, text=True, timeout=20).stdout.strip()
                if out:
                    drv = f"{out.splitlines()[0]} ({drv})" if drv else out.splitlines()[0]
            except Exception:
                pass
        env["driver"] = drv
    else:
        env["cpu"] = platform.processor() or platform.machine()
        env["cpu_threads"] = torch.get_num_threads()
    return env


# ---------------------------------------------------------------- ceilings

def measure_copy(a, clock):
    dev = torch.device(a.device)
    mib = a.copy_mib or (2048 if dev.type == "cuda" else 256)
    n = mib * 2**20
    src = torch.empty(n, dtype=torch.uint8, device=dev).random_(0, 256)
    dst = torch.empty_like(src)
    inner = 10 if dev.type == "cuda" else 2
    for _ in range(3):
        dst.copy_(src)
    clock.sync()
    times = []
    for _ in range(a.repeats):
        t0 = clock.mark()
        for _ in range(inner):
            dst.copy_(src)
        t1 = clock.mark()
        clock.sync()
        times.append(clock.seconds(t0, t1) / inner)
    del src, dst
    t = median(times)
    return {"bytes": n, "GBps": 2 * n / t / 1e9, "ms": t * 1e3,
            "note": "bytes read + written / time, median of %d repeats x %d copies" % (a.repeats, inner)}


def measure_gemm(a, clock):
    dev = torch.device(a.device)
    n = a.gemm_n or (8192 if dev.type == "cuda" else 1024)
    dt = torch_dtype(a)
    g = torch.Generator(device=dev).manual_seed(a.seed)
    x = torch.randn(n, n, device=dev, dtype=dt, generator=g)
    y = torch.randn(n, n, device=dev, dtype=dt, generator=g)
    out = torch.empty(n, n, device=dev, dtype=dt)
    inner = 10 if dev.type == "cuda" else 1
    for _ in range(3):
        torch.matmul(x, y, out=out)
    clock.sync()
    times = []
    for _ in range(a.repeats):
        t0 = clock.mark()
        for _ in range(inner):
            torch.matmul(x, y, out=out)
        t1 = clock.mark()
        clock.sync()
        times.append(clock.seconds(t0, t1) / inner)
    del x, y, out
    t = median(times)
    return {"n": n, "dtype": a.dtype, "TFLOPs": 2 * n**3 / t / 1e12, "ms": t * 1e3}


# ---------------------------------------------------------------- model

def build_model(a, shape):
    from transformers import LlamaConfig, LlamaForCausalLM
    dim, hidden, layers, heads, kv, vocab = PRESETS[shape]
    dev = torch.device(a.device)
    dt = torch_dtype(a)
    need = a.prompt_tokens + a.decode_tokens + 16
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=dim, intermediate_size=hidden,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv, max_position_embeddings=max(4096, a.prefill_tokens, need),
                      rms_norm_eps=1e-5, tie_word_embeddings=False,
                      bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(a.seed)
    model = None
    errors = []
    with torch.device(dev):
        for kw in ({"dtype": dt}, {"torch_dtype": dt}):
            try:
                model = LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa", **kw)
                break
            except TypeError as e:
                errors.append(err_str(e))
        if model is None:  # old API: default-dtype construction
            old = torch.get_default_dtype()
            torch.set_default_dtype(dt)
            try:
                cfg._attn_implementation = "sdpa"
                model = LlamaForCausalLM(cfg)
            finally:
                torch.set_default_dtype(old)
    model = model.to(device=dev, dtype=dt).eval()
    # generate(): never stop early on the random model's "eos".
    gc_ = model.generation_config
    gc_.eos_token_id = None
    gc_.pad_token_id = 0
    gc_.do_sample = False
    for k in ("temperature", "top_p", "top_k"):
        if hasattr(gc_, k):
            try:
                setattr(gc_, k, None)
            except Exception:
                pass
    return model


def model_stats(model):
    c = model.config
    emb = model.get_input_embeddings().weight
    params = sum(p.numel() for p in model.parameters())
    wbytes = sum(p.numel() * p.element_size() for p in model.parameters() if p is not emb)
    matrix = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2 and p is not emb)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return {
        "dim": c.hidden_size, "hidden": c.intermediate_size, "n_layers": c.num_hidden_layers,
        "n_heads": c.num_attention_heads, "n_kv_heads": c.num_key_value_heads,
        "head_dim": head_dim, "vocab": c.vocab_size,
        "params": params, "matrix_params_excl_embedding": matrix,
        "weight_bytes_per_token": wbytes,
        "attn_implementation": getattr(c, "_attn_implementation", None),
    }


def prefill_flops(st, T):
    lm = st["vocab"] * st["dim"]
    attn = 2.0 * st["n_layers"] * st["n_heads"] * st["head_dim"] * T * (T + 1)
    return 2.0 * (st["matrix_params_excl_embedding"] - lm) * T + 2.0 * lm + attn


def forward_kwargs_supported(model):
    try:
        names = set(inspect.signature(model.model.forward).parameters)
    except Exception:
        names = set()
    return names


def logits_kw(model):
    names = set(inspect.signature(model.forward).parameters)
    if "logits_to_keep" in names:
        return {"logits_to_keep": 1}
    if "num_logits_to_keep" in names:
        return {"num_logits_to_keep": 1}
    return {}


def make_prompt(a, model, n):
    g = torch.Generator(device="cpu").manual_seed(a.seed + n)
    ids = torch.randint(3, model.config.vocab_size, (1, n), generator=g)
    return ids.to(a.device)


def decode_result(a, st, step_s, total_s, extra=None):
    """step_s: all per-step latencies; total_s: per-repeat decode time for N steps."""
    r = {
        "tokens": a.decode_tokens,
        "repeats": len(total_s),
        "tok_per_s": a.decode_tokens / median(total_s),
        "ms_per_token_median": median(step_s) * 1e3 if step_s else median(total_s) / a.decode_tokens * 1e3,
        "ms_per_token_mean": median(total_s) / a.decode_tokens * 1e3,
    }
    r["GBps"] = st["weight_bytes_per_token"] / (r["ms_per_token_median"] / 1e3) / 1e9
    if extra:
        r.update(extra)
    return r


# ---------------------------------------------------------------- decode: eager loop

@torch.inference_mode()
def bench_eager(a, model, st, clock):
    prompt = make_prompt(a, model, a.prompt_tokens)
    lk = logits_kw(model)
    N = a.decode_tokens

    def run():
        out = model(input_ids=prompt, use_cache=True, **lk)
        pkv = out.past_key_values
        tok = out.logits[:, -1].argmax(-1, keepdim=True)
        marks = [clock.mark()]
        for _ in range(N):
            out = model(input_ids=tok, past_key_values=pkv, use_cache=True)
            tok = out.logits[:, -1].argmax(-1, keepdim=True)
            marks.append(clock.mark())
        clock.sync()
        steps = [clock.seconds(marks[i], marks[i + 1]) for i in range(N)]
        return steps, clock.seconds(marks[0], marks[-1])

    for _ in range(a.warmup):
        run()
    steps_all, totals = [], []
    for _ in range(a.repeats):
        s, t = run()
        steps_all += s
        totals.append(t)
    return decode_result(a, st, steps_all, totals,
                         {"cache": "DynamicCache (HF default)", "loop": "manual forward + argmax"})


# ---------------------------------------------------------------- decode: generate()

@torch.inference_mode()
def bench_generate(a, model, st, clock, static):
    prompt = make_prompt(a, model, a.prompt_tokens)
    mask = torch.ones_like(prompt)
    N = a.decode_tokens
    kw = {"do_sample": False, "attention_mask": mask, "pad_token_id": 0}
    if static:
        kw["cache_implementation"] = "static"

    def run(n):
        t0 = clock.mark()
        out = model.generate(prompt, max_new_tokens=n, min_new_tokens=n, **kw)
        t1 = clock.mark()
        clock.sync()
        assert out.shape[1] == prompt.shape[1] + n, out.shape
        return clock.seconds(t0, t1)

    w0 = time.perf_counter()
    run(N)  # first call: compiles in the static case
    first_s = time.perf_counter() - w0
    for _ in range(max(0, a.warmup - 1)):
        run(N)
        run(1)
    run(1)
    tN, t1 = [], []
    for _ in range(a.repeats):
        tN.append(run(N))
        t1.append(run(1))
    per_tok = (median(tN) - median(t1)) / max(1, N - 1)
    r = {
        "tokens": N, "repeats": a.repeats,
        "tok_per_s": 1.0 / per_tok,
        "ms_per_token_median": per_tok * 1e3,
        "ms_per_token_mean": per_tok * 1e3,
        "generate_total_ms": median(tN) * 1e3,
        "generate_1token_ms": median(t1) * 1e3,
        "method": "(median generate(N) - median generate(1)) / (N-1)",
        "cache": "StaticCache via cache_implementation='static'" if static else "DynamicCache (HF default)",
    }
    if static:
        r["first_call_s"] = first_s
        r["compile_s_approx"] = first_s - median(tN)
        r["compiled"] = clock.cuda
        if not clock.cuda:
            r["note"] = "generate() auto-compiles only on accelerators; eager static cache on cpu"
    r["GBps"] = st["weight_bytes_per_token"] / per_tok / 1e9
    return r


# ---------------------------------------------------------------- decode: StaticCache + torch.compile

@torch.inference_mode()
def bench_compile(a, model, st, clock):
    from transformers import StaticCache
    dev = torch.device(a.device)
    dt = torch_dtype(a)
    N, P = a.decode_tokens, a.prompt_tokens
    max_len = P + N + 8
    try:
        cache = StaticCache(config=model.config, max_cache_len=max_len,
                            max_batch_size=1, device=dev, dtype=dt)
    except TypeError:
        cache = StaticCache(config=model.config, max_batch_size=1, max_cache_len=max_len,
                            device=dev, dtype=dt)
    lk = logits_kw(model)
    with_cache_pos = "cache_position" in forward_kwargs_supported(model)
    prompt = make_prompt(a, model, P)
    positions = torch.arange(0, max_len, device=dev, dtype=torch.long)

    def step(tok, pos):
        kw = {"cache_position": pos} if with_cache_pos else {}
        logits = model(input_ids=tok, position_ids=pos.view(1, -1), past_key_values=cache,
                       use_cache=True, return_dict=False, **kw)[0]
        return logits[:, -1].argmax(-1, keepdim=True)

    mark_step = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)
    fullgraph = True
    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)

    def run(fn):
        cache.reset()
        kw = {"cache_position": positions[:P]} if with_cache_pos else {}
        out = model(input_ids=prompt, position_ids=positions[:P].view(1, -1), past_key_values=cache,
                    use_cache=True, **kw, **lk)  # prefill eager
        tok = out.logits[:, -1].argmax(-1, keepdim=True)
        marks = [clock.mark()]
        for i in range(N):
            if mark_step is not None:
                mark_step()
            tok = fn(tok, positions[P + i:P + i + 1]).clone()  # cudagraph output is reused
            marks.append(clock.mark())
        clock.sync()
        steps = [clock.seconds(marks[i], marks[i + 1]) for i in range(N)]
        return steps, clock.seconds(marks[0], marks[-1])

    w0 = time.perf_counter()
    try:
        run(compiled)
    except Exception as e:
        log(f"    fullgraph=True failed ({err_str(e)}); retrying with fullgraph=False")
        torch._dynamo.reset()
        fullgraph = False
        compiled = torch.compile(step, mode="reduce-overhead", fullgraph=False)
        w0 = time.perf_counter()
        run(compiled)
    first_s = time.perf_counter() - w0
    for _ in range(max(1, a.warmup)):
        run(compiled)
    steps_all, totals = [], []
    for _ in range(a.repeats):
        s, t = run(compiled)
        steps_all += s
        totals.append(t)
    r = decode_result(a, st, steps_all, totals, {
        "cache": "StaticCache(max_cache_len=%d)" % max_len,
        "loop": "manual; eager prefill, compiled decode step",
        "compile": "torch.compile(mode='reduce-overhead', fullgraph=%s)" % fullgraph,
        "first_run_s": first_s,
    })
    r["compile_s_approx"] = first_s - median(totals)
    if not clock.cuda:
        r["note"] = "no CUDA graphs on cpu (inductor only)"
    return r


# ---------------------------------------------------------------- prefill

@torch.inference_mode()
def bench_prefill(a, model, st, clock):
    T = a.prefill_tokens
    prompt = make_prompt(a, model, T)
    lk = logits_kw(model)

    def run():
        t0 = clock.mark()
        out = model(input_ids=prompt, use_cache=True, **lk)
        t1 = clock.mark()
        clock.sync()
        del out
        return clock.seconds(t0, t1)

    for _ in range(max(1, a.warmup)):
        run()
    ts = [run() for _ in range(a.repeats)]
    t = median(ts)
    fl = prefill_flops(st, T)
    return {"tokens": T, "ms": t * 1e3, "tok_per_s": T / t, "TFLOPs": fl / t / 1e12,
            "flops": fl, "logits": "last position only" if lk else "all positions",
            "mode": "eager, sdpa, DynamicCache"}


# ---------------------------------------------------------------- orchestration

def free_model(model):
    del model
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_child(a):
    """Run one compile mode on one shape; write {"stats":..., "result":...} to a.child_out."""
    shape, mode = a.shape_list[0], a._child
    clock = Clock(a.device)
    res = {}
    try:
        t0 = time.perf_counter()
        model = build_model(a, shape)
        st = model_stats(model)
        res["stats"] = st
        log(f"  [{shape} {mode}] model built in {time.perf_counter() - t0:.1f} s")
        if mode == "compile":
            r = bench_compile(a, model, st, clock)
        else:
            r = bench_generate(a, model, st, clock, static=True)
        res["result"] = r
    except Exception as e:
        traceback.print_exc()
        res["result"] = {"failed": err_str(e)}
    with open(a.child_out, "w") as f:
        json.dump(res, f)
    return 0


def spawn_child(a, argv, shape, mode):
    fd, path = tempfile.mkstemp(prefix="torch_peer_", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, os.path.abspath(__file__)] + strip_args(argv) + [
        "--shapes", shape, "--_child", mode, "--_child-out", path]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, start_new_session=True)
    try:
        rc = p.wait(timeout=a.compile_timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # the child and its inductor workers
        except Exception:
            p.kill()
        p.wait()
        os.unlink(path)
        return {"failed": f"timed out after {a.compile_timeout:.0f} s (--compile-timeout; "
                          f"covers model build + compile + measurement)"}, None
    wall = time.perf_counter() - t0
    try:
        with open(path) as f:
            res = json.load(f)
    except Exception as e:
        res = {"result": {"failed": f"child exited rc={rc} without a result ({err_str(e)})"}}
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    r = res.get("result", {})
    r["child_wall_s"] = wall
    return r, res.get("stats")


def strip_args(argv):
    """argv minus --shapes/--json/--modes/--compile (the child gets its own)."""
    out, skip = [], False
    for x in argv:
        if skip:
            skip = False
            continue
        if x in ("--shapes", "--json", "--modes", "--_child", "--_child-out"):
            skip = True
            continue
        if x.startswith(("--shapes=", "--json=", "--modes=", "--_child")) or x == "--compile":
            continue
        out.append(x)
    return out


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def print_table(results, copy_gbps):
    hdr = ("shape", "mode", "tok/s", "ms/tok", "GB/s", "% copy", "prefill tok/s", "prefill TFLOP/s")
    rows = []
    for sh in results:
        pre = sh.get("prefill") or {}
        for mode, r in sh["decode"].items():
            if "failed" in r:
                rows.append((sh["shape"], mode, "failed: " + r["failed"][:90], "", "", "", "", ""))
                continue
            pct = 100 * r["GBps"] / copy_gbps if copy_gbps else None
            rows.append((sh["shape"], mode, fmt(r["tok_per_s"], ".1f"), fmt(r["ms_per_token_median"], ".3f"),
                         fmt(r["GBps"], ".4g"), fmt(pct, ".0f") + ("%" if pct is not None else ""),
                         fmt(pre.get("tok_per_s"), ".0f"), fmt(pre.get("TFLOPs"), ".3g")))
        if not sh["decode"]:
            rows.append((sh["shape"], "-", "", "", "", "", fmt(pre.get("tok_per_s"), ".0f"),
                         fmt(pre.get("TFLOPs"), ".3g")))
    ok = [r for r in rows + [hdr] if not r[2].startswith("failed")]
    w = [max(len(str(r[i])) for r in ok + [r[:2] + ("",) * 6 for r in rows]) for i in range(len(hdr))]
    for r in [hdr] + rows:
        if r[2].startswith("failed"):
            log("  ".join(str(r[i]).ljust(w[i]) for i in range(2)) + "  " + r[2])
        else:
            log("  ".join(str(r[i]).rjust(w[i]) if i >= 2 else str(r[i]).ljust(w[i]) for i in range(len(hdr))))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    if a._child:
        return run_child(a)

    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        log("CUDA not available; use --device cpu")
        return 2
    clock = Clock(a.device)
    env = environment(a)
    log("torch_peer: " + ", ".join(f"{k}={v}" for k, v in env.items()))
    log(f"  decode: batch 1, greedy, {a.prompt_tokens}-token prompt + {a.decode_tokens} new tokens; "
        f"prefill {a.prefill_tokens} tokens; {a.repeats} repeats (median), {a.warmup} warm-up; "
        f"modes {','.join(a.mode_list)}")

    report = {"env": env, "args": {k: v for k, v in vars(a).items() if not k.startswith("_")},
              "formulas": {
                  "weight_bytes_per_token": "sum of bytes of every parameter except the input embedding "
                                            "(layer matrices, norms, untied lm_head)",
                  "decode_GBps": "weight_bytes_per_token / median per-token latency",
                  "pct_copy": "decode_GBps / measured device-to-device copy GB/s (read + write)",
                  "prefill_flops": "2*(matrix_params - vocab*dim)*T + 2*vocab*dim "
                                   "+ 2*n_layers*n_heads*head_dim*T*(T+1)",
                  "gemm_flops": "2*n^3",
              },
              "ceilings": {}, "shapes": []}

    def save():
        if a.json:
            with open(a.json, "w") as f:
                json.dump(report, f, indent=2)

    if not a.no_ceilings:
        for name, fn in (("copy", measure_copy), ("gemm", measure_gemm)):
            try:
                report["ceilings"][name] = fn(a, clock)
            except Exception as e:
                report["ceilings"][name] = {"failed": err_str(e)}
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        c, g = report["ceilings"]["copy"], report["ceilings"]["gemm"]
        log("ceilings: copy " + (f"{c['GBps']:.4g} GB/s ({c['bytes'] / 2**20:.0f} MiB)" if "GBps" in c
                                 else "failed: " + c["failed"])
            + "; gemm " + (f"{g['TFLOPs']:.4g} TFLOP/s ({g['n']}^3 {g['dtype']})" if "TFLOPs" in g
                           else "failed: " + g["failed"]))
        save()
    copy_gbps = report["ceilings"].get("copy", {}).get("GBps")

    for shape in a.shape_list:
        sh = {"shape": shape, "decode": {}}
        report["shapes"].append(sh)
        log(f"== {shape} {PRESETS[shape]} (dim, hidden, layers, heads, kv_heads, vocab)")
        model = None
        try:
            t0 = time.perf_counter()
            model = build_model(a, shape)
            sh["stats"] = model_stats(model)
            st = sh["stats"]
            log(f"  built in {time.perf_counter() - t0:.1f} s: {st['params'] / 1e6:.1f} M params, "
                f"{st['weight_bytes_per_token'] / 1e6:.1f} MB weights/token, attn={st['attn_implementation']}")
        except Exception as e:
            traceback.print_exc()
            sh["failed"] = err_str(e)
            log(f"  build failed: {sh['failed']}")
            save()
            continue

        for mode in a.mode_list:
            if mode in COMPILE_MODES:
                continue
            try:
                if mode == "eager":
                    r = bench_eager(a, model, st, clock)
                else:
                    r = bench_generate(a, model, st, clock, static=False)
            except Exception as e:
                traceback.print_exc()
                r = {"failed": err_str(e)}
            sh["decode"][mode] = r
            log(f"  {mode}: {decode_summary(r)}")
            save()

        if not a.no_prefill:
            try:
                sh["prefill"] = bench_prefill(a, model, st, clock)
                p = sh["prefill"]
                log(f"  prefill {p['tokens']}: {p['ms']:.2f} ms, {p['tok_per_s']:.0f} tok/s, "
                    f"{p['TFLOPs']:.4g} TFLOP/s")
            except Exception as e:
                traceback.print_exc()
                sh["prefill"] = {"failed": err_str(e)}
                log(f"  prefill failed: {sh['prefill']['failed']}")
            save()

        free_model(model)
        model = None

        for mode in a.mode_list:
            if mode not in COMPILE_MODES:
                continue
            log(f"  {mode}: child process, cap {a.compile_timeout:.0f} s ...")
            try:
                r, _ = spawn_child(a, argv, shape, mode)
            except Exception as e:
                r = {"failed": err_str(e)}
            sh["decode"][mode] = r
            log(f"  {mode}: {decode_summary(r)}, compile ~{r.get('compile_s_approx', 0):.1f} s"
                if "failed" not in r else f"  {mode}: {r['failed']}")
            save()

        if copy_gbps:
            for r in sh["decode"].values():
                if "GBps" in r:
                    r["pct_of_copy_bw"] = 100 * r["GBps"] / copy_gbps

    log("")
    log(f"{env.get('gpu_name', env.get('cpu', ''))}, torch {env['torch']}, transformers {env['transformers']}, "
        f"{a.dtype}, attn sdpa; copy {fmt(copy_gbps, '.1f')} GB/s, gemm "
        f"{fmt(report['ceilings'].get('gemm', {}).get('TFLOPs'), '.4g')} TFLOP/s")
    print_table(report["shapes"], copy_gbps)
    save()
    if a.json:
        log(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
