// Small grids split each query's rows over CTAs (grid z). With min-blocks=4
// one query of 16 heads (1 CTA) gets 4 splits of its 256 rows, 64 each (a
// whole number of 16-row tiles, at least two per split). Each split folds its
// rows into an online softmax and stores the unnormalized state (max, sum,
// output) in partials [B, Q, H, splits, 2 + 512] f32, a buffer placed in the
// step's staging arena; the combine kernel rescales the splits to their
// common max, sums and normalizes. min-blocks=0 keeps one CTA per query.
// RUN: dhs-opt %s --dhs-lower-to-gpu="min-blocks=4" --canonicalize --cse | FileCheck %s
// RUN: dhs-opt %s --dhs-lower-to-gpu="min-blocks=4" --canonicalize --cse | FileCheck %s --check-prefix=F32
// RUN: dhs-opt %s --dhs-lower-to-gpu="min-blocks=0" --canonicalize --cse | FileCheck %s --check-prefix=WHOLE
// RUN: rm -rf %t && dhs-compile %s --min-blocks=4 -o %t
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: %if ptxas %{ for f in %t/*.ptx; do %ptxas -arch=sm_90a $f -o $f.cubin || exit 1; done %}
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK
// LINK: link: OK

// CHECK-LABEL: func.func @step
// CHECK-SAME: attributes {dhs.staging_plan = {arena_bytes = 131584 : i64}}
// CHECK: %[[PARTIALS:.*]] = dhs.scratch {offset = 0 : i64} : memref<1x1x16x4x514xf32>
// CHECK: gpu.launch_func @sparse_attention::@sparse_attention blocks in (%c1, %c1, %c4)
// CHECK-SAME: %arg6 : memref<1x1x16x512xbf16>, %[[PARTIALS]] : memref<1x1x16x4x514xf32>, %{{.*}} : memref<1xi32>)
// CHECK-SAME: dhs.roles = ["queries", "row_ids", "slots", "history_start", "history_len", "hbm_tier", "host_tier", "output", "partials", "status"]
// CHECK: gpu.launch_func @attention_combine::@attention_combine blocks in (%c1, %c1, %c1) threads in (%c512, %c1, %c1) args(%[[PARTIALS]] : memref<1x1x16x4x514xf32>, %arg6 : memref<1x1x16x512xbf16>) {dhs.op = "attention_combine", dhs.roles = ["partials", "output"]}

// CHECK-LABEL: gpu.func @sparse_attention
// CHECK-SAME: %[[P:[^:]*]]: memref<1x1x16x4x514xf32>, %{{[^:]*}}: memref<1xi32>)
// CHECK: %[[SPLIT:.*]] = gpu.block_id  z
// CHECK: %[[FIRST:.*]] = arith.muli %[[SPLIT]], %c64
// CHECK: %[[NEXT:.*]] = arith.addi %[[FIRST]], %c64
// CHECK: %[[END:.*]] = arith.minui %[[NEXT]], %c256
// CHECK: %[[STATE:.*]]:18 = scf.for %{{.*}} = %[[FIRST]] to %[[END]] step %c16
// The unnormalized output (lane + 32 j + 2), then lane 0's max and sum.
// CHECK: memref.store %[[STATE]]#2, %[[P]][%{{.*}}, %{{.*}}, %{{.*}}, %[[SPLIT]], %{{.*}}]
// CHECK: memref.store %[[STATE]]#0, %[[P]][%{{.*}}, %{{.*}}, %{{.*}}, %[[SPLIT]], %c0]
// CHECK: memref.store %[[STATE]]#1, %[[P]][%{{.*}}, %{{.*}}, %{{.*}}, %[[SPLIT]], %c1]
// CHECK: gpu.return
// Nothing of the split kernel rounds to bf16: the combine kernel does.
// F32-LABEL: gpu.func @sparse_attention
// F32-NOT: arith.truncf
// F32: gpu.return

// CHECK-LABEL: gpu.func @attention_combine
// CHECK-SAME: (%[[IN:.*]]: memref<1x1x16x4x514xf32>, %[[OUT:.*]]: memref<1x1x16x512xbf16>)
// After the CUDA-core kernel (which may target chips before sm_90) an
// ordinary launch: no griddepcontrol (tensor-core-attention.mlir has the
// dependent one).
// CHECK-NOT: nvvm.griddepcontrol
// Every load before any arithmetic, so a thread's loads are in flight at
// once: the 4 splits' maxes and sums, then their 16 column blocks.
// CHECK-COUNT-72: memref.load %[[IN]]
// CHECK-NOT: memref.load
// The common max of the 4 splits (max(-inf, m0) folds away).
// CHECK-COUNT-3: arith.maximumf
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.f32"
// CHECK: arith.divf
// CHECK: llvm.intr.fma
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: memref.store %{{.*}}, %[[OUT]]
// CHECK-NOT: memref.load
// CHECK: gpu.return

// WHOLE-LABEL: func.func @step
// WHOLE-NOT: dhs.scratch
// WHOLE: gpu.launch_func @sparse_attention::@sparse_attention blocks in (%c1, %c1, %c1)
// WHOLE-NOT: attention_combine

// MANIFEST: "arena_bytes": 131584
// Ordinary launches, one after the other (no "dependent_launch").
// MANIFEST-NOT: "dependent_launch"
// MANIFEST: "op": "sparse_attention"
// MANIFEST: "offset": 0,
// MANIFEST-NEXT: "role": "partials",
// MANIFEST-NEXT: "shape": [
// MANIFEST-NEXT: 1,
// MANIFEST-NEXT: 1,
// MANIFEST-NEXT: 16,
// MANIFEST-NEXT: 4,
// MANIFEST-NEXT: 514
// MANIFEST: "source": "scratch"
// MANIFEST-NOT: "dependent_launch"
// MANIFEST: "op": "attention_combine"
func.func @step(%q: memref<1x1x16x576xbf16>, %rows: memref<1x1x256xi32>,
                %slots: memref<1x1x256xi32>, %start: memref<1xi64>,
                %len: memref<1xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>,
                %out: memref<1x1x16x512xbf16>) {
  dhs.sparse_attention queries(%q : memref<1x1x16x576xbf16>)
      rows(%rows : memref<1x1x256xi32>) slots(%slots : memref<1x1x256xi32>)
      history(%start, %len : memref<1xi64>, memref<1xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<1x1x16x512xbf16>) scale = 0.0416666679
  return
}
