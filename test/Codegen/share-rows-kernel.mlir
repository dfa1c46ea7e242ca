// dhs.share_rows: one CTA per request loads its 5 x 2048 selections as
// 64-bit keys (position << 46 | row << 14 | k) into dynamic shared memory,
// padded with all-ones words to 16384, sorts them with a bitonic network
// (14 merges, 105 passes, a barrier each), flags position 0's common rows
// (lower bounds in every position's keys, a shared atomic counts them),
// writes tiles = count / 64, ranks the common rows with a block-wide scan
// and writes the first 64 x tiles of them first in every position, then
// each position's entries not taken, in order. Barriers: 1 + 105 + 2 + 1 +
// 3 (the prefix scan) + 3 (the positions' scans) = 115.
// RUN: dhs-opt %s --dhs-lower-to-gpu --canonicalize --cse | FileCheck %s
// RUN: dhs-opt %s --dhs-lower-to-gpu | grep -c gpu.barrier | FileCheck %s --check-prefix=BARRIERS
// RUN: rm -rf %t && dhs-compile %s -o %t
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/share_rows.ptx -o %t/a.cubin %}
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK
// LINK: link: OK
// BARRIERS: 115

// CHECK-LABEL: func.func @step
// CHECK-SAME: (%[[ROWS:[a-z0-9]+]]: memref<4x5x2048xi32>, %[[SLOTS:[a-z0-9]+]]: memref<4x5x2048xi32>, %[[SR:[a-z0-9]+]]: memref<4x5x2048xi32>, %[[SS:[a-z0-9]+]]: memref<4x5x2048xi32>, %[[TILES:[a-z0-9]+]]: memref<4xi32>)
// A CTA of 1024 threads per request; 128 KB of keys, the warps' sums and
// the counter, 10240 taken bytes, 2048 flag bytes.
// CHECK: gpu.launch_func @share_rows::@share_rows blocks in (%c4, %c1, %c1) threads in (%c1024, %c1, %c1) dynamic_shared_memory_size %c143504_i32 args(%[[ROWS]] : memref<4x5x2048xi32>, %[[SLOTS]] : memref<4x5x2048xi32>, %[[SR]] : memref<4x5x2048xi32>, %[[SS]] : memref<4x5x2048xi32>, %[[TILES]] : memref<4xi32>) {dhs.op = "share_rows", dhs.roles = ["row_ids", "slots", "shared_rows", "shared_slots", "shared_tiles"], dhs.tile = 64 : i64}
// CHECK-LABEL: gpu.func @share_rows
// CHECK-SAME: (%[[IN:[a-z0-9]+]]: memref<4x5x2048xi32>, %[[INSLOTS:[a-z0-9]+]]: memref<4x5x2048xi32>, %[[OUT:[a-z0-9]+]]: memref<4x5x2048xi32>, %[[OUTSLOTS:[a-z0-9]+]]: memref<4x5x2048xi32>, %[[OUTTILES:[a-z0-9]+]]: memref<4xi32>)
// CHECK-SAME: known_block_size = array<i32: 1024, 1, 1>
// CHECK: %[[SHARED:.*]] = gpu.dynamic_shared_memory
// CHECK: %[[KEYS:.*]] = memref.view %[[SHARED]][%c0][] {{.*}} to memref<16384xi64, #gpu.address_space<workgroup>>
// CHECK: %[[SUMS:.*]] = memref.view %[[SHARED]][%c131072][] {{.*}} to memref<33xi32, #gpu.address_space<workgroup>>
// CHECK: %[[TAKEN:.*]] = memref.view %[[SHARED]][%c131216][] {{.*}} to memref<10240xi8, #gpu.address_space<workgroup>>
// CHECK: %[[FLAGS:.*]] = memref.view %[[SHARED]][%c141456][] {{.*}} to memref<2048xi8, #gpu.address_space<workgroup>>
// CHECK: %[[REQUEST:.*]] = gpu.block_id  x
// A. The keys: position << 46 | row (unsigned) << 14 | k, all ones past
// the 10240 selections.
// CHECK: scf.for %[[I:.*]] = %{{.*}} to %c16384 step %c1024
// CHECK: arith.cmpi ult, %[[I]], %c10240
// CHECK: %[[Q:.*]] = arith.divui %[[I]], %c2048
// CHECK: %[[K:.*]] = arith.remui %[[I]], %c2048
// CHECK: %[[ROW:.*]] = memref.load %[[IN]][%[[REQUEST]], %[[Q]], %[[K]]]
// CHECK: arith.shli %{{.*}}, %c46_i64
// CHECK: arith.extui %[[ROW]] : i32 to i64
// CHECK: arith.shli %{{.*}}, %c14_i64
// CHECK: scf.yield %c-1_i64
// CHECK: memref.store %{{.*}}, %[[KEYS]][%[[I]]]
// CHECK: memref.store %c0_i8, %[[TAKEN]]
// CHECK: memref.store %c0_i32, %[[SUMS]][%c32]
// CHECK: gpu.barrier
// B. The first pass (stride 1), 8192 pairs as unsigned 64-bit words.
// CHECK: scf.for %{{.*}} to %c8192 step %c1024
// CHECK: arith.cmpi ult, %{{.*}}, %{{.*}} : i64
// CHECK: arith.cmpi ugt, %{{.*}}, %{{.*}} : i64
// CHECK: gpu.barrier
// C. Position 0's entries: a first occurrence with a row >= 0 that the 4
// other positions' keys hold (12-step lower bounds over 2048 keys).
// CHECK: scf.for %[[K0:.*]] = %{{.*}} to %c2048 step %c1024
// CHECK: %[[ROW0:.*]] = memref.load %[[IN]][%[[REQUEST]], %c0, %[[K0]]]
// CHECK: scf.for %{{.*}} = %c0 to %c12 step %c1 iter_args(%{{.*}} = %c0, %{{.*}} = %c2048)
// CHECK: arith.cmpi sge, %[[ROW0]], %c0_i32
// CHECK: scf.for %{{.*}} = %c0 to %c12 step %c1 iter_args(%{{.*}} = %c2048, %{{.*}} = %c2048)
// CHECK: scf.for %{{.*}} = %c0 to %c12 step %c1 iter_args(%{{.*}} = %c8192, %{{.*}} = %c2048)
// CHECK: arith.cmpi ult, %{{.*}}, %c10240
// CHECK: memref.store %{{.*}}, %[[FLAGS]][%[[K0]]]
// CHECK: memref.atomic_rmw addi %c1_i32, %[[SUMS]][%c32]
// CHECK: gpu.barrier
// D. tiles = count / 64; the prefix is 64 x tiles rows.
// CHECK: %[[COUNT:.*]] = memref.load %[[SUMS]][%c32]
// CHECK: %[[T:.*]] = arith.divui %[[COUNT]], %c64_i32
// CHECK: %[[PREFIX:.*]] = arith.muli %[[T]], %c64_i32
// CHECK: memref.store %[[T]], %[[OUTTILES]][%[[REQUEST]]]
// CHECK: gpu.barrier
// The common rows ranked in position 0's order (a warp scan by shuffles,
// the warps' sums, a barrier each); rank < prefix writes every position.
// CHECK: scf.for %{{.*}} = %c0 to %c2048 step %c1024 iter_args(%{{.*}} = %c0_i32)
// CHECK: memref.load %[[FLAGS]]
// CHECK: gpu.shuffle  up
// CHECK: gpu.barrier
// CHECK: gpu.barrier
// CHECK: arith.cmpi slt, %[[RANK:.*]], %[[PREFIX]]
// CHECK: memref.store %{{.*}}, %[[OUT]][%[[REQUEST]], %c0, %[[AT:.*]]]
// CHECK: memref.store %{{.*}}, %[[OUTSLOTS]][%[[REQUEST]], %c0, %[[AT]]]
// CHECK: memref.store %c1_i8, %[[TAKEN]]
// CHECK: memref.store %{{.*}}, %[[OUT]][%[[REQUEST]], %c4, %{{.*}}]
// CHECK: memref.store %c1_i8, %[[TAKEN]]
// CHECK: gpu.barrier
// E. Per position, the entries not taken, in order, after the prefix.
// CHECK: scf.for %[[P:.*]] = %c0 to %c5 step %c1
// CHECK: scf.for %{{.*}} = %c0 to %c2048 step %c1024 iter_args(%{{.*}} = %c0_i32)
// CHECK: memref.load %[[TAKEN]]
// CHECK: arith.cmpi eq, %{{.*}}, %c0_i8
// CHECK: gpu.barrier
// CHECK: gpu.barrier
// CHECK: arith.addi %[[PREFIX]], %{{.*}} : i32
// CHECK: memref.load %[[IN]][%[[REQUEST]], %[[P]], %{{.*}}]
// CHECK: memref.store %{{.*}}, %[[OUT]][%[[REQUEST]], %[[P]], %{{.*}}]
// CHECK: memref.load %[[INSLOTS]][%[[REQUEST]], %[[P]], %{{.*}}]
// CHECK: memref.store %{{.*}}, %[[OUTSLOTS]][%[[REQUEST]], %[[P]], %{{.*}}]
// CHECK: gpu.barrier
// CHECK: gpu.return

// The step's arguments by role, then the launch with its tile.
// MANIFEST: "role": "row_ids"
// MANIFEST: "role": "slots"
// MANIFEST: "role": "shared_rows"
// MANIFEST: "role": "shared_slots"
// MANIFEST: "role": "shared_tiles"
// MANIFEST: "dynamic_shared_bytes": 143504
// MANIFEST: "kernel": "share_rows"
// MANIFEST: "op": "share_rows"
// MANIFEST: "role": "row_ids"
// MANIFEST: "role": "slots"
// MANIFEST: "role": "shared_rows"
// MANIFEST: "role": "shared_slots"
// MANIFEST: "role": "shared_tiles"
// MANIFEST: "tile": 64
func.func @step(%rows: memref<4x5x2048xi32>, %slots: memref<4x5x2048xi32>,
                %shared_rows: memref<4x5x2048xi32>, %shared_slots: memref<4x5x2048xi32>,
                %tiles: memref<4xi32>) {
  dhs.share_rows rows(%rows : memref<4x5x2048xi32>) slots(%slots : memref<4x5x2048xi32>) tile = 64
      into(%shared_rows, %shared_slots, %tiles
           : memref<4x5x2048xi32>, memref<4x5x2048xi32>, memref<4xi32>)
  return
}
