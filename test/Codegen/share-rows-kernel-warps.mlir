// dhs.share_rows at 2 x 256 selections: a CTA of 128 threads, 4 warps. The
// block scans' second level (warp 0 scanning the warps' sums in place) reads
// and writes only the 4 sums, lane w sums[w]: lanes 4..31 read nothing, so
// no lane reads a word another lane writes in the same barrier interval
// (compute-sanitizer racecheck warned on a clamped read of the last sum by
// the other lanes against its lane's write). The 1024-thread shape is
// share-rows-kernel.mlir.
// RUN: dhs-opt %s --dhs-lower-to-gpu --canonicalize --cse | FileCheck %s
// RUN: dhs-opt %s --dhs-lower-to-gpu | grep -c gpu.barrier | FileCheck %s --check-prefix=BARRIERS
// RUN: rm -rf %t && dhs-compile %s -o %t
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/share_rows.ptx -o %t/a.cubin %}
// Barriers, as share-rows-kernel.mlir counts them: 1 + 1 + 1 + 2 + 1 + 2 = 8.
// BARRIERS: 8

// CHECK-LABEL: gpu.func @share_rows
// CHECK-SAME: known_block_size = array<i32: 128, 1, 1>
// The sums: 4 rounds of the rest's scan by 4 warps (the common rows' scan
// uses the first 4).
// CHECK: %[[SUMS:.*]] = memref.view %{{.*}}[%c12800][] {{.*}} to memref<16xi32, #gpu.address_space<workgroup>>
// CHECK: %[[TID:.*]] = gpu.thread_id  x
// CHECK: %[[LANE:.*]] = arith.remui %[[TID]], %c32
// CHECK: %[[WARP:.*]] = arith.divui %[[TID]], %c32
// The common rows' scan: lane 31 of each warp writes its warp's sum, a
// barrier, warp 0's lanes below 4 read theirs.
// CHECK: memref.store %{{.*}}, %[[SUMS]][%[[WARP]]]
// CHECK-NEXT: }
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: %[[WARP0:.*]] = arith.cmpi eq, %[[WARP]], %c0
// CHECK-NEXT: scf.if %[[WARP0]] {
// CHECK-NEXT: %[[MINE:.*]] = arith.cmpi ult, %[[LANE]], %c4
// CHECK-NEXT: %[[SUM:.*]] = scf.if %[[MINE]] -> (i32) {
// CHECK-NEXT: %[[READ:.*]] = memref.load %[[SUMS]][%[[LANE]]]
// CHECK-NEXT: scf.yield %[[READ]] : i32
// CHECK-NEXT: } else {
// CHECK-NEXT: scf.yield %c0_i32 : i32
// CHECK-NEXT: }
// CHECK-NEXT: gpu.shuffle  up %[[SUM]], %c1_i32, %c32_i32
// CHECK-NOT: memref.load %[[SUMS]]
// CHECK: scf.if %[[MINE]] {
// CHECK-NEXT: memref.store %{{.*}}, %[[SUMS]][%[[LANE]]]
// CHECK-NEXT: }
// CHECK-NEXT: }
// CHECK-NEXT: gpu.barrier
// Every thread then reads the sum of the warps before its own and the total.
// CHECK: memref.load %[[SUMS]]
// CHECK: memref.load %[[SUMS]][%c3]
// The rest's scan: 4 rounds of the 4 warps' counts; warp 0's lane l below
// 16 reads and writes only sums[l] (after the rounds' ballots).
// CHECK: nvvm.vote.sync  ballot
// CHECK: gpu.barrier
// CHECK-NEXT: scf.if %[[WARP0]] {
// CHECK-NEXT: %[[MINE2:.*]] = arith.cmpi ult, %[[LANE]], %c16
// CHECK-NEXT: %[[PART:.*]] = scf.if %[[MINE2]] -> (i32) {
// CHECK-NEXT: %[[READ2:.*]] = memref.load %[[SUMS]][%[[LANE]]]
// CHECK-NEXT: scf.yield %[[READ2]] : i32
// CHECK-NOT: memref.load %[[SUMS]]
// CHECK: scf.if %[[MINE2]] {
// CHECK-NEXT: memref.store %{{.*}}, %[[SUMS]][%[[LANE]]]
// CHECK-NEXT: }
// CHECK-NEXT: }
// CHECK-NEXT: gpu.barrier
// CHECK: gpu.return
func.func @step(%rows: memref<3x2x256xi32>, %slots: memref<3x2x256xi32>,
                %shared_rows: memref<3x2x256xi32>, %shared_slots: memref<3x2x256xi32>,
                %tiles: memref<3xi32>) {
  dhs.share_rows rows(%rows : memref<3x2x256xi32>) slots(%slots : memref<3x2x256xi32>) tile = 64
      into(%shared_rows, %shared_slots, %tiles
           : memref<3x2x256xi32>, memref<3x2x256xi32>, memref<3xi32>)
  return
}
