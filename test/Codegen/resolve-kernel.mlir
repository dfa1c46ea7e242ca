// dhs.resolve as a kernel: a thread per selection, a table lookup, bad ids
// reported and resolved to -1.
// RUN: dhs-opt %s --dhs-lower-to-gpu --canonicalize --cse | FileCheck %s
// RUN: rm -rf %t && dhs-compile %s -o %t
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/resolve.ptx -o %t/k.cubin %}
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json

// CHECK-LABEL: func.func @step
// CHECK: gpu.launch_func @resolve::@resolve blocks in (%{{.*}}, %{{.*}}, %{{.*}}) threads in (%c256, {{.*}} args(%{{.*}} : memref<4x2x256xi32>, %{{.*}} : memref<4x8192xi32>, %{{.*}} : memref<4xi32>, %{{.*}} : memref<4x2x256xi32>, %{{.*}} : memref<1xi32>) {dhs.op = "resolve"}
// CHECK: gpu.func @resolve
// CHECK: scf.if
// CHECK: memref.load %{{.*}} : memref<4x8192xi32>
// CHECK: memref.atomic_rmw ori
// CHECK: memref.store %{{.*}} : memref<4x2x256xi32>
// MANIFEST: "role": "residency"
// MANIFEST: "op": "resolve"
func.func @step(%rows: memref<4x2x256xi32>, %residency: memref<4x8192xi32>,
                %history_len: memref<4xi32>, %slots: memref<4x2x256xi32>) {
  dhs.resolve rows(%rows : memref<4x2x256xi32>)
      residency(%residency : memref<4x8192xi32>)
      history(%history_len : memref<4xi32>) into(%slots : memref<4x2x256xi32>)
  return
}
