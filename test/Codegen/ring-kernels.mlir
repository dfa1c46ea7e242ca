// Draft ring appends and reads become two kernels each: ring slots modulo
// the window, then row copies through them.
// RUN: dhs-opt %s --dhs-draft-ring --dhs-plan-staging --dhs-lower-to-gpu --canonicalize --cse | FileCheck %s
// RUN: rm -rf %t && dhs-compile %s -o %t
// RUN: %if ptxas %{ for f in %t/*.ptx; do %ptxas -arch=sm_90a $f -o $f.cubin || exit 1; done %}
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json

// CHECK-LABEL: func.func @step
// CHECK: %[[A:.*]] = dhs.scratch {offset = 0 : i64} : memref<4x5xi32>
// CHECK: gpu.launch_func @ring_index::@ring_index {{.*}} args(%{{.*}} : memref<4xi32>, %[[A]] : memref<4x5xi32>) {dhs.op = "ring_index", dhs.roles = ["positions", "ring_slots"]}
// CHECK: gpu.launch_func @copy_rows::@copy_rows {{.*}} args(%{{.*}} : memref<4x5x1x1152xi8>, %{{.*}} : memref<4x64x1x1152xi8>, %[[A]] : memref<4x5xi32>, %{{.*}} : memref<1xi32>) {dhs.direction = "scatter", dhs.op = "copy_rows", dhs.roles = ["copy_source", "copy_destination", "ring_slots", "status"]}
// CHECK: gpu.launch_func @ring_index_0::@ring_index_0
// CHECK: gpu.launch_func @copy_rows_1::@copy_rows_1 {{.*}} {dhs.direction = "gather", dhs.op = "copy_rows", dhs.roles = ["copy_source", "copy_destination", "ring_slots", "status"]}

// Slots: (position + offset + i) mod 64, made non-negative.
// CHECK: gpu.func @ring_index
// CHECK: arith.remsi %{{.*}}, %{{.*}} : i64
// CHECK: arith.select
// CHECK: gpu.func @copy_rows
// CHECK: vector.load %{{.*}} : memref<4x5x1152xi8>, vector<16xi8>
// CHECK: vector.store %{{.*}} : memref<4x64x1152xi8>, vector<16xi8>
// CHECK: memref.atomic_rmw ori

// MANIFEST: "op": "ring_index"
// MANIFEST: "direction": "scatter"
// MANIFEST: "op": "copy_rows"
func.func @step(%ring: memref<4x64x1x1152xi8>, %new: memref<4x5x1x1152xi8>,
                %positions: memref<4xi32>, %ends: memref<4xi32>,
                %window: memref<4x32x1x1152xi8>) {
  dhs.draft ring(%ring : memref<4x64x1x1152xi8>) block = 5 {
    dhs.ring_append rows(%new : memref<4x5x1x1152xi8>)
        positions(%positions : memref<4xi32>) into(%ring : memref<4x64x1x1152xi8>)
    dhs.ring_read ring(%ring : memref<4x64x1x1152xi8>)
        positions(%ends : memref<4xi32>) into(%window : memref<4x32x1x1152xi8>)
  }
  return
}
