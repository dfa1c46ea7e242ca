// The shared-retrieval path as kernels: union of the verify positions'
// missing rows (hash table in dynamic shared memory), fetch of the union into
// staging, attention over resident and staged rows through the remap.
// RUN: dhs-opt %s --dhs-share-retrieval --dhs-plan-staging --dhs-lower-to-gpu --canonicalize --cse | FileCheck %s
// RUN: rm -rf %t && dhs-compile %s -o %t
// RUN: %if ptxas %{ for f in %t/*.ptx; do %ptxas -arch=sm_90a $f -o $f.cubin || exit 1; done %}
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json

// CHECK-LABEL: func.func @verify
// 2 x 2 queries x 1 block of 16 heads: each query's 64 rows in 2 splits,
// whose partials follow the planned buffers in the arena.
// CHECK-DAG: %[[PARTIALS:.*]] = dhs.scratch {offset = 296960 : i64} : memref<2x2x16x2x514xf32>
// CHECK-DAG: %[[STAGE:.*]] = dhs.scratch {offset = 0 : i64, slot = 0 : i64} : memref<2x128x1x1152xi8>
// CHECK-DAG: %[[MISSING:.*]] = dhs.scratch {offset = 294912 : i64} : memref<2x128xi32>
// CHECK-DAG: %[[REMAP:.*]] = dhs.scratch {offset = 295936 : i64} : memref<2x2x64xi32>
// Q * K = 128 selections per request: a table of 256 i32 slots, 1024 bytes.
// CHECK: gpu.launch_func @union_missing::@union_missing blocks in (%{{.*}}, %{{.*}}, %{{.*}}) threads in (%{{.*}}, %{{.*}}, %{{.*}}) dynamic_shared_memory_size %{{.*}} args(%{{.*}} : memref<2x2x64xi32>, %{{.*}} : memref<2x2x64xi32>, %[[MISSING]] : memref<2x128xi32>, %[[REMAP]] : memref<2x2x64xi32>)
// CHECK: gpu.launch_func @fetch::@fetch blocks in (%c2, %c1, %c1) threads in (%c256, %c1, %c1) dynamic_shared_memory_size %c1028_i32 args(%[[MISSING]] : memref<2x128xi32>, %{{.*}} : memref<2xi64>, %{{.*}} : memref<2xi32>, %{{.*}} : memref<?x1x1152xi8>, %[[STAGE]] : memref<2x128x1x1152xi8>, %{{.*}} : memref<1xi32>)
// CHECK: gpu.launch_func @attention::@attention {{.*}} args(%{{.*}} : memref<2x2x16x576xbf16>, %{{.*}} : memref<2x2x64xi32>, %{{.*}} : memref<2x2x64xi32>, %[[STAGE]] : memref<2x128x1x1152xi8>, %[[REMAP]] : memref<2x2x64xi32>, %{{.*}} : memref<?x1x1152xi8>, %{{.*}} : memref<2x2x16x512xbf16>, %[[PARTIALS]] : memref<2x2x16x2x514xf32>, %{{.*}} : memref<1xi32>) {dhs.layer = 0 : i64, dhs.op = "attention"
// CHECK: gpu.launch_func @attention_combine::@attention_combine {{.*}} args(%[[PARTIALS]] : memref<2x2x16x2x514xf32>, %{{.*}} : memref<2x2x16x512xbf16>)

// The union kernel claims table slots with compare-and-swap, probing on.
// CHECK: gpu.func @union_missing
// CHECK: gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
// CHECK: memref.view {{.*}} to memref<256xi32, #gpu.address_space<workgroup>>
// CHECK: scf.while
// CHECK: memref.generic_atomic_rmw
// CHECK: gpu.barrier
// The fetch copies a listed token's bytes from the host store into staging.
// A row of one layer is a short token: a CTA per 256 listed rows appends its
// missing ones to a list in shared memory (the count after it), then 8 lanes
// copy each, 9 loads of 16 bytes in flight per lane (72 chunks).
// CHECK: gpu.func @fetch
// CHECK: gpu.dynamic_shared_memory
// CHECK-NEXT: %[[LIST:.*]] = memref.view {{.*}} to memref<257xi32, #gpu.address_space<workgroup>>
// CHECK: memref.store %c0_i32, %[[LIST]][%c256]
// CHECK-NEXT: }
// CHECK-NEXT: gpu.barrier
// CHECK: memref.atomic_rmw ori
// CHECK: %[[AT:.*]] = memref.atomic_rmw addi %c1_i32, %[[LIST]][%c256]
// CHECK: gpu.barrier
// CHECK: %[[COUNT:.*]] = memref.load %[[LIST]][%c256]
// CHECK: scf.for %{{.*}} = %{{.*}} to %c72 step %c72
// CHECK-COUNT-9: vector.load %{{.*}} : memref<?x1x1152xi8>, vector<16xi8>
// CHECK: vector.store %{{.*}} : memref<2x128x1152xi8>, vector<16xi8>
// Staged attention reads staging as a tier of B * N rows.
// CHECK: gpu.func @attention
// CHECK: memref.collapse_shape %{{.*}} {{\[\[}}0, 1], [2], [3]] : memref<2x128x1x1152xi8> into memref<256x1x1152xi8>

// MANIFEST: "arena_bytes": 560128
// MANIFEST: "op": "union_missing"
// MANIFEST: "offset": 294912,
// MANIFEST-NEXT: "role": "missing",
// MANIFEST-NEXT: "shape": [
// MANIFEST: "source": "scratch"
// MANIFEST: "op": "fetch"
// MANIFEST: "op": "attention"
// MANIFEST: "op": "attention_combine"
func.func @verify(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 256, host = ?>,
                  %q: memref<2x2x16x576xbf16>, %rows: memref<2x2x64xi32>,
                  %slots: memref<2x2x64xi32>, %start: memref<2xi64>,
                  %len: memref<2xi32>, %out: memref<2x2x16x512xbf16>) {
  dhs.verify gamma = 1 {
    %stage = dhs.scratch : memref<2x128x1x1152xi8>
    dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 256, host = ?>)
        rows(%rows : memref<2x2x64xi32>) slots(%slots : memref<2x2x64xi32>)
        history(%start, %len : memref<2xi64>, memref<2xi32>)
        into(%stage : memref<2x128x1x1152xi8>)
    dhs.attention queries(%q : memref<2x2x16x576xbf16>)
        rows(%rows : memref<2x2x64xi32>) slots(%slots : memref<2x2x64xi32>)
        staging(%stage : memref<2x128x1x1152xi8>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 256, host = ?>)
        layer = 0 output(%out : memref<2x2x16x512xbf16>) scale = 0.0416666679
  }
  return
}
