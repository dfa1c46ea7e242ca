// RUN: dhs-opt %s --dhs-lower-to-gpu="max-heads-per-block=8 tile-rows=8" | FileCheck %s
// RUN: not dhs-opt %s --dhs-lower-to-gpu="tile-rows=64" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not dhs-opt %s --dhs-lower-to-gpu="tile-rows=32" 2>&1 | FileCheck %s --check-prefix=SMEM
// dhs-compile takes the same tiles.
// RUN: rm -rf %t && dhs-compile %s --max-heads-per-block=4 --tile-rows=8 -o %t
// RUN: FileCheck %s --check-prefix=COMPILED < %t/manifest.json
// Four CTAs of 4 heads per query read its rows from the arena (a fetch
// first), each with 128 threads.
// COMPILED: "op": "fetch"
// COMPILED: "block": [
// COMPILED-NEXT: 128,
// COMPILED: "grid": [
// COMPILED-NEXT: 1,
// COMPILED-NEXT: 4,
// COMPILED: "op": "attention"

// 16 heads in CTAs of 8 warps; 8 rows staged per tile.
// CHECK-LABEL: func.func @step
// CHECK: gpu.launch_func
// CHECK: workgroup(%{{.*}} : memref<8x576xf32, #gpu.address_space<workgroup>>
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// BAD: tile-rows must be in [1, 32], got 64
// SMEM: tile-rows = 32 needs 74112 bytes of shared memory for rows of 576 decoded dims; at most 49152 are available
func.func @step(%q: memref<1x1x16x576xbf16>, %rows: memref<1x1x64xi32>,
                %slots: memref<1x1x64xi32>, %start: memref<1xi64>,
                %len: memref<1xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>,
                %out: memref<1x1x16x512xbf16>) {
  dhs.sparse_attention queries(%q : memref<1x1x16x576xbf16>)
      rows(%rows : memref<1x1x64xi32>) slots(%slots : memref<1x1x64xi32>)
      history(%start, %len : memref<1xi64>, memref<1xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>)
      layer = 0 output(%out : memref<1x1x16x512xbf16>) scale = 0.0416666679
  return
}
