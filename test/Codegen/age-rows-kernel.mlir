// dhs.age_rows: one warp replays the appends recorded between two steps over
// the device residency state, in call order, as the controller's append does
// them; its first thread does the sequential parts and the warp the scans.
// Per append: the aged row's slot (from the pool's residency map) becomes
// hot, after a scan of the hot rows for its request's range (32 a trip, a
// ballot; none: its first hot row resets the victim-search memo); the budget
// word drops, and below 0 a CLOCK search from the hand (unless the memo
// holds the step, word 0 of the pool's step log) over two laps, 32 slots a
// trip, takes an unreferenced candidate (hot, last use < the step; the
// ballot's lowest lane), clearing the references of the lanes before it;
// the victim or the aged row leaves (map -1, pushed on the free stack); the
// new row takes the stack's top (map, [step, 0], referenced).
// Its list is what the place_rows launch after it carries out.
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
// One warp.
// CHECK: gpu.launch_func @age_rows::@age_rows blocks in (%c1, %c1, %c1) threads in (%c32, %c1, %c1) args(%[[APPENDS]] : memref<64x4xi64>, %[[HOT]] : memref<2048xi64>, %[[CLEARED]] : memref<2048xi32>, %[[FREE]] : memref<2048xi32>, %[[CONTROL]] : memref<8xi32>, %[[ROWS]] : memref<128xi64>, %[[SLOTS]] : memref<128xi32>, %[[MAP]] : memref<?xi32>, %[[RECENCY]] : memref<?x2xi32>, %[[LOG]] : memref<?xi32>, %{{.*}} : memref<1xi32>) {dhs.op = "age_rows", dhs.roles = ["age_list", "hot_rows", "clock_cleared", "free_stack", "promotion_control", "place_rows", "place_slots", "residency_map", "replacement_state", "step_log", "status"]}
// The list carried out by place_rows from the same buffers.
// CHECK: gpu.launch_func @place_rows::@place_rows {{.*}} %[[ROWS]] : memref<128xi64>, %[[SLOTS]] : memref<128xi32>

// CHECK-LABEL: gpu.func @age_rows
// CHECK-SAME: (%[[L:[a-z0-9]+]]: memref<64x4xi64>, %[[H:[a-z0-9]+]]: memref<2048xi64>, %[[C:[a-z0-9]+]]: memref<2048xi32>, %[[F:[a-z0-9]+]]: memref<2048xi32>, %[[CTL:[a-z0-9]+]]: memref<8xi32>, %[[R:[a-z0-9]+]]: memref<128xi64>, %[[S:[a-z0-9]+]]: memref<128xi32>, %[[M:[a-z0-9]+]]: memref<?xi32>, %[[REC:[a-z0-9]+]]: memref<?x2xi32>, %[[LG:[a-z0-9]+]]: memref<?xi32>, %[[ST:[a-z0-9]+]]: memref<1xi32>)
// CHECK-SAME: workgroup(%[[SC:.*]] : memref<13xi32, #gpu.address_space<workgroup>>
// CHECK-SAME: known_block_size = array<i32: 32, 1, 1>
// The step from the log; 1. the list emptied by the warp.
// CHECK: memref.load %[[LG]][%c0]
// CHECK: scf.for %{{.*}} = %{{.*}} to %c128 step %c32
// CHECK: memref.store %c-1_i64, %[[R]]
// CHECK: memref.store %c-1_i32, %[[S]]
// CHECK: gpu.barrier
// 2. The control words: hand, free count, budget, memo (6), excess (7).
// CHECK: memref.load %[[CTL]][%c0]
// CHECK: memref.load %[[CTL]][%c1]
// CHECK: memref.atomic_rmw ori %c2_i32, %[[ST]]
// CHECK: memref.load %[[CTL]][%c2]
// CHECK: memref.load %[[CTL]][%c6]
// CHECK: memref.load %[[CTL]][%c7]
// 3. Per append: its words, a bad host row (4), the aged row's slot.
// CHECK: scf.for
// CHECK: memref.load %[[L]][%{{.*}}, %c0]
// CHECK: memref.load %[[L]][%{{.*}}, %c1]
// CHECK: memref.atomic_rmw ori %c4_i32, %[[ST]]
// CHECK: memref.load %[[M]]
// The first thread's decisions, read by the warp after a barrier.
// CHECK: gpu.barrier
// The owner scan (the warp), only while the memo holds the step (word 9):
// lane l reads hot row t + l, a ballot of those in the range; a trip with
// one ends it; none resets the memo (first thread).
// CHECK: %[[SCAN:.*]] = memref.load %[[SC]][%c9]
// CHECK: %[[SCANS:.*]] = arith.cmpi ne, %[[SCAN]], %c0_i32
// CHECK: scf.if %[[SCANS]]
// CHECK: scf.while (%{{.*}} = %c0_i32, %{{.*}} = %c0_i32) : (i32, i32) -> (i32, i32)
// CHECK: arith.cmpi slt, %{{.*}}, %c2048_i32
// CHECK: arith.cmpi eq, %{{.*}}, %c0_i32
// CHECK: } do {
// CHECK: ^bb0(%[[T:.*]]: i32, %{{.*}}: i32):
// CHECK: %[[AT:.*]] = arith.addi %[[T]], %[[LANE:[0-9]+]] : i32
// CHECK: %[[VALID:.*]] = arith.cmpi slt, %[[AT]], %c2048_i32
// CHECK: memref.load %[[H]]
// CHECK: %[[INRANGE:.*]] = arith.andi %[[VALID]],
// CHECK-NEXT: %[[OWNERS:.*]] = nvvm.vote.sync ballot %c-1_i32, %[[INRANGE]] -> i32
// CHECK: %[[NEXTT:.*]] = arith.addi %[[T]], %c32_i32
// CHECK: scf.yield %[[NEXTT]], %[[OWNERS]]
// CHECK: memref.store %c0_i32, %[[SC]][%c3]
// The slot becomes hot; over the budget a release (10), a search unless the
// memo holds the step (11).
// CHECK: memref.store %{{.*}}, %[[H]]
// CHECK: memref.store %c1_i32, %[[SC]][%c10]
// CHECK: memref.store %{{.*}}, %[[SC]][%c11]
// CHECK: gpu.barrier
// The CLOCK search (the warp): two laps at most, 32 slots a trip from the
// hand; candidates hot with an earlier last use; a ballot of the
// unreferenced ones, the victim its lowest lane; the referenced lanes before
// it cleared; a barrier a trip.
// CHECK: %[[SEARCH:.*]] = memref.load %[[SC]][%c11]
// CHECK: %[[SEARCHES:.*]] = arith.cmpi ne, %[[SEARCH]], %c0_i32
// CHECK: scf.if %[[SEARCHES]]
// CHECK: %[[HAND:.*]] = memref.load %[[SC]][%c0]
// CHECK: scf.while (%{{.*}} = %c0_i32, %{{.*}} = %c-1_i32) : (i32, i32) -> (i32, i32)
// CHECK: arith.cmpi slt, %{{.*}}, %c4096_i32
// CHECK: } do {
// CHECK: ^bb0(%[[K:.*]]: i32, %{{.*}}: i32):
// CHECK: %[[POS:.*]] = arith.addi %[[K]], %[[LANE]] : i32
// CHECK: arith.cmpi slt, %[[POS]], %c4096_i32
// CHECK: %[[RAW:.*]] = arith.addi %[[HAND]], %[[POS]]
// CHECK: arith.remui %[[RAW]], %c2048_i32
// CHECK: %[[LAST:.*]] = memref.load %[[REC]][%{{.*}}, %c0]
// CHECK: arith.cmpi ult, %[[LAST]]
// CHECK: memref.load %[[H]]
// CHECK: %[[CL:.*]] = memref.load %[[C]]
// CHECK: %[[UNREF:.*]] = arith.cmpi eq, %[[LAST]], %[[CL]]
// CHECK: %[[TAKEN:.*]] = arith.andi %{{.*}}, %[[UNREF]]
// CHECK-NEXT: %[[VOTES:.*]] = nvvm.vote.sync ballot %c-1_i32, %[[TAKEN]] -> i32
// CHECK: %[[LOWEST:.*]] = "llvm.intr.cttz"(%[[VOTES]]) <{is_zero_poison = false}>
// CHECK: %[[BEFORE:.*]] = arith.cmpi ult, %[[LANE]], %[[LOWEST]]
// CHECK: %[[CHANCE:.*]] = arith.andi %{{.*}}, %[[BEFORE]]
// CHECK: scf.if %[[CHANCE]]
// CHECK: memref.store %[[LAST]], %[[C]]
// CHECK: gpu.barrier
// CHECK: %[[VK:.*]] = arith.addi %[[HAND]], %[[K]]
// CHECK: %[[VAT:.*]] = arith.addi %[[VK]], %[[LOWEST]]
// CHECK: %[[VSLOT:.*]] = arith.remui %[[VAT]], %c2048_i32
// CHECK: %[[SOME:.*]] = arith.cmpi ne, %[[VOTES]], %c0_i32
// CHECK: %[[VICTIM:.*]] = arith.select %[[SOME]], %[[VSLOT]], %c-1_i32
// CHECK: %[[NEXTK:.*]] = arith.addi %[[K]], %c32_i32
// CHECK: scf.yield %[[NEXTK]], %[[VICTIM]]
// The hand right after the victim (or back where it was), the victim (12); a
// failed search sets the memo.
// CHECK: memref.store %{{.*}}, %[[SC]][%c0]
// CHECK: memref.store %{{.*}}, %[[SC]][%c12]
// CHECK: memref.store %{{.*}}, %[[SC]][%c3]
// CHECK: gpu.barrier
// The leaving row: unmapped, not hot, pushed.
// CHECK: memref.store %c-1_i32, %[[M]]
// CHECK: memref.store %c-1_i64, %[[H]]
// CHECK: memref.store %{{.*}}, %[[F]]
// The new row: the stack's top, mapped, stamped [step, 0], referenced.
// CHECK: memref.load %[[F]]
// CHECK: memref.store %{{.*}}, %[[M]]
// CHECK: memref.store %{{.*}}, %[[REC]][%{{.*}}, %c0]
// CHECK: memref.store %c0_i32, %[[REC]][%{{.*}}, %c1]
// CHECK: memref.store %c-1_i32, %[[C]]
// 4. The list of mapped new rows; the control words.
// CHECK: scf.for
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
