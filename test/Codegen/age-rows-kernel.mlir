// dhs.age_rows: one CTA of 1024 threads replays the appends recorded between
// two steps over the device residency state, in call order, as the
// controller's append does them; its first thread does the sequential parts
// and the CTA the parallel ones. Per append: the aged row's slot (from the
// pool's residency map) becomes hot; while the victim-search memo holds the
// step (word 0 of the pool's step log) an owner check reads a count of the
// hot rows in the request's range (none: its first hot row resets the
// memo), the counts built by the CTA at the launch's first check (the
// ranges' bounds rank-sorted in shared memory, each hot row's class by a
// binary search and a shared atomic, prefix sums) and kept current after
// each append; the budget word drops, and below 0 a CLOCK search from the
// hand (unless the memo holds the step) over two laps, 4096 slots a trip,
// takes an unreferenced candidate (hot, last use < the step; the lowest
// position over the warps' ballots), clearing the references of the
// positions before it (not walked when a count of the candidates, built at
// the launch's first search and kept current, is 0); the victim or the aged row leaves (map -1, pushed on
// the free stack); the new row takes the stack's top (map, [step, 0],
// referenced). Its list is what the place_rows launch after it carries out.
// RUN: dhs-opt %s --dhs-lower-to-gpu --canonicalize --cse | FileCheck %s
// RUN: rm -rf %t && dhs-compile %s -o %t
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/age_rows.ptx -o %t/a.cubin %}
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK
// LINK: link: OK

// CHECK-LABEL: func.func @step
// CHECK-SAME: %[[APPENDS:[a-z0-9]+]]: memref<64x4xi64>, %[[HOT:[a-z0-9]+]]: memref<2048xi64>, %[[CLEARED:[a-z0-9]+]]: memref<2048xi32>, %[[FREE:[a-z0-9]+]]: memref<2048xi32>, %[[CONTROL:[a-z0-9]+]]: memref<8xi32>, %[[ROWS:[a-z0-9]+]]: memref<128xi64>, %[[SLOTS:[a-z0-9]+]]: memref<128xi32>
// CHECK-DAG: %[[LOG:.*]] = dhs.pool_log of %{{.*}} -> memref<?xi32>
// CHECK-DAG: %[[RECENCY:.*]] = dhs.pool_recency of %{{.*}} -> memref<?x2xi32>
// CHECK-DAG: %[[MAP:.*]] = dhs.pool_map of %{{.*}} -> memref<?xi32>
// CHECK-DAG: %[[TABLE:.*]] = dhs.group_bindings : memref<?x?xi64>
// One CTA of 1024 threads (a group; the runtime sets the grid's z to the
// groups it replays in one launch).
// CHECK: gpu.launch_func @age_rows::@age_rows blocks in (%c1, %c1, %c1) threads in (%c1024, %c1, %c1) args(%[[APPENDS]] : memref<64x4xi64>, %[[HOT]] : memref<2048xi64>, %[[CLEARED]] : memref<2048xi32>, %[[FREE]] : memref<2048xi32>, %[[CONTROL]] : memref<8xi32>, %[[ROWS]] : memref<128xi64>, %[[SLOTS]] : memref<128xi32>, %[[MAP]] : memref<?xi32>, %[[RECENCY]] : memref<?x2xi32>, %[[LOG]] : memref<?xi32>, %{{.*}} : memref<1xi32>, %[[TABLE]] : memref<?x?xi64>) {dhs.op = "age_rows", dhs.roles = ["age_list", "hot_rows", "clock_cleared", "free_stack", "promotion_control", "place_rows", "place_slots", "residency_map", "replacement_state", "step_log", "status", "group_bindings"]}
// The list carried out by place_rows from the same buffers.
// CHECK: gpu.launch_func @place_rows::@place_rows {{.*}} %[[ROWS]] : memref<128xi64>, %[[SLOTS]] : memref<128xi32>

// CHECK-LABEL: gpu.func @age_rows
// CHECK-SAME: (%[[L0:[a-z0-9]+]]: memref<64x4xi64>, %[[H0:[a-z0-9]+]]: memref<2048xi64>, %[[C0:[a-z0-9]+]]: memref<2048xi32>, %[[F0:[a-z0-9]+]]: memref<2048xi32>, %[[CTL0:[a-z0-9]+]]: memref<8xi32>, %[[R0:[a-z0-9]+]]: memref<128xi64>, %[[S0:[a-z0-9]+]]: memref<128xi32>, %[[M0:[a-z0-9]+]]: memref<?xi32>, %[[REC0:[a-z0-9]+]]: memref<?x2xi32>, %[[LG0:[a-z0-9]+]]: memref<?xi32>, %[[ST0:[a-z0-9]+]]: memref<1xi32>, %[[TABLE:[a-z0-9]+]]: memref<?x?xi64>)
// Shared: the scalars, the appends, the sorted bounds (2N), the classes
// (2N + 2), the counts (N), the warps' lowest positions, the released row.
// CHECK-SAME: workgroup(%[[SC:.*]] : memref<16xi32, #gpu.address_space<workgroup>> {{.*}}, %[[E:.*]] : memref<64x4xi64, #gpu.address_space<workgroup>> {{.*}}, %[[B:.*]] : memref<128xi64, #gpu.address_space<workgroup>> {{.*}}, %[[K:.*]] : memref<130xi32, #gpu.address_space<workgroup>> {{.*}}, %[[O:.*]] : memref<64xi32, #gpu.address_space<workgroup>> {{.*}}, %[[WL:.*]] : memref<32xi32, #gpu.address_space<workgroup>> {{.*}}, %[[G:.*]] : memref<1xi64, #gpu.address_space<workgroup>> {{.*}})
// CHECK-SAME: known_block_size = array<i32: 1024, 1, 1>
// The CTA's group (z) and its buffers: each parameter moved by the
// group's row of the table, bytes over its element size.
// CHECK: %[[GROUP:.*]] = gpu.block_id z
// CHECK: %[[D0:.*]] = memref.load %[[TABLE]][%[[GROUP]], %c0]
// CHECK: %[[E0:.*]] = arith.divsi %[[D0]], %c8_i64
// CHECK: %[[O0:.*]] = arith.index_cast %[[E0]]
// CHECK: %[[L:.*]] = memref.reinterpret_cast %[[L0]] to offset: [%[[O0]]], sizes: [64, 4], strides: [4, 1] : memref<64x4xi64> to memref<64x4xi64, strided<[4, 1], offset: ?>>
// CHECK: %[[H:.*]] = memref.reinterpret_cast %[[H0]] to offset: {{.*}} : memref<2048xi64> to
// CHECK: %[[C:.*]] = memref.reinterpret_cast %[[C0]] to offset: {{.*}} : memref<2048xi32> to
// CHECK: %[[F:.*]] = memref.reinterpret_cast %[[F0]] to offset: {{.*}} : memref<2048xi32> to
// CHECK: %[[CTL:.*]] = memref.reinterpret_cast %[[CTL0]] to offset: {{.*}} : memref<8xi32> to
// CHECK: %[[R:.*]] = memref.reinterpret_cast %[[R0]] to offset: {{.*}} : memref<128xi64> to
// CHECK: %[[S:.*]] = memref.reinterpret_cast %[[S0]] to offset: {{.*}} : memref<128xi32> to
// CHECK: %[[M:.*]] = memref.reinterpret_cast %[[M0]] to offset: {{.*}} : memref<?xi32> to
// CHECK: %[[REC:.*]] = memref.reinterpret_cast %[[REC0]] to offset: {{.*}} : memref<?x2xi32> to
// CHECK: %[[LG:.*]] = memref.reinterpret_cast %[[LG0]] to offset: {{.*}} : memref<?xi32> to
// CHECK: %[[ST:.*]] = memref.reinterpret_cast %[[ST0]] to offset: {{.*}} : memref<1xi32> to
// The step from the log; 1. the list emptied and the appends copied by the
// CTA.
// CHECK: memref.load %[[LG]][%c0]
// CHECK: scf.for %{{.*}} = %{{.*}} to %c128 step %c1024
// CHECK: memref.store %c-1_i64, %[[R]]
// CHECK: memref.store %c-1_i32, %[[S]]
// CHECK: scf.for %[[I0:.*]] = %{{.*}} to %c64 step %c1024
// CHECK: %[[W0:.*]] = memref.load %[[L]][%[[I0]], %c0]
// CHECK: memref.store %[[W0]], %[[E]][%[[I0]], %c0]
// 2. The control words: hand, free count, budget, memo (6), excess (7); the
// owner counts not built (13), no candidate counted (14, 15).
// CHECK: memref.load %[[CTL]][%c0]
// CHECK: memref.load %[[CTL]][%c1]
// CHECK: memref.atomic_rmw ori %c2_i32, %[[ST]]
// CHECK: memref.load %[[CTL]][%c2]
// CHECK: memref.load %[[CTL]][%c6]
// CHECK: memref.load %[[CTL]][%c7]
// CHECK: memref.store %c0_i32, %[[SC]][%c13]
// CHECK: memref.store %c0_i32, %[[SC]][%c14]
// CHECK: memref.store %c0_i32, %[[SC]][%c15]
// CHECK: gpu.barrier
// 3. Per append: its words (shared), a bad host row (4), the aged row's slot.
// CHECK: scf.for %[[I:.*]] = %c0 to %{{.*}} step %c1
// CHECK: %[[AGED:.*]] = memref.load %[[E]][%[[I]], %c0]
// CHECK: memref.load %[[E]][%[[I]], %c1]
// CHECK: memref.atomic_rmw ori %c4_i32, %[[ST]]
// CHECK: memref.load %[[M]]
// The first thread's decisions, read by the CTA after a barrier.
// CHECK: gpu.barrier
// The owner check, only while the memo holds the step (word 9).
// CHECK: %[[CHECK:.*]] = memref.load %[[SC]][%c9]
// CHECK: %[[CHECKS:.*]] = arith.cmpi ne, %[[CHECK]], %c0_i32
// CHECK: scf.if %[[CHECKS]]
// At the first check the counts are built (13 unset): the bounds (begins,
// word 2, and ends, word 3) rank-sorted into shared memory ...
// CHECK: %[[BUILT:.*]] = memref.load %[[SC]][%c13]
// CHECK: %[[UNBUILT:.*]] = arith.cmpi eq, %[[BUILT]], %c0_i32
// CHECK: scf.if %[[UNBUILT]]
// CHECK: scf.for %[[J:.*]] = %{{.*}} to %c128 step %c1024
// CHECK: %[[V:.*]] = memref.load %[[E]]
// CHECK: %[[RANK:.*]] = scf.for %{{.*}} = %c0 to %c128 step %c1 iter_args
// CHECK: arith.cmpi slt, %{{.*}}, %[[V]] : i64
// CHECK: memref.store %[[V]], %[[B]][%[[RANK]]]
// CHECK: memref.store %c0_i32, %[[K]]
// CHECK: gpu.barrier
// ... every slot's row, 4 loads at once, counted in its class (a binary
// search, 8 halvings over the 128 bounds: the bounds at most the row) ...
// CHECK: scf.for %{{.*}} = %{{.*}} to %c2048 step %c4096
// CHECK-COUNT-4: memref.load %[[H]][
// CHECK: %[[CLASS:.*]]:2 = scf.for %{{.*}} = %c0 to %c8 step %c1 iter_args(%{{.*}} = %c0, %{{.*}} = %c128)
// CHECK: memref.load %[[B]]
// CHECK: arith.cmpi sle
// CHECK: memref.atomic_rmw addi %c1_i32, %[[K]][%[[CLASS]]#0]
// CHECK: gpu.barrier
// ... prefix sums (first thread) ...
// CHECK: scf.for %{{.*}} = %c0 to %c130 step %c1 iter_args
// CHECK: gpu.barrier
// ... and each append's count: the classes from #bounds <= begin to
// #bounds < end.
// CHECK: scf.for %{{.*}} = %{{.*}} to %c64 step %c1024
// CHECK: memref.load %[[E]][%{{.*}}, %c2]
// CHECK: arith.cmpi sle
// CHECK: memref.load %[[E]][%{{.*}}, %c3]
// CHECK: arith.cmpi slt
// CHECK: memref.store %{{.*}}, %[[O]]
// CHECK: memref.store %c1_i32, %[[SC]][%c13]
// CHECK: gpu.barrier
// No hot row in the range resets the memo (first thread).
// CHECK: %[[OWNED:.*]] = memref.load %[[O]][%[[I]]]
// CHECK: arith.cmpi eq, %[[OWNED]], %c0_i32
// CHECK: memref.store %c0_i32, %[[SC]][%c3]
// The slot becomes hot (once counted (15), one more candidate (14) if its
// last use is before the step); over the budget a release (10), a search
// unless the memo holds the step (11).
// CHECK: memref.store %[[AGED]], %[[H]][%[[AGEDSLOT:[a-z0-9_#]+]]]
// CHECK: memref.load %[[SC]][%c15]
// CHECK: memref.load %[[REC]][%[[AGEDSLOT]], %c0]
// CHECK: arith.cmpi ult
// CHECK: memref.load %[[SC]][%c14]
// CHECK: arith.addi %{{.*}}, %c1_i32
// CHECK: memref.store %{{.*}}, %[[SC]][%c14]
// CHECK: memref.store %c1_i32, %[[SC]][%c10]
// CHECK: memref.store %{{.*}}, %[[SC]][%c11]
// CHECK: gpu.barrier
// The CLOCK search (the CTA): two laps at most, min(4096, slots) slots a
// trip from the hand, 4 positions a thread (their loads first); candidates
// hot with an earlier last use; per warp and round a ballot of the
// unreferenced ones and its lowest lane, the trip's victim the least over
// the rounds and warps (a shuffle min); the referenced positions before it
// cleared; two barriers a trip.
// CHECK: %[[SEARCH:.*]] = memref.load %[[SC]][%c11]
// CHECK: %[[SEARCHES:.*]] = arith.cmpi ne, %[[SEARCH]], %c0_i32
// CHECK: scf.if %[[SEARCHES]]
// At the launch's first search the CTA counts the candidates (15 unset):
// hot, last use before the step, 1024 slots at a time, a ballot per warp
// and its population added by lane 0.
// CHECK: %[[CCOUNTED:.*]] = memref.load %[[SC]][%c15]
// CHECK: %[[UNCOUNTED:.*]] = arith.cmpi eq, %[[CCOUNTED]], %c0_i32
// CHECK: scf.if %[[UNCOUNTED]]
// CHECK: scf.for %{{.*}} = %c0 to %c2048 step %c1024
// CHECK: memref.load %[[H]][
// CHECK: memref.load %[[REC]][
// CHECK: %[[CVOTES:.*]] = nvvm.vote.sync ballot %c-1_i32, %{{.*}} -> i32
// CHECK: %[[POP:.*]] = llvm.intr.ctpop(%[[CVOTES]])
// CHECK: memref.atomic_rmw addi %[[POP]], %[[SC]][%c14]
// CHECK: gpu.barrier
// CHECK: memref.store %c1_i32, %[[SC]][%c15]
// No candidate: the search would fail and change nothing; it is not walked.
// CHECK: %[[CANDS:.*]] = memref.load %[[SC]][%c14]
// CHECK: %[[ANY:.*]] = arith.cmpi sgt, %[[CANDS]], %c0_i32
// CHECK: scf.if %[[ANY]] -> (i32)
// CHECK: %[[HAND:.*]] = memref.load %[[SC]][%c0]
// CHECK: scf.while (%{{.*}} = %c0_i32, %{{.*}} = %c-1_i32) : (i32, i32) -> (i32, i32)
// CHECK: arith.cmpi slt, %{{.*}}, %c4096_i32
// CHECK: } do {
// CHECK: ^bb0(%[[KT:.*]]: i32, %{{.*}}: i32):
// Round 0: position k + t, in the trip when t < min(slots, 4096) = 2048.
// CHECK: %[[POS:.*]] = arith.addi %[[KT]], %[[THREAD:[0-9]+]] : i32
// CHECK: arith.cmpi slt, %[[THREAD]], %c2048_i32
// CHECK: arith.cmpi slt, %[[POS]], %c4096_i32
// CHECK: %[[RAW:.*]] = arith.addi %[[HAND]], %[[POS]]
// CHECK: arith.remui %[[RAW]], %c2048_i32
// CHECK: %[[LAST:.*]] = memref.load %[[REC]][%{{.*}}, %c0]
// CHECK: arith.cmpi ult, %[[LAST]]
// CHECK: memref.load %[[H]][
// CHECK: %[[CL:.*]] = memref.load %[[C]]
// Rounds 1-3: positions k + t + 1024 u, loaded before any ballot.
// CHECK: %[[P1:.*]] = arith.addi %[[THREAD]], %c1024_i32
// CHECK: memref.load %[[REC]]
// CHECK: %[[P2:.*]] = arith.addi %[[THREAD]], %c2048_i32
// CHECK: memref.load %[[REC]]
// CHECK: %[[P3:.*]] = arith.addi %[[THREAD]], %c3072_i32
// CHECK: memref.load %[[REC]]
// CHECK: memref.load %[[C]]
// The rounds' ballots, the last first (4096: none), so that the warp's
// lowest position is the earliest round's.
// CHECK: nvvm.vote.sync ballot
// CHECK: arith.addi %{{.*}}, %c3072_i32
// CHECK: arith.select %{{.*}}, %{{.*}}, %c4096_i32
// CHECK: nvvm.vote.sync ballot
// CHECK: nvvm.vote.sync ballot
// CHECK: %[[UNREF:.*]] = arith.cmpi eq, %[[LAST]], %[[CL]]
// CHECK: %[[TAKEN:.*]] = arith.andi %{{.*}}, %[[UNREF]]
// CHECK-NEXT: %[[VOTES:.*]] = nvvm.vote.sync ballot %c-1_i32, %[[TAKEN]] -> i32
// CHECK: %[[LOWLANE:.*]] = "llvm.intr.cttz"(%[[VOTES]]) <{is_zero_poison = false}>
// CHECK: %[[SOME:.*]] = arith.cmpi ne, %[[VOTES]], %c0_i32
// CHECK: %[[WPOS:.*]] = arith.addi %{{.*}}, %[[LOWLANE]]
// CHECK: %[[MINE:.*]] = arith.select %[[SOME]], %[[WPOS]], %{{.*}}
// CHECK: memref.store %[[MINE]], %[[WL]]
// CHECK: gpu.barrier
// CHECK: memref.load %[[WL]]
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: %[[LOWEST:.*]] = arith.minsi
// CHECK: %[[BEFORE:.*]] = arith.cmpi slt, %[[THREAD]], %[[LOWEST]]
// CHECK: %[[CHANCE:.*]] = arith.andi %{{.*}}, %[[BEFORE]]
// CHECK: scf.if %[[CHANCE]]
// CHECK: memref.store %[[LAST]], %[[C]]
// CHECK: arith.cmpi slt, %[[P1]], %[[LOWEST]]
// CHECK: arith.cmpi slt, %[[P2]], %[[LOWEST]]
// CHECK: arith.cmpi slt, %[[P3]], %[[LOWEST]]
// CHECK: gpu.barrier
// CHECK: %[[VK:.*]] = arith.addi %[[HAND]], %[[KT]]
// CHECK: %[[VAT:.*]] = arith.addi %[[VK]], %[[LOWEST]]
// CHECK: %[[VSLOT:.*]] = arith.remui %[[VAT]], %c2048_i32
// CHECK: %[[FOUND:.*]] = arith.cmpi slt, %[[LOWEST]], %c4096_i32
// CHECK: %[[VICTIM:.*]] = arith.select %[[FOUND]], %[[VSLOT]], %c-1_i32
// CHECK: %[[NEXTK:.*]] = arith.addi %[[KT]], %c2048_i32
// CHECK: scf.yield %[[NEXTK]], %[[VICTIM]]
// CHECK: } else {
// CHECK: scf.yield %c-1_i32
// The hand right after the victim (or back where it was), the victim (12); a
// failed search sets the memo.
// CHECK: memref.store %{{.*}}, %[[SC]][%c0]
// CHECK: memref.store %{{.*}}, %[[SC]][%c12]
// CHECK: memref.store %{{.*}}, %[[SC]][%c3]
// CHECK: gpu.barrier
// The leaving row: one candidate less if it was one (once counted), kept
// for the counts, unmapped, not hot, pushed.
// CHECK: %[[GONE:.*]] = memref.load %[[H]][
// CHECK: memref.load %[[SC]][%c15]
// CHECK: arith.cmpi sge, %[[GONE]], %c0_i64
// CHECK: arith.addi %{{.*}}, %c-1_i32
// CHECK: memref.store %{{.*}}, %[[SC]][%c14]
// CHECK: memref.store %[[GONE]], %[[G]][%c0]
// CHECK: memref.store %c-1_i32, %[[M]]
// CHECK: memref.store %c-1_i64, %[[H]][
// CHECK: memref.store %{{.*}}, %[[F]]
// The new row: the slot just pushed or else the stack's top, mapped, stamped
// [step, 0], referenced.
// CHECK: scf.if %{{.*}} -> (i32)
// CHECK: } else {
// CHECK: memref.load %[[F]]
// CHECK: memref.load %[[SC]][%c15]
// CHECK: arith.addi %{{.*}}, %c-1_i32
// CHECK: memref.store %{{.*}}, %[[M]]
// CHECK: memref.store %{{.*}}, %[[REC]][%{{.*}}, %c0]
// CHECK: memref.store %c0_i32, %[[REC]][%{{.*}}, %c1]
// CHECK: memref.store %c-1_i32, %[[C]]
// CHECK: gpu.barrier
// Once built (13), the counts follow the aged row (+1) and the released row
// (-1): a thread an append; a barrier.
// CHECK: %[[COUNTED:.*]] = memref.load %[[SC]][%c13]
// CHECK: arith.cmpi ne, %[[COUNTED]], %c0_i32
// CHECK: memref.load %[[G]][%c0]
// CHECK: scf.for %[[JO:.*]] = %{{.*}} to %c64 step %c1024
// CHECK: arith.subi
// CHECK: %[[WAS:.*]] = memref.load %[[O]][%[[JO]]]
// CHECK: %[[NOW:.*]] = arith.addi %[[WAS]]
// CHECK: memref.store %[[NOW]], %[[O]][%[[JO]]]
// CHECK: gpu.barrier
// 4. The list of mapped new rows (the CTA); the control words.
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c1024
// CHECK: memref.store %{{.*}}, %[[R]]
// CHECK: memref.store %{{.*}}, %[[S]]
// CHECK: memref.store %{{.*}}, %[[CTL]][%c0]
// CHECK: memref.store %{{.*}}, %[[CTL]][%c1]
// CHECK: memref.store %{{.*}}, %[[CTL]][%c2]
// CHECK: memref.store %{{.*}}, %[[CTL]][%c6]
// CHECK: memref.store %{{.*}}, %[[CTL]][%c7]
// CHECK: gpu.return

// MANIFEST: "role": "kv_pool"
// MANIFEST: "role": "age_list"
// MANIFEST: "role": "hot_rows"
// MANIFEST: "role": "clock_cleared"
// MANIFEST: "role": "free_stack"
// MANIFEST: "role": "promotion_control"
// MANIFEST: "role": "place_rows"
// MANIFEST: "role": "place_slots"
// MANIFEST: "op": "age_rows"
// MANIFEST: "source": "pool_map"
// MANIFEST: "source": "pool_recency"
// MANIFEST: "source": "pool_log"

func.func @step(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>,
                %appends: memref<64x4xi64>, %hot: memref<2048xi64>, %cleared: memref<2048xi32>,
                %free: memref<2048xi32>, %control: memref<8xi32>,
                %rows: memref<128xi64>, %slots: memref<128xi32>) {
  dhs.age_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      appends(%appends : memref<64x4xi64>) hot(%hot : memref<2048xi64>)
      cleared(%cleared : memref<2048xi32>) free(%free : memref<2048xi32>)
      control(%control : memref<8xi32>) into(%rows, %slots : memref<128xi64>, memref<128xi32>)
  dhs.place_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      rows(%rows : memref<128xi64>) slots(%slots : memref<128xi32>)
  return
}
