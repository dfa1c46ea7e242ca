// dhs.share_rows: one CTA per request (1024 threads) looks its 5 x 2048
// selections up in a hash table in dynamic shared memory: 8192 slots (4 K),
// each a row id (-1 empty) and 5 first occurrences (i32, 2048 none). Each
// thread owns 2 entries of position 0 and 8 of the other positions' 8192
// (tid + j x 1024: a warp's side by side), unrolled. Position 0's rows claim
// slots (compare-and-swap, linear probing from a Fibonacci hash) and keep
// their first occurrence (a native atomic min); the other positions' rows
// look theirs up, the thread's 8 lookups probing side by side in one loop,
// and keep theirs; a row of position 0 at its first occurrence, there in
// every position, is common. A block-wide scan ranks and counts the common
// rows (tiles = count / 64); the first 64 x tiles go first in every
// position (their first occurrences marked taken); the rest are ranked by
// ballots and a scan of the warps' counts round by round. Barriers: 1 (the
// empty table) + 1 (claims) + 1 (lookups) + 2 (the common rows' scan) + 1
// (the prefix) + 2 (the rest's scan) = 8.
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
// A CTA of 1024 threads per request; 32 KB of row ids, 160 KB of first
// occurrences, 10240 taken bytes, 320 sums (10 rounds of 32 warps).
// CHECK: gpu.launch_func @share_rows::@share_rows blocks in (%c4, %c1, %c1) threads in (%c1024, %c1, %c1) dynamic_shared_memory_size %c208128_i32 args(%[[ROWS]] : memref<4x5x2048xi32>, %[[SLOTS]] : memref<4x5x2048xi32>, %[[SR]] : memref<4x5x2048xi32>, %[[SS]] : memref<4x5x2048xi32>, %[[TILES]] : memref<4xi32>) {dhs.op = "share_rows", dhs.roles = ["row_ids", "slots", "shared_rows", "shared_slots", "shared_tiles"], dhs.tile = 64 : i64}
// CHECK-LABEL: gpu.func @share_rows
// CHECK-SAME: (%[[IN:[a-z0-9]+]]: memref<4x5x2048xi32>, %[[INSLOTS:[a-z0-9]+]]: memref<4x5x2048xi32>, %[[OUT:[a-z0-9]+]]: memref<4x5x2048xi32>, %[[OUTSLOTS:[a-z0-9]+]]: memref<4x5x2048xi32>, %[[OUTTILES:[a-z0-9]+]]: memref<4xi32>)
// CHECK-SAME: known_block_size = array<i32: 1024, 1, 1>
// CHECK: %[[INF:.*]] = memref.collapse_shape %[[IN]] {{\[}}[0], [1, 2]] : memref<4x5x2048xi32> into memref<4x10240xi32>
// CHECK: %[[INSLOTSF:.*]] = memref.collapse_shape %[[INSLOTS]]
// CHECK: %[[OUTF:.*]] = memref.collapse_shape %[[OUT]]
// CHECK: %[[OUTSLOTSF:.*]] = memref.collapse_shape %[[OUTSLOTS]]
// CHECK: %[[SHARED:.*]] = gpu.dynamic_shared_memory
// CHECK: %[[KEYS:.*]] = memref.view %[[SHARED]][%c0][] {{.*}} to memref<8192xi32, #gpu.address_space<workgroup>>
// CHECK: %[[FIRST:.*]] = memref.view %[[SHARED]][%c32768][] {{.*}} to memref<40960xi32, #gpu.address_space<workgroup>>
// CHECK: %[[TAKEN:.*]] = memref.view %[[SHARED]][%c196608][] {{.*}} to memref<10240xi8, #gpu.address_space<workgroup>>
// CHECK: %[[TAKENW:.*]] = memref.view %[[SHARED]][%c196608][] {{.*}} to memref<2560xi32, #gpu.address_space<workgroup>>
// CHECK: %[[SUMS:.*]] = memref.view %[[SHARED]][%c206848][] {{.*}} to memref<320xi32, #gpu.address_space<workgroup>>
// CHECK: %[[TID:.*]] = gpu.thread_id  x
// CHECK: %[[REQUEST:.*]] = gpu.block_id  x
// CHECK: %[[LANE:.*]] = arith.remui %[[TID]], %c32 : index
// CHECK: %[[WARP:.*]] = arith.divui %[[TID]], %c32 : index
// The lanes before this one: (1 << lane) - 1.
// CHECK: %[[LANE32:.*]] = arith.index_castui %[[LANE]] : index to i32
// CHECK: %[[BIT:.*]] = arith.shli %c1_i32, %[[LANE32]] : i32
// CHECK: %[[BEFORE:.*]] = arith.subi %[[BIT]], %c1_i32 : i32
// A. The rows first: position 0's entries 2 tid, 2 tid + 1 (clamped), the
// other positions' 2048 + tid + 1024 j.
// CHECK: %[[K0:.*]] = arith.muli %[[TID]], %c2 : index
// CHECK: %[[K0C:.*]] = arith.minui %[[K0]], %c2047
// CHECK: %[[ROW0:.*]] = memref.load %[[INF]][%[[REQUEST]], %[[K0C]]]
// CHECK: memref.load %[[INF]]
// CHECK: %[[I1:.*]] = arith.addi %[[TID]], %c2048 : index
// CHECK: %[[I1C:.*]] = arith.minui %[[I1]], %c10239
// CHECK: %[[ROW1:.*]] = memref.load %[[INF]][%[[REQUEST]], %[[I1C]]]
// CHECK: arith.addi %[[TID]], %c3072 : index
// CHECK: arith.addi %[[TID]], %c9216 : index
// An empty table: row ids -1, first occurrences 2048, nothing taken; 16
// bytes a store.
// CHECK: scf.for %[[E:.*]] = %[[TID]] to %c2048 step %c1024
// CHECK: %[[AT:.*]] = arith.muli %[[E]], %c4 : index
// CHECK: vector.store %{{.*}}, %[[KEYS]][%[[AT]]] {alignment = 16 : i64}
// CHECK: scf.for %[[E:.*]] = %[[TID]] to %c10240 step %c1024
// CHECK: vector.store %{{.*}}, %[[FIRST]]
// CHECK: scf.for %[[E:.*]] = %[[TID]] to %c640 step %c1024
// CHECK: vector.store %{{.*}}, %[[TAKENW]]
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
// The first occurrence: a native atomic min.
// CHECK-NOT: memref.load %[[FIRST]]
// CHECK: memref.atomic_rmw minu %{{.*}}, %[[FIRST]]
// CHECK: gpu.barrier
// C. The other positions' 8 lookups probe side by side: a cursor < 8192
// probes, + 8192 found, + 16384 not there (a lookup without a row starts
// there, at slot tid mod 8192).
// CHECK: %[[NOROW:.*]] = arith.addi %{{.*}}, %c16384_i32 : i32
// CHECK: arith.muli %[[ROW1]], %c-1640531535_i32
// CHECK: %[[START:.*]] = arith.select %{{.*}}, %{{.*}}, %[[NOROW]] : i32
// CHECK: %[[CURSORS:.*]]:8 = scf.while (%[[C:.*]] = %[[START]], {{.*}}) : (i32, i32, i32, i32, i32, i32, i32, i32)
// CHECK: %[[PROBING:.*]] = arith.cmpi ult, %[[C]], %c8192_i32 : i32
// CHECK: %[[PROBED:.*]] = arith.select %[[PROBING]], %[[C]], %c0_i32 : i32
// CHECK: %[[PROBEDI:.*]] = arith.index_castui %[[PROBED]] : i32 to index
// CHECK: %[[THERE:.*]] = memref.load %[[KEYS]][%[[PROBEDI]]]
// CHECK: %[[NEXT:.*]] = arith.andi %{{.*}}, %c8191_i32 : i32
// CHECK: %[[EMPTY:.*]] = arith.addi %[[C]], %c16384_i32 : i32
// CHECK: %[[ISEMPTY:.*]] = arith.cmpi eq, %[[THERE]], %c-1_i32 : i32
// CHECK: %[[NOTFOUND:.*]] = arith.select %[[ISEMPTY]], %[[EMPTY]], %[[NEXT]] : i32
// CHECK: %[[FOUND:.*]] = arith.addi %[[C]], %c8192_i32 : i32
// CHECK: %[[ISROW:.*]] = arith.cmpi eq, %[[THERE]], %[[ROW1]] : i32
// CHECK: %[[MOVED:.*]] = arith.select %[[ISROW]], %[[FOUND]], %[[NOTFOUND]] : i32
// CHECK: arith.select %[[PROBING]], %[[MOVED]], %[[C]] : i32
// CHECK: scf.condition
// Then each keeps its first occurrence (2048, none, where not found) at
// position q: first[q x 8192 + slot].
// CHECK: %[[WASFOUND:.*]] = arith.cmpi ult, %[[CURSORS]]#0, %c16384_i32 : i32
// CHECK: %[[K1:.*]] = arith.remui %[[I1C]], %c2048 : index
// CHECK: %[[KEPT:.*]] = arith.select %[[WASFOUND]], %[[K1]], %c2048 : index
// CHECK: %[[SLOT1:.*]] = arith.andi %[[CURSORS]]#0, %c8191_i32 : i32
// CHECK: arith.divui %[[I1C]], %c2048 : index
// CHECK: arith.muli %{{.*}}, %c8192 : index
// CHECK: memref.atomic_rmw minu %{{.*}}, %[[FIRST]]
// CHECK: gpu.barrier
// D. Common: position 0's first occurrence and one in positions 1-4.
// CHECK-NOT: gpu.barrier
// CHECK: memref.load %[[FIRST]][%[[SLOT0]]]
// CHECK: arith.cmpi eq, %{{.*}}, %{{.*}} : i32
// CHECK: arith.addi %[[SLOT0]], %c8192 : index
// CHECK: arith.cmpi ult, %{{.*}}, %c2048_i32 : i32
// CHECK: arith.addi %[[SLOT0]], %c32768 : index
// CHECK: arith.cmpi ult, %{{.*}}, %c2048_i32 : i32
// The block-wide scan: shuffles, the warps' sums, warp 0 scans them.
// CHECK: gpu.shuffle  up
// CHECK: memref.store %{{.*}}, %[[SUMS]][%[[WARP]]]
// CHECK: gpu.barrier
// CHECK: gpu.shuffle  up
// CHECK: gpu.barrier
// tiles = count / 64; the prefix is 64 x tiles rows.
// CHECK: %[[COUNT:.*]] = memref.load %[[SUMS]][%c31]
// CHECK: %[[T:.*]] = arith.divui %[[COUNT]], %c64_i32
// CHECK: %[[PREFIX:.*]] = arith.muli %[[T]], %c64_i32
// CHECK: memref.store %[[T]], %[[OUTTILES]][%[[REQUEST]]]
// E. The loads first: position 0's slot, then each other position's first
// occurrence (clamped) and the slot there; then a common row of rank <
// prefix goes at its rank in every position, its first occurrences marked
// taken.
// CHECK: arith.cmpi slt, %[[RANK:.*]], %[[PREFIX]]
// CHECK: %[[AT:.*]] = arith.index_castui %[[RANK]] : i32 to index
// CHECK: %[[S0:.*]] = memref.load %[[INSLOTSF]][%[[REQUEST]], %[[K0C]]]
// CHECK: memref.load %[[FIRST]]
// CHECK: arith.minui %{{.*}}, %c2047 : index
// CHECK: %[[F1:.*]] = arith.addi %{{.*}}, %c2048 : index
// CHECK: %[[S1:.*]] = memref.load %[[INSLOTSF]][%[[REQUEST]], %[[F1]]]
// CHECK: scf.if
// CHECK-NEXT: memref.store %[[ROW0]], %[[OUTF]][%[[REQUEST]], %[[AT]]]
// CHECK-NEXT: memref.store %[[S0]], %[[OUTSLOTSF]][%[[REQUEST]], %[[AT]]]
// CHECK-NEXT: memref.store %c1_i8, %[[TAKEN]][%[[K0C]]]
// CHECK-NEXT: %[[AT1:.*]] = arith.addi %[[AT]], %c2048 : index
// CHECK-NEXT: memref.store %[[ROW0]], %[[OUTF]][%[[REQUEST]], %[[AT1]]]
// CHECK-NEXT: memref.store %[[S1]], %[[OUTSLOTSF]][%[[REQUEST]], %[[AT1]]]
// CHECK-NEXT: memref.store %c1_i8, %[[TAKEN]][%[[F1]]]
// CHECK: gpu.barrier
// F. Round j: the selection tid + 1024 j (a warp's 32 side by side), free
// where not taken; a ballot, and lane 0 stores the warp's count at
// sums[32 j + warp].
// CHECK: %[[IF:.*]] = arith.minui %[[TID]], %c10239 : index
// CHECK: %[[ROWF:.*]] = memref.load %[[INF]][%[[REQUEST]], %[[IF]]]
// CHECK: %[[SLOTF:.*]] = memref.load %[[INSLOTSF]][%[[REQUEST]], %[[IF]]]
// CHECK: memref.load %[[TAKEN]][%[[IF]]]
// CHECK: arith.cmpi eq, %{{.*}}, %c0_i8
// CHECK: %[[MASK:.*]] = nvvm.vote.sync  ballot %c-1_i32, %{{.*}} -> i32
// CHECK: scf.if
// CHECK-NEXT: %[[N:.*]] = llvm.intr.ctpop(%[[MASK]])
// CHECK-NEXT: memref.store %[[N]], %[[SUMS]][%[[WARP]]]
// CHECK: arith.addi %[[TID]], %c1024 : index
// CHECK: nvvm.vote.sync  ballot
// CHECK: %[[W9:.*]] = arith.addi %[[WARP]], %c288 : index
// CHECK: memref.store %{{.*}}, %[[SUMS]][%[[W9]]]
// Warp 0 turns the 320 counts into exclusive sums in place (lane l: counts
// 10 l .. 10 l + 9), between two barriers.
// CHECK: gpu.barrier
// CHECK: arith.muli %[[LANE]], %c10 : index
// CHECK: gpu.shuffle  up
// CHECK: memref.store %{{.*}}, %[[SUMS]]
// CHECK: gpu.barrier
// A free selection's rank: the sum before its warp's round plus its lanes
// before it; it goes to rank + (q + 1) x prefix.
// CHECK: %[[MINE:.*]] = arith.andi %[[MASK]], %[[BIT]] : i32
// CHECK: %[[FREE:.*]] = arith.cmpi ne, %[[MINE]], %c0_i32 : i32
// CHECK: scf.if %[[FREE]]
// CHECK-NEXT: %[[LOWER:.*]] = arith.andi %[[MASK]], %[[BEFORE]] : i32
// CHECK-NEXT: %[[LANES:.*]] = llvm.intr.ctpop(%[[LOWER]])
// CHECK-NEXT: %[[BASE:.*]] = memref.load %[[SUMS]][%[[WARP]]]
// CHECK-NEXT: %[[R:.*]] = arith.addi %[[BASE]], %[[LANES]] : i32
// CHECK-NEXT: arith.divui %[[TID]], %c2048 : index
// CHECK: arith.muli %{{.*}}, %[[PREFIX]] : i32
// CHECK: memref.store %[[ROWF]], %[[OUTF]]
// CHECK: memref.store %[[SLOTF]], %[[OUTSLOTSF]]
// CHECK-NOT: gpu.barrier
// CHECK: gpu.return

// The step's arguments by role, then the launch with its tile.
// MANIFEST: "role": "row_ids"
// MANIFEST: "role": "slots"
// MANIFEST: "role": "shared_rows"
// MANIFEST: "role": "shared_slots"
// MANIFEST: "role": "shared_tiles"
// MANIFEST: "dynamic_shared_bytes": 208128
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
