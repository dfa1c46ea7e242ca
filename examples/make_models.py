#!/usr/bin/env python3
"""Writes the model step descriptions in examples/ (run from anywhere).

Each is one verify step (gamma drafts + 1 positions per request) of a real
model's sparse attention over all its layers: per layer group, the group's
selection is fetched once (the group's miss plan) and each layer attends over
it. Sizes follow docs/architecture.md; the batch is 8 requests.
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))

MODELS = {
    # name: (title, layers, layers per group, heads, format, qk, topk, gamma)
    "glm5": ("GLM-5-like: 78 layers, IndexShare groups of 4, 64 heads, "
             "FP8 rows with scales (656 B), top-2048, gamma = 4",
             78, 4, 64, "mla_fp8", 576, 2048, 4),
    "deepseek_v32": ("DeepSeek-V3.2-like: 61 layers, one indexer per layer, "
                     "128 heads, FP8 rows with scales (656 B), top-2048, "
                     "gamma = 1 (MTP-1)",
                     61, 1, 128, "mla_fp8", 576, 2048, 1),
    "deepseek_v41_flash": ("DeepSeek-V4.1-Flash-like: 43 layers, compressed "
                           "entries (528 B, e4m3 + ue8m0 per 32), top-512, "
                           "64 heads, gamma = 4 (DSpark block of 5), and in "
                           "every layer a 128-token sliding window that stays "
                           "resident in HBM",
                           43, 1, 64, "v41_fp8", 512, 512, 4),
    "llama3_8b_gqa": ("A GQA model, Llama-3-8B-like: 32 layers, 32 query "
                      "heads over 8 KV heads of 128 dims (bf16 keys and "
                      "values, 4096 B a row), sparse attention over the "
                      "top-512 rows, gamma = 4",
                      32, 1, 32, "gqa<kv_heads = 8, head_dim = 128, "
                      "dtype = bf16>", 128, 512, 4),
}
# Sliding-window tokens per layer (DeepSeek-V4.1's raw-token window).
WINDOW = {"deepseek_v41_flash": 128}
# Newest tokens of every request kept resident (the protected working set).
NEWEST = 128
ROW_BYTES = {"mla_bf16": 1152, "mla_fp8": 656, "v41_fp8": 528,
             "gqa<kv_heads = 8, head_dim = 128, dtype = bf16>": 4096}
# Value dims per format (MLA: the first 512 of the latent; GQA: head_dim).
V_DIM = {"gqa<kv_heads = 8, head_dim = 128, dtype = bf16>": 128}
BATCH = 8


def write(name, title, layers, group, heads, fmt, qk, topk, gamma):
    q = gamma + 1
    b = BATCH
    groups = [(g, min(group, layers - g * group))
              for g in range((layers + group - 1) // group)]
    # MLA models scale by the pre-absorption head dim (192); V4.1 and GQA
    # by their own.
    scale = 192 ** -0.5 if fmt.startswith("mla") else qk ** -0.5
    rows_t = f"memref<{b}x{q}x{topk}xi32>"
    q_t = f"memref<{b}x{q}x{heads}x{qk}xbf16>"
    o_t = f"memref<{b}x{q}x{heads}x{V_DIM.get(fmt, 512)}xbf16>"
    args, body, specs = [], [], []
    args.append(f"%history_start: memref<{b}xi64>")
    args.append(f"%history_len: memref<{b}xi32>")
    window = WINDOW.get(name, 0)
    if window:
        # Each layer's ring holds the window of every verify position.
        ring_t = f"memref<{b}x{window + q - 1}x1x{ROW_BYTES[fmt]}xi8>"
        args.append(f"%window_tokens: memref<{b}xi32>")
    layer = 0
    for g, size in groups:
        # Each group's pool holds tokens of its own layers (a smaller last
        # group's pool holds fewer).
        pool_t = (f"!dhs.kv_pool<#dhs.{fmt}, layers = {size}, "
                  f"hbm = ?, host = ?>")
        stage_t = f"memref<{b}x{q * topk}x{size}x{ROW_BYTES[fmt]}xi8>"
        args += [f"%pool{g}: {pool_t}", f"%rows{g}: {rows_t}",
                 f"%slots{g}: {rows_t}"]
        # The protected working set (the newest 128 tokens) and adaptive
        # optional residency with CLOCK replacement.
        specs.append(f"  dhs.residency pool(%pool{g} : {pool_t})")
        specs.append(f"      newest = {NEWEST} policy = adaptive replacement = clock")
        body.append(f"    // Layer group {g}: layers {layer}..{layer + size - 1}.")
        body.append(f"    %stage{g} = dhs.scratch : {stage_t}")
        body.append(f"    dhs.fetch pool(%pool{g} : {pool_t})")
        body.append(f"        rows(%rows{g} : {rows_t}) slots(%slots{g} : {rows_t})")
        body.append(f"        history(%history_start, %history_len : "
                    f"memref<{b}xi64>, memref<{b}xi32>)")
        body.append(f"        into(%stage{g} : {stage_t})")
        for l in range(size):
            args += [f"%q{layer}: {q_t}", f"%out{layer}: {o_t}"]
            body.append(f"    dhs.attention queries(%q{layer} : {q_t})")
            body.append(f"        rows(%rows{g} : {rows_t}) slots(%slots{g} : {rows_t})")
            body.append(f"        staging(%stage{g} : {stage_t})")
            body.append(f"        pool(%pool{g} : {pool_t})")
            if window:
                args.append(f"%window{layer}: {ring_t}")
                body.append(f"        window(%window{layer}, %window_tokens : "
                            f"{ring_t}, memref<{b}xi32>) size = {window}")
            body.append(f"        layer = {l} output(%out{layer} : {o_t}) "
                        f"scale = {scale:.9f}")
            layer += 1
    text = [f"// {title}.",
            "// Generated by examples/make_models.py; compile with",
            f"//   dhs-compile examples/{name}.mlir -o /tmp/{name}",
            "func.func @step(" + ",\n                ".join(args) + ") {"] + specs + [
            f"  dhs.verify gamma = {gamma} {{"] + body + ["  }", "  return", "}"]
    with open(os.path.join(HERE, f"{name}.mlir"), "w") as f:
        f.write("\n".join(text) + "\n")


for name, spec in MODELS.items():
    write(name, *spec)
