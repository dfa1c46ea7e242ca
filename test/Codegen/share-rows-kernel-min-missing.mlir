// dhs.share_rows with min_missing = 32: the same order as without it
// (share-rows-kernel.mlir), and one more word of shared memory that counts
// the prefix rows position 0 reads from the host (slot < 0). Thread 0 empties
// it with the table; in the prefix step each thread adds its count (one
// relaxed shared atomic, only when not 0); after that step's barrier thread
// 0 writes tiles = T where the count reaches 32, else 0 (and not T before).
// RUN: dhs-opt %s --dhs-lower-to-gpu --canonicalize --cse | FileCheck %s
// RUN: dhs-opt %s --dhs-lower-to-gpu | grep -c gpu.barrier | FileCheck %s --check-prefix=BARRIERS
// RUN: rm -rf %t && dhs-compile %s -o %t
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: FileCheck %s --check-prefix=PTX < %t/share_rows.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/share_rows.ptx -o %t/a.cubin %}
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK
// LINK: link: OK
// BARRIERS: 8

// CHECK-LABEL: func.func @step
// 16 bytes more than without min_missing (208128: share-rows-kernel.mlir).
// CHECK: gpu.launch_func @share_rows::@share_rows {{.*}} dynamic_shared_memory_size %c208144_i32 {{.*}} {dhs.min_missing = 32 : i64, dhs.op = "share_rows", {{.*}}, dhs.tile = 64 : i64}
// CHECK-LABEL: gpu.func @share_rows
// CHECK-SAME: %[[OUTTILES:[a-z0-9]+]]: memref<4xi32>)
// CHECK: %[[SUMS:.*]] = memref.view %{{.*}}[%c206848][] {{.*}} to memref<320xi32, #gpu.address_space<workgroup>>
// CHECK: %[[MISSING:.*]] = memref.view %{{.*}}[%c208128][] {{.*}} to memref<1xi32, #gpu.address_space<workgroup>>
// CHECK: %[[TID:.*]] = gpu.thread_id  x
// CHECK: %[[REQUEST:.*]] = gpu.block_id  x
// CHECK: memref.store %c0_i32, %[[MISSING]][%c0]
// CHECK: gpu.barrier
// D. T = count / 64, kept for later.
// CHECK: %[[T:.*]] = arith.divui %{{.*}}, %c64_i32 : i32
// CHECK: %[[PREFIX:.*]] = arith.muli %[[T]], %c64_i32 : i32
// CHECK-NOT: memref.store %[[T]]
// E. Each prefix entry of position 0 with a negative slot counts.
// CHECK: arith.cmpi slt, %{{.*}}, %[[PREFIX]] : i32
// CHECK: %[[NEGATIVE:.*]] = arith.cmpi slt, %{{.*}}, %c0_i32 : i32
// CHECK: %[[COUNTED:.*]] = arith.andi %{{.*}}, %[[NEGATIVE]] : i1
// CHECK: arith.extui %[[COUNTED]] : i1 to i32
// CHECK: memref.atomic_rmw addi %{{.*}}, %[[MISSING]][%c0]
// CHECK-NOT: memref.store %[[T]]
// CHECK: gpu.barrier
// CHECK: %[[SEEN:.*]] = memref.load %[[MISSING]][%c0]
// CHECK: %[[ENOUGH:.*]] = arith.cmpi sge, %[[SEEN]], %c32_i32 : i32
// CHECK: %[[SHARED:.*]] = arith.select %[[ENOUGH]], %[[T]], %c0_i32 : i32
// CHECK: memref.store %[[SHARED]], %[[OUTTILES]][%[[REQUEST]]]
// CHECK: gpu.return

// The count's add: relaxed (dhs-relax-shared-atomics), no system fence.
// PTX-NOT: acq_rel
// PTX: atom.shared.add.u32 {{.*}}[__dynamic_shmem__0+208128]
// PTX-NOT: acq_rel

// MANIFEST: "min_missing": 32,
// MANIFEST-NEXT: "op": "share_rows",
// MANIFEST: "tile": 64
func.func @step(%rows: memref<4x5x2048xi32>, %slots: memref<4x5x2048xi32>,
                %shared_rows: memref<4x5x2048xi32>, %shared_slots: memref<4x5x2048xi32>,
                %tiles: memref<4xi32>) {
  dhs.share_rows rows(%rows : memref<4x5x2048xi32>) slots(%slots : memref<4x5x2048xi32>) tile = 64
      min_missing = 32 into(%shared_rows, %shared_slots, %tiles
           : memref<4x5x2048xi32>, memref<4x5x2048xi32>, memref<4xi32>)
  return
}
