"""Markdown tables of benchmark reports (the JSON written with --out holds every number)."""


def table(header, rows):
    """A markdown table: ``header`` cells, then ``rows`` of cells."""
    return "\n".join(["| " + " | ".join(map(str, cells)) + " |" for cells in
                      [header, ["---"] * len(header), *rows]])


def machine_line(machine):
    cap = f" under {machine['isa_cap']}" if machine.get("isa_cap") else ""
    return (f"{machine['cpu']} ({machine['cores']} cores, flags: "
            f"{' '.join(machine['cpu_flags']) or 'no AVX2/AVX512/AMX'}{cap}), MXNet "
            f"{machine['mxnet']}, OMP_NUM_THREADS={machine['omp_num_threads']}")


def kernels_line(results):
    """Which precision and LayerNorm each mtx implementation ran."""
    return "; ".join(f"{name}: {r['precision']}, native LayerNorm "
                     f"{'yes' if r['kernels'].get('native_layer_norm') else 'no'}"
                     for name, r in results.items() if "kernels" in r)


def results_table(results):
    """Implementation rows, one column per scalar field (lists and dicts stay in the JSON)."""
    keys = list(dict.fromkeys(k for r in results.values() for k, v in r.items()
                              if not isinstance(v, (list, dict))))
    return table(["implementation", *keys], [[name, *(r.get(k, "-") for k in keys)]
                                             for name, r in results.items()])


def rounds_table(report):
    """Interleaved training rounds: the GEMM peaks (2048^3 and the model's own products), each
    implementation's median tok/s and MFU against the float32 and bfloat16 peaks and against
    the model's own products, then the paired ratios."""
    peaks = report["gemm_peaks"]
    lines = [_peak_line("GEMM peak (2048^3 FullyConnected, best of the children)",
                        peaks["float32"], peaks["bfloat16"])]
    if any(peaks.get("model float32", [])):
        lines.append(_peak_line("the model's own products (one training step's, forward and "
                                "backward, at the batches' padded tokens; best of the children)",
                                peaks["model float32"], peaks["model bfloat16"]))
    rows = []
    for name, r in report["train"].items():
        if "gflop_s" not in r:
            rows.append([name, r.get("error", "-"), *["-"] * 6])
            continue
        rows.append([name, r["tok_s"], ", ".join(str(x["tok_s"]) for x in r["rounds"]),
                     r["gflop_s"], *(_share(r["gflop_s"], r.get(key)) for key in (
                         "gemm_peak_gflop_s", "gemm_peak_bf16_gflop_s", "model_gemm_gflop_s",
                         "model_gemm_bf16_gflop_s"))])
    return "\n\n".join(["\n".join(lines), table(
        ["implementation", "tok/s (median round)", "per round", "GFLOP/s", "MFU fp32",
         "MFU bf16", "of own products fp32", "of own products bf16"], rows),
        ratios_table(report["train_ratios"], "paired ratio (tok/s)")])


def ratios_table(ratios, what):
    """`rounds.paired_ratios` results: a row per pair with its median, min, max and rounds."""
    return table([what, "median", "min", "max", "per round"],
                 [[pair, x["median"], x["min"], x["max"], ", ".join(map(str, x["rounds"]))]
                  for pair, x in ratios.items()])


def _peak_line(what, fp32, bf16):
    return (f"{what}: {max(filter(None, fp32), default=None)} GFLOP/s float32 (each: "
            f"{', '.join(map(str, fp32))}), "
            + (f"{max(filter(None, bf16))} bfloat16" if any(bf16)
               else "no bfloat16 (it cannot run here)"))


def _share(gflop_s, peak):
    return f"{100 * gflop_s / peak:.0f}%" if peak else "-"
