// dhs.share_rows: one CTA per request (1024 threads) looks its 5 x 2048
// selections up in a hash table in dynamic shared memory: 8192 slots (4 K),
// each a row id (-1 empty) and 5 first occurrences (i16, 2048 none). Each
// thread owns 2 entries of position 0 and 10 selections (flat), unrolled.
// Position 0's rows claim slots (compare-and-swap, linear probing from a
// Fibonacci hash) and keep their first occurrence (atomic min); the other
// positions' rows look theirs up and keep theirs; a row of position 0 at its
// first occurrence, there in every position, is common. A block-wide scan
// ranks and counts the common rows (tiles = count / 64); the first 64 x
// tiles go first in every position (their first occurrences marked taken);
// a second scan ranks the rest. Barriers: 1 (the empty table) + 1 (claims)
// + 1 (lookups) + 2 (the common rows' scan) + 1 (the prefix) + 2 (the
// rest's scan) = 8.
// RUN: dhs-opt %s --dhs-lower-to-gpu --canonicalize --cse | FileCheck %s
// RUN: dhs-opt %s --dhs-lower-to-gpu | grep -c gpu.barrier | FileCheck %s --check-prefix=BARRIERS
// RUN: rm -rf %t && dhs-compile %s -o %t
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/share_rows.ptx -o %t/a.cubin %}
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK
// LINK: link: OK
// BARRIERS: 8

// CHECK-LABEL: func.func @step
// CHECK-SAME: (%[[ROWS:[a-z0-9]+]]: memref<4x5x2048xi32>, %[[SLOTS:[a-z0-9]+]]: memref<4x5x2048xi32>, %[[SR:[a-z0-9]+]]: memref<4x5x2048xi32>, %[[SS:[a-z0-9]+]]: memref<4x5x2048xi32>, %[[TILES:[a-z0-9]+]]: memref<4xi32>)
// A CTA of 1024 threads per request; 32 KB of row ids, 80 KB of first
// occurrences, 10240 taken bytes, the 32 warps' sums.
// CHECK: gpu.launch_func @share_rows::@share_rows blocks in (%c4, %c1, %c1) threads in (%c1024, %c1, %c1) dynamic_shared_memory_size %c125056_i32 args(%[[ROWS]] : memref<4x5x2048xi32>, %[[SLOTS]] : memref<4x5x2048xi32>, %[[SR]] : memref<4x5x2048xi32>, %[[SS]] : memref<4x5x2048xi32>, %[[TILES]] : memref<4xi32>) {dhs.op = "share_rows", dhs.roles = ["row_ids", "slots", "shared_rows", "shared_slots", "shared_tiles"], dhs.tile = 64 : i64}
// CHECK-LABEL: gpu.func @share_rows
// CHECK-SAME: (%[[IN:[a-z0-9]+]]: memref<4x5x2048xi32>, %[[INSLOTS:[a-z0-9]+]]: memref<4x5x2048xi32>, %[[OUT:[a-z0-9]+]]: memref<4x5x2048xi32>, %[[OUTSLOTS:[a-z0-9]+]]: memref<4x5x2048xi32>, %[[OUTTILES:[a-z0-9]+]]: memref<4xi32>)
// CHECK-SAME: known_block_size = array<i32: 1024, 1, 1>
// CHECK: %[[INF:.*]] = memref.collapse_shape %[[IN]] {{\[}}[0], [1, 2]] : memref<4x5x2048xi32> into memref<4x10240xi32>
// CHECK: %[[INSLOTSF:.*]] = memref.collapse_shape %[[INSLOTS]]
// CHECK: %[[OUTF:.*]] = memref.collapse_shape %[[OUT]]
// CHECK: %[[OUTSLOTSF:.*]] = memref.collapse_shape %[[OUTSLOTS]]
// CHECK: %[[SHARED:.*]] = gpu.dynamic_shared_memory
// CHECK: %[[KEYS:.*]] = memref.view %[[SHARED]][%c0][] {{.*}} to memref<8192xi32, #gpu.address_space<workgroup>>
// CHECK: %[[FIRST:.*]] = memref.view %[[SHARED]][%c32768][] {{.*}} to memref<40960xi16, #gpu.address_space<workgroup>>
// CHECK: %[[FIRSTW:.*]] = memref.view %[[SHARED]][%c32768][] {{.*}} to memref<20480xi32, #gpu.address_space<workgroup>>
// CHECK: %[[TAKEN:.*]] = memref.view %[[SHARED]][%c114688][] {{.*}} to memref<10240xi8, #gpu.address_space<workgroup>>
// CHECK: %[[TAKENW:.*]] = memref.view %[[SHARED]][%c114688][] {{.*}} to memref<2560xi32, #gpu.address_space<workgroup>>
// CHECK: %[[SUMS:.*]] = memref.view %[[SHARED]][%c124928][] {{.*}} to memref<32xi32, #gpu.address_space<workgroup>>
// CHECK: %[[TID:.*]] = gpu.thread_id  x
// CHECK: %[[REQUEST:.*]] = gpu.block_id  x
// A. The rows first: position 0's entries 2 tid, 2 tid + 1 (clamped), the
// other positions' 2048 + 8 tid + j.
// CHECK: %[[K0:.*]] = arith.muli %[[TID]], %c2 : index
// CHECK: %[[K0C:.*]] = arith.minui %[[K0]], %c2047
// CHECK: %[[ROW0:.*]] = memref.load %[[INF]][%[[REQUEST]], %[[K0C]]]
// CHECK: memref.load %[[INF]]
// CHECK: %[[I1:.*]] = arith.muli %[[TID]], %c8 : index
// CHECK: arith.addi %[[I1]], %c2048 : index
// CHECK: arith.minui %{{.*}}, %c10239
// CHECK: memref.load %[[INF]]
// An empty table: row ids -1, first occurrences 2048 (two a word), nothing
// taken.
// CHECK: scf.for %[[E:.*]] = %[[TID]] to %c8192 step %c1024
// CHECK: memref.store %c-1_i32, %[[KEYS]][%[[E]]]
// CHECK: scf.for %[[E:.*]] = %[[TID]] to %c20480 step %c1024
// CHECK: memref.store %c134219776_i32, %[[FIRSTW]][%[[E]]]
// CHECK: scf.for %[[E:.*]] = %[[TID]] to %c2560 step %c1024
// CHECK: memref.store %c0_i32, %[[TAKENW]][%[[E]]]
// CHECK: gpu.barrier
// B. Position 0's rows >= 0 claim a slot: the top 13 bits of row x
// 0x9E3779B1, then linear probing; an empty slot by compare-and-swap.
// CHECK: arith.cmpi sge, %[[ROW0]], %c0_i32
// CHECK: %[[SLOT0:.*]] = scf.if
// CHECK: arith.muli %[[ROW0]], %c-1640531535_i32
// CHECK: arith.shrui %{{.*}}, %c19_i32
// CHECK: scf.while
// CHECK: memref.load %[[KEYS]]
// CHECK: memref.generic_atomic_rmw %[[KEYS]]
// CHECK: arith.andi %{{.*}}, %c8191 : index
// The first occurrence: an atomic min unless an earlier one is there.
// CHECK: memref.load %[[FIRST]]
// CHECK: arith.cmpi ugt
// CHECK: memref.atomic_rmw minu %{{.*}}, %[[FIRST]]
// CHECK: gpu.barrier
// C. The other positions look their rows up (no claims) and keep their
// first occurrence at position q: first[q x 8192 + slot].
// CHECK: scf.while
// CHECK-NOT: generic_atomic_rmw
// CHECK: arith.divui %{{.*}}, %c2048 : index
// CHECK: arith.remui %{{.*}}, %c2048 : index
// CHECK: arith.muli %{{.*}}, %c8192 : index
// CHECK: memref.atomic_rmw minu %{{.*}}, %[[FIRST]]
// CHECK: gpu.barrier
// D. Common: position 0's first occurrence and one in positions 1-4.
// CHECK-NOT: gpu.barrier
// CHECK: memref.load %[[FIRST]][%[[SLOT0]]]
// CHECK: arith.cmpi eq, %{{.*}}, %{{.*}} : i16
// CHECK: arith.addi %[[SLOT0]], %c8192 : index
// CHECK: arith.cmpi ult, %{{.*}}, %c2048_i16 : i16
// CHECK: arith.addi %[[SLOT0]], %c32768 : index
// CHECK: arith.cmpi ult, %{{.*}}, %c2048_i16 : i16
// The block-wide scan: shuffles, the warps' sums, warp 0 scans them.
// CHECK: gpu.shuffle  up
// CHECK: memref.store %{{.*}}, %[[SUMS]]
// CHECK: gpu.barrier
// CHECK: gpu.shuffle  up
// CHECK: gpu.barrier
// tiles = count / 64; the prefix is 64 x tiles rows.
// CHECK: %[[COUNT:.*]] = memref.load %[[SUMS]][%c31]
// CHECK: %[[T:.*]] = arith.divui %[[COUNT]], %c64_i32
// CHECK: %[[PREFIX:.*]] = arith.muli %[[T]], %c64_i32
// CHECK: memref.store %[[T]], %[[OUTTILES]][%[[REQUEST]]]
// E. A common row of rank < prefix at its rank in every position, with the
// slot of its first occurrence there, marked taken.
// CHECK: arith.cmpi slt, %[[RANK:.*]], %[[PREFIX]]
// CHECK: %[[AT:.*]] = arith.index_castui %[[RANK]] : i32 to index
// CHECK: memref.store %[[ROW0]], %[[OUTF]][%[[REQUEST]], %[[AT]]]
// CHECK: memref.load %[[INSLOTSF]][%[[REQUEST]], %[[K0]]]
// CHECK: memref.store %{{.*}}, %[[OUTSLOTSF]][%[[REQUEST]], %[[AT]]]
// CHECK: memref.store %c1_i8, %[[TAKEN]][%[[K0]]]
// CHECK: memref.load %[[FIRST]]
// CHECK: arith.addi %{{.*}}, %c8192 : index
// CHECK: arith.addi %[[AT]], %c8192 : index
// CHECK: memref.store %c1_i8, %[[TAKEN]]
// CHECK: gpu.barrier
// F. The 10 selections 10 tid + j not taken, ranked by a second scan, go to
// rank + (q + 1) x prefix.
// CHECK: arith.muli %[[TID]], %c10 : index
// CHECK: memref.load %[[INF]]
// CHECK: memref.load %[[INSLOTSF]]
// CHECK: memref.load %[[TAKEN]]
// CHECK: arith.cmpi eq, %{{.*}}, %c0_i8
// CHECK: gpu.barrier
// CHECK: gpu.barrier
// CHECK: arith.divui %{{.*}}, %c2048 : index
// CHECK: arith.muli %{{.*}}, %[[PREFIX]] : i32
// CHECK: memref.store %{{.*}}, %[[OUTF]]
// CHECK: memref.store %{{.*}}, %[[OUTSLOTSF]]
// CHECK-NOT: gpu.barrier
// CHECK: gpu.return

// The step's arguments by role, then the launch with its tile.
// MANIFEST: "role": "row_ids"
// MANIFEST: "role": "slots"
// MANIFEST: "role": "shared_rows"
// MANIFEST: "role": "shared_slots"
// MANIFEST: "role": "shared_tiles"
// MANIFEST: "dynamic_shared_bytes": 125056
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
