// dhs.resolve as a kernel: a thread per selection looks its host row
// (history_start + id) up in the pool's residency map; bad ids are reported
// and resolve to -1.
// RUN: dhs-opt %s --dhs-lower-to-gpu --canonicalize --cse | FileCheck %s
// RUN: rm -rf %t && dhs-compile %s -o %t
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/resolve.ptx -o %t/k.cubin %}
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json

// CHECK-LABEL: func.func @step
// CHECK: %[[MAP:.*]] = dhs.pool_map of %{{.*}} -> memref<?xi32>
// CHECK: gpu.launch_func @resolve::@resolve blocks in (%{{.*}}, %{{.*}}, %{{.*}}) threads in (%c256, {{.*}} args(%{{.*}} : memref<4x2x256xi32>, %[[MAP]] : memref<?xi32>, %{{.*}} : memref<4xi64>, %{{.*}} : memref<4xi32>, %{{.*}} : memref<4x2x256xi32>, %{{.*}} : memref<1xi32>) {dhs.op = "resolve"}
// CHECK: gpu.func @resolve
// CHECK: scf.if
// CHECK: memref.load %{{.*}} : memref<?xi32>
// CHECK: memref.atomic_rmw ori
// CHECK: memref.store %{{.*}} : memref<4x2x256xi32>
// MANIFEST: "op": "resolve"
// MANIFEST: "source": "pool_map"
func.func @step(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = ?, host = ?>,
                %rows: memref<4x2x256xi32>, %start: memref<4xi64>,
                %len: memref<4xi32>, %slots: memref<4x2x256xi32>) {
  dhs.resolve pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = ?, host = ?>)
      rows(%rows : memref<4x2x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>) into(%slots : memref<4x2x256xi32>)
  return
}
