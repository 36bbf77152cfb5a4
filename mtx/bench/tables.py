"""Markdown tables of benchmark reports (the JSON written with --out holds every number)."""


def _cell(result, key):
    """``result[key]``, or why there is none (skipped, error), or '-'."""
    return result.get(key, result.get("skipped", result.get("error", "-")))


def machine_line(machine):
    flags = " ".join(machine["cpu_flags"]) or "no AVX512/AMX"
    onednn = f" (oneDNN {machine['onednn']})" if machine.get("onednn") else ""
    return (f"{machine['cpu']} ({machine['cores']} cores, flags: {flags}), MXNet "
            f"{machine['mxnet']}{onednn}, OMP_NUM_THREADS={machine['omp_num_threads']}")


def kernels_line(results):
    """Which LayerNorm each mtx implementation ran, and in which precision."""
    used = [f"{name}: {r['precision']}, native LayerNorm "
            f"{'yes' if r['kernels'].get('native_layer_norm') else 'no'}"
            for name, r in results.items() if "kernels" in r]
    return "; ".join(used)


def results_table(results):
    """impl rows, one column per scalar field (lists and dicts stay in the JSON)."""
    keys = list(dict.fromkeys(k for r in results.values() for k, v in r.items()
                              if not isinstance(v, (list, dict))))
    lines = ["| implementation | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(str(r.get(k, "-")) for k in keys) + " |"
              for name, r in results.items()]
    return "\n".join(lines)


def profile_table(profiles):
    """Side-by-side `measure_profile` results: operator rows, impl columns."""
    names = list(profiles)
    ops = list(dict.fromkeys(op for p in profiles.values() for op in p.get("operators_ms", {})))
    lines = ["| ms per step | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|",
             "| **whole step (wall, under the profiler)** | "
             + " | ".join(str(_cell(p, "ms_per_step")) for p in profiles.values()) + " |"]
    for op in ops:
        lines.append(f"| {op} | " + " | ".join(str(p.get("operators_ms", {}).get(op, "-"))
                                             for p in profiles.values()) + " |")
    return "\n".join(lines)


def operators_table(results):
    """{name: result with operators_ms (ms over a whole pass)} -> operator rows, name columns."""
    names = list(results)
    ops = list(dict.fromkeys(op for r in results.values() for op in r.get("operators_ms", {})))
    lines = ["| ms over the pass | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    lines += [f"| {op} | " + " | ".join(str(r.get("operators_ms", {}).get(op, "-"))
                                        for r in results.values()) + " |" for op in ops]
    return "\n".join(lines)


def rounds_table(report):
    """Interleaved training rounds: each implementation's median tok/s and MFU against the
    measured float32 and bfloat16 GEMM peaks, the speed of its step's matrix products timed
    alone at the batches' padded shapes (`machine.products_speed`), then the paired ratios."""
    fp32, bf16 = report["gemm_peak_gflop_s"], report["gemm_peak_bf16_gflop_s"]
    rounds_by_cap = report.get("gemm_peak_rounds", {"float32": []})
    if "float32" in rounds_by_cap:  # one oneDNN cap (none)
        rounds_by_cap = {None: rounds_by_cap}
    lines = [peak_line(cap, peaks) for cap, peaks in rounds_by_cap.items()]
    lines += ["", "| implementation | tok/s (median round) | per round | GFLOP/s | MFU fp32 "
             "| MFU bf16 | its products alone, GFLOP/s |", "|---|---|---|---|---|---|---|"]
    for name, r in report["train"].items():
        if "gflop_s" not in r:
            lines.append(f"| {name} | {_cell(r, 'tok_s')} | - | - | - | - | - |")
            continue
        rounds = ", ".join(str(x["tok_s"]) for x in r.get("rounds", []))
        own32, own16 = r.get("gemm_peak_gflop_s", fp32), r.get("gemm_peak_bf16_gflop_s", bf16)
        mfu_bf16 = f"{100 * r['gflop_s'] / own16:.0f}%" if own16 else "-"
        lines.append(f"| {name} | {r['tok_s']} | {rounds} | {r['gflop_s']} "
                     f"| {100 * r['gflop_s'] / own32:.0f}% | {mfu_bf16} "
                     f"| {r.get('products_alone_gflop_s', '-')} |")
    lines += ["", "| paired ratio (tok/s) | median | min | max | per round |",
              "|---|---|---|---|---|"]
    lines += [f"| {pair} | {x['median']} | {x['min']} | {x['max']} | "
              f"{', '.join(map(str, x['rounds']))} |" for pair, x in report["train_ratios"].items()]
    return "\n".join(lines)


def peak_line(cap, peaks):
    """The GEMM peaks of the rounds ({"float32": [...], "bfloat16": [...]}) under oneDNN ``cap``."""
    fp32, bf16 = max(peaks["float32"], default=None), max(
        [x for x in peaks.get("bfloat16", []) if x], default=None)
    return (f"GEMM peak{f' under {cap}' if cap not in (None, 'native') else ''} (2048^3 FullyConnected, best of the "
            f"rounds): {fp32} GFLOP/s float32 (rounds: {', '.join(map(str, peaks['float32']))}), "
            f"{f'{bf16} bfloat16' if bf16 else 'no bfloat16 (it cannot run on this CPU)'}")


def summary_table(report):
    """`all`: training and decoding side by side, each implementation's ratio to mtx."""
    peak = report["gemm_peak_gflop_s"]
    mtx_train, mtx_dec = report["train"].get("mtx", {}), report["decode"].get("mtx", {})
    bf16_train = report["train"].get("mtx-bf16", {})
    lines = [machine_line(report["machine"]),
             f"matrix-multiply peak: {peak} GFLOP/s fp32, "
             f"{report['gemm_peak_bf16_gflop_s'] or '-'} GFLOP/s bfloat16", kernels_line({**report["train"], **report["decode"]}), "",
             "| implementation | train tok/s | MFU | peak RSS MB | mtx / it (train) "
             "| mtx-bf16 / it (train) | greedy sent/s | mtx / it (decode) |",
             "|---|---|---|---|---|---|---|---|"]

    def ratio(a, b, k):
        return f"{a[k] / b[k]:.2f}" if k in a and k in b else "-"
    for name in dict.fromkeys([*report["train"], *report["decode"]]):
        t, d = report["train"].get(name, {}), report["decode"].get(name, {})
        mfu = f"{100 * t['gflop_s'] / peak:.0f}%" if "gflop_s" in t else "-"
        lines.append(f"| {name} | {_cell(t, 'tok_s')} | {mfu} "
                     f"| {t.get('peak_rss_mb', d.get('peak_rss_mb', '-'))} "
                     f"| {ratio(mtx_train, t, 'tok_s')} | {ratio(bf16_train, t, 'tok_s')} "
                     f"| {_cell(d, 'sent_s')} | {ratio(mtx_dec, d, 'sent_s')} |")
    for beam, r in report.get("translate", {}).items():
        lines.append(f"\n{beam}: {r.get('sent_s')} sentences/s, {r.get('tok_s')} tokens/s, "
                     f"{r.get('seconds')} s for test_2016_flickr, sacreBLEU {r.get('sacrebleu')}")
    return "\n".join(lines)


def compare_runs_table(results):
    lines = ["| run | heads | best s | seconds | speed-up vs first |", "|---|---|---|---|---|"]
    lines += [f"| {run} | {r['heads']} | {r['best']} | {r['seconds']} | {r['speedup_vs_first']} |"
              for run, r in results.items()]
    parts = list(next(iter(results.values())).get("parts_ms", {}))
    if parts:
        lines += ["", "A decoding step, ms: the whole step, then its products by part, each "
                  "timed alone, and the rest (LayerNorm, softmax, cache, argmax, Python):", "",
                  "| run | step | " + " | ".join(parts) + " | the rest |",
                  "|---|---|" + "---|" * (len(parts) + 1)]
        lines += [f"| {run} | {r['step_ms']:.2f} | "
                  + " | ".join(f"{r['parts_ms'][p]:.3f}" for p in parts)
                  + f" | {r['step_ms'] - r['products_ms']:.2f} |" for run, r in results.items()]
    beams = {run: r["beam"] for run, r in results.items() if "beam" in r}
    if beams:
        lines += ["", f"Translating the test split, beam {next(iter(beams.values()))['beam_size']}"
                  f", the runs in turn:", "",
                  "| run | best s | seconds | speed-up vs first | sacreBLEU | output subwords |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {run} | {b['best']} | {b['seconds']} | {b['speedup_vs_first']} | "
                  f"{b['sacrebleu']} | {b['subwords']} |" for run, b in beams.items()]
    return "\n".join(lines)
