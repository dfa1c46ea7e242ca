//===- Passes.td - dhs code generation passes --------------*- tablegen -*-===//

#ifndef DHS_CODEGEN_PASSES_TD
#define DHS_CODEGEN_PASSES_TD

include "mlir/Pass/PassBase.td"

def DhsLowerToGPU : Pass<"dhs-lower-to-gpu", "::mlir::ModuleOp"> {
  let summary = "Lower dhs ops to GPU kernels and their launches";
  let description = [{
    Replaces every dhs op that has a kernel (`dhs.sparse_attention`,
    `dhs.attention`, `dhs.fetch`, `dhs.union_missing`, `dhs.share_rows`,
    `dhs.resolve`, `dhs.place_rows`, `dhs.plan_promotions`,
    `dhs.sort_rows`, `dhs.age_rows`, `dhs.topk`, `dhs.ring_index`,
    `dhs.copy_rows`, `dhs.accept`) with a `gpu.launch_func` of a kernel
    generated for its static shapes, in a `gpu.module` of its own; ops of
    the same configuration share one kernel. One rewrite pattern per op;
    the kernel's builder declares its parameters by role, and the launch
    carries them (`dhs.roles`) for the manifest. Draft and verify phases are
    inlined. Any other dhs op left (one without a kernel yet, such as
    `dhs.ring_append` before dhs-draft-ring) is an error.
    The pool's tiers and state become `dhs.pool_*` views and kernels report
    invalid inputs through `dhs.step_status`. Host code is not lowered
    further: the runtime launches the kernels from the manifest
    (docs/compiler.md).

    Kernel shape: one CTA per (request, query position, block of heads), one
    warp per head. The CTA stages `tile-rows` selected rows at a time in
    shared memory (16-byte loads from the HBM slot, or from the host store
    through its device mapping), each warp computes its head's scores with
    warp shuffles and folds them into an online softmax. When that grid has
    fewer than `min-blocks` CTAs (small batches), each query's rows are
    split over CTAs (grid z; every row still staged once per block of
    heads, so host traffic does not grow): each split writes its softmax
    state (max, sum, unnormalized output) to a buffer added to the staging
    arena, and an `attention_combine` kernel merges the splits. A fused
    attention over a one-layer pool whose heads need several CTAs per KV
    head would read each missing host row once per CTA: its missing rows
    are fetched once into an arena buffer (`dhs.fetch`) and the CTAs attend
    from there (`dhs.attention`). With tensor cores (one position, no ring
    written, no draft window) the fused attention stays as the step's form
    for steps missing at most 2% of their rows (`dhs.missing_up_to`; the
    fetch and the staged attention carry `dhs.missing_above`), so that a
    step with every row in HBM launches no fetch; the runtime runs one form
    a step.

    Before:
    ```mlir
    dhs.sparse_attention queries(%q : memref<2x1x16x576xbf16>)
        rows(%rows : memref<2x1x256xi32>) ...
        pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 1024, host = ?>)
        layer = 0 output(%o : memref<2x1x16x512xbf16>) scale = 0.0416666679
    ```
    After (2 CTAs are fewer than `min-blocks`: each query's 256 rows are
    split over 8):
    ```mlir
    %status = dhs.step_status : memref<1xi32>
    %partials = dhs.scratch {offset = 0 : i64} : memref<2x1x16x8x514xf32>
    %host = dhs.pool_tier host of %pool : ... -> memref<?x1x1152xi8>
    %hbm = dhs.pool_tier hbm of %pool : ... -> memref<1024x1x1152xi8>
    gpu.launch_func @sparse_attention::@sparse_attention
        blocks in (%c2, %c1, %c8) threads in (%c512, %c1, %c1)
        args(%q : memref<2x1x16x576xbf16>, ..., %o : memref<2x1x16x512xbf16>,
             %partials : memref<2x1x16x8x514xf32>, %status : memref<1xi32>)
    gpu.launch_func @attention_combine::@attention_combine
        blocks in (%c2, %c1, %c1) threads in (%c512, %c1, %c1)
        args(%partials : memref<2x1x16x8x514xf32>, %o : memref<2x1x16x512xbf16>)
    gpu.module @sparse_attention {
      gpu.func @sparse_attention(...) workgroup(...) kernel { ... }
    }
    gpu.module @attention_combine { ... }
    ```
  }];
  let options = [Option<"maxHeadsPerBlock", "max-heads-per-block", "int64_t", /*default=*/"16",
                        "Most heads (warps) one CTA computes; the largest divisor of the "
                        "heads sharing a KV head not above it is used">,
                 Option<"tileRows", "tile-rows", "int64_t", /*default=*/"16",
                        "Selected rows staged in shared memory per step of the KV loop">,
                 Option<"minBlocks", "min-blocks", "int64_t", /*default=*/"264",
                        "Split each query's rows over CTAs until an attention grid has "
                        "about this many (264: two per SM of an H100/H200; 0: never "
                        "split)">,
                 Option<"tensorCores", "tensor-cores", "bool", /*default=*/"true",
                        "Compute MLA attention with 64 heads per KV head and selections in "
                        "multiples of 64 on the tensor cores (wgmma, sm_90a)">,
                 Option<"overlapRetrieval", "overlap-retrieval", "bool", /*default=*/"false",
                        "Share the missing rows of tensor-core attention with a fetch of a "
                        "few CTAs that runs beside it (dhs.fetch and dhs.attention with ready "
                        "flags; programmatic dependent launch): the fetch stages the tiles it "
                        "claims first, a one-layer attention's producer gathers the others "
                        "from the host itself; a layer group's attentions that read every layer "
                        "of its tokens get a second form, one fetch of whole tokens they wait "
                        "for, which the runtime runs for "
                        "steps missing more than 8% of their rows (dhs.missing_above; the "
                        "fused attentions below, dhs.missing_up_to)">];
  let statistics = [
    Statistic<"numKernels", "kernels", "Number of kernels generated">,
    Statistic<"numLaunches", "launches", "Number of kernel launches">
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::gpu::GPUDialect",
    "::mlir::LLVM::LLVMDialect", "::mlir::memref::MemRefDialect",
    "::mlir::NVVM::NVVMDialect",
    "::mlir::scf::SCFDialect", "::mlir::vector::VectorDialect"
  ];
}

def DhsRelaxSharedAtomics : Pass<"dhs-relax-shared-atomics", "::mlir::gpu::GPUModuleOp"> {
  let summary = "Give the kernels' shared-memory atomics relaxed, CTA-scoped ordering";
  let description = [{
    `memref.generic_atomic_rmw` and `memref.atomic_rmw` lower to LLVM
    atomics with acquire-release ordering at system scope. On shared memory
    (address space 3) the NVPTX backend then emits
    `atom.acq_rel.sys.shared.cas`, a system-wide fence for what only the
    CTA can see; sub-word atomics (a 16-bit minimum) expand into such
    compare-and-swap loops too. The generated kernels order their phases on
    shared memory with barriers (`bar.sync`) and use atomics only for their
    own values (hash-table claims, minimums, counters), so this pass gives
    every atomic on a shared-memory pointer `monotonic` ordering in the
    `block` scope: `atom.relaxed.cta.shared` in PTX (what CUDA's atomicCAS
    on shared memory is). Atomics on other memory are left as they are.
    Runs on kernels in the LLVM dialect (after convert-gpu-to-nvvm).

    Before:
    ```mlir
    %old = llvm.cmpxchg %slot, %empty, %row acq_rel monotonic
        : !llvm.ptr<3>, i32
    ```
    After:
    ```mlir
    %old = llvm.cmpxchg %slot, %empty, %row syncscope("block") monotonic monotonic
        : !llvm.ptr<3>, i32
    ```
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
  let statistics = [Statistic<"relaxedAtomics", "relaxed-atomics",
                              "Shared-memory atomics given relaxed, CTA-scoped ordering">,
  ];
}

#endif // DHS_CODEGEN_PASSES_TD
