// dhs.topk as a kernel: a CTA per (request, query position) radix-selects the
// k-th largest (score, id) key over at most eight 8-bit passes (ending when
// the chosen bin holds exactly the keys still wanted) with a shared-memory
// histogram, gathers the keys at or above it and sorts them (bitonic).
// RUN: dhs-opt %s --dhs-lower-to-gpu --canonicalize --cse | FileCheck %s
// RUN: rm -rf %t && dhs-compile %s -o %t
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/topk.ptx -o %t/k.cubin %}
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json

// CHECK-LABEL: func.func @step
// CHECK: gpu.launch_func @topk::@topk blocks in (%c8, %c1{{.*}}, %c1{{.*}}) threads in (%c1024, {{.*}} args(%{{.*}} : memref<4x2x16384xf32>, %{{.*}} : memref<4xi32>, %{{.*}} : memref<4x2x512xi32>, %{{.*}} : memref<1xi32>) {dhs.op = "topk", dhs.roles = ["scores", "history_len", "row_ids", "status"]}
// CHECK: gpu.func @topk
// CHECK-SAME: workgroup(%{{.*}} : memref<256xi32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %{{.*}} : memref<3xi64, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %{{.*}} : memref<512xi64, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %{{.*}} : memref<1xi32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64})
// A history the scores do not cover sets status bit 16.
// CHECK: memref.atomic_rmw ori %c16_i32
// Radix passes: histogram digits of the keys that match the prefix.
// CHECK: scf.for %{{.*}} = %c0 to %c8 step %c1
// CHECK: memref.load %{{.*}} : memref<4x2x16384xf32>
// CHECK: arith.bitcast %{{.*}} : f32 to i32
// CHECK: memref.atomic_rmw addi
// CHECK: gpu.barrier
// Gather and sort, then ids out with -1 padding.
// CHECK: memref.atomic_rmw addi
// CHECK: gpu.barrier
// CHECK: arith.cmpi ult
// CHECK: memref.store %{{.*}} : memref<4x2x512xi32>
// MANIFEST: "role": "scores"
// MANIFEST: "op": "topk"
func.func @step(%scores: memref<4x2x16384xf32>, %history_len: memref<4xi32>,
                %rows: memref<4x2x512xi32>) {
  dhs.topk scores(%scores : memref<4x2x16384xf32>)
      history(%history_len : memref<4xi32>) into(%rows : memref<4x2x512xi32>)
  return
}
