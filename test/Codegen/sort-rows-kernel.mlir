// dhs.sort_rows: one CTA per request loads its row ids into shared memory,
// padded with -1 to the next power of two (5000 -> 8192), sorts them as
// unsigned words with a bitonic network (so -1 goes last), the passes
// unrolled with constant strides (13 merges, 91 passes, a barrier each), and
// writes the first 5000 back.
// RUN: dhs-opt %s --dhs-lower-to-gpu --canonicalize --cse | FileCheck %s
// RUN: dhs-opt %s --dhs-lower-to-gpu | grep -c gpu.barrier | FileCheck %s --check-prefix=BARRIERS
// RUN: rm -rf %t && dhs-compile %s -o %t
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/sort_rows.ptx -o %t/a.cubin %}
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK
// LINK: link: OK
// BARRIERS: 92

// CHECK-LABEL: func.func @step
// CHECK-SAME: (%[[ROWS:[a-z0-9]+]]: memref<4x5000xi32>, %[[SORTED:[a-z0-9]+]]: memref<4x5000xi32>)
// A CTA of 1024 threads per request.
// CHECK: gpu.launch_func @sort_rows::@sort_rows blocks in (%c4, %c1, %c1) threads in (%c1024, %c1, %c1) args(%[[ROWS]] : memref<4x5000xi32>, %[[SORTED]] : memref<4x5000xi32>) {dhs.op = "sort_rows", dhs.roles = ["missing", "fetched_rows"]}
// CHECK-LABEL: gpu.func @sort_rows
// CHECK-SAME: (%[[IN:[a-z0-9]+]]: memref<4x5000xi32>, %[[OUT:[a-z0-9]+]]: memref<4x5000xi32>) workgroup(%[[KEYS:[a-z0-9]+]] : memref<8192xi32, #gpu.address_space<workgroup>>
// CHECK-SAME: known_block_size = array<i32: 1024, 1, 1>
// A. The request's list, -1 past its 5000 rows.
// CHECK: %[[REQUEST:.*]] = gpu.block_id  x
// CHECK: scf.for %[[I:.*]] = %{{.*}} to %c8192 step %c1024
// CHECK: arith.cmpi ult, %[[I]], %c5000
// CHECK: memref.load %[[IN]][%[[REQUEST]], %[[I]]]
// CHECK: scf.yield %c-1_i32
// CHECK: memref.store %{{.*}}, %[[KEYS]][%[[I]]]
// CHECK: gpu.barrier
// B. The first pass (stride 1): 4096 pairs, ascending where bit 1 of the
// lower word is 0, as unsigned words.
// CHECK: scf.for %{{.*}} to %c4096 step %c1024
// CHECK: arith.cmpi ult, %{{.*}}, %{{.*}} : i32
// CHECK: arith.cmpi ugt, %{{.*}}, %{{.*}} : i32
// CHECK: scf.if
// CHECK: memref.store %{{.*}}, %[[KEYS]]
// CHECK: memref.store %{{.*}}, %[[KEYS]]
// CHECK: gpu.barrier
// C. The sorted list back.
// CHECK: scf.for %[[J:.*]] = %{{.*}} to %c5000 step %c1024
// CHECK: %[[KEY:.*]] = memref.load %[[KEYS]][%[[J]]]
// CHECK: memref.store %[[KEY]], %[[OUT]][%[[REQUEST]], %[[J]]]
// CHECK: gpu.return

// The step's arguments by role, then the launch.
// MANIFEST: "role": "missing"
// MANIFEST: "role": "fetched_rows"
// MANIFEST: "kernel": "sort_rows"
// MANIFEST: "op": "sort_rows"
// MANIFEST: "role": "missing"
// MANIFEST: "role": "fetched_rows"
func.func @step(%rows: memref<4x5000xi32>, %sorted: memref<4x5000xi32>) {
  dhs.sort_rows rows(%rows : memref<4x5000xi32>) into(%sorted : memref<4x5000xi32>)
  return
}
