// dhs.plan_promotions: one CTA of 1024 threads decides a step's CLOCK
// promotions over the device residency state. All threads count each
// lane's fetched rows (a shared atomic min of the index of each -1 that
// opens a run of them: the first -1) and thread 0 ranks the lanes; ranks
// below min(budget, free count) take the free stack's slots; two laps over the slot table from the
// hand flag the candidates (hot, last use < the log's step) unreferenced, then
// referenced, and a block-wide exclusive scan (warp shuffles, then the warps'
// sums in shared memory) ranks the victims; a shared atomic max keeps the
// last victim, from which the new hand follows. Its list is what the
// place_rows launch after it carries out (the same two buffers). Thread 0
// reads the step's status word first: a failed step plans nothing. The
// control words out: hand, free count, promoted, released, listed (before
// the cap), the noVictimStep memo and the excess.
// RUN: dhs-opt %s --dhs-lower-to-gpu --canonicalize --cse | FileCheck %s
// RUN: rm -rf %t && dhs-compile %s -o %t
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/plan_promotions.ptx -o %t/a.cubin %}
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK
// LINK: link: OK

// CHECK-LABEL: func.func @step
// CHECK-SAME: %[[FETCHED:[a-z0-9]+]]: memref<4x128xi32>, %[[START:[a-z0-9]+]]: memref<4xi64>, %[[HOT:[a-z0-9]+]]: memref<2048xi64>, %[[CLEARED:[a-z0-9]+]]: memref<2048xi32>, %[[FREE:[a-z0-9]+]]: memref<2048xi32>, %[[CONTROL:[a-z0-9]+]]: memref<8xi32>, %[[ROWS:[a-z0-9]+]]: memref<1024xi64>, %[[SLOTS:[a-z0-9]+]]: memref<1024xi32>
// CHECK-DAG: %[[LOG:.*]] = dhs.pool_log of %{{.*}} -> memref<?xi32>
// CHECK-DAG: %[[RECENCY:.*]] = dhs.pool_recency of %{{.*}} -> memref<?x2xi32>
// CHECK-DAG: %[[TABLE:.*]] = dhs.group_bindings : memref<?x?xi64>
// One CTA of 1024 threads (a group; the runtime sets the grid's z to the
// groups it plans in one launch).
// CHECK: gpu.launch_func @plan_promotions::@plan_promotions blocks in (%c1, %c1, %c1) threads in (%c1024, %c1, %c1) args(%[[FETCHED]] : memref<4x128xi32>, %[[START]] : memref<4xi64>, %[[HOT]] : memref<2048xi64>, %[[CLEARED]] : memref<2048xi32>, %[[FREE]] : memref<2048xi32>, %[[CONTROL]] : memref<8xi32>, %[[ROWS]] : memref<1024xi64>, %[[SLOTS]] : memref<1024xi32>, %[[RECENCY]] : memref<?x2xi32>, %[[LOG]] : memref<?xi32>, %{{.*}} : memref<1xi32>, %[[TABLE]] : memref<?x?xi64>) {dhs.op = "plan_promotions", dhs.roles = ["fetched_rows", "history_start", "hot_rows", "clock_cleared", "free_stack", "promotion_control", "place_rows", "place_slots", "replacement_state", "step_log", "status", "group_bindings"]}
// The decisions carried out by place_rows from the same list.
// CHECK: gpu.launch_func @place_rows::@place_rows {{.*}} %[[ROWS]] : memref<1024xi64>, %[[SLOTS]] : memref<1024xi32>

// Per lane a count and a first rank, the warps' sums, the scalars.
// CHECK-LABEL: gpu.func @plan_promotions
// CHECK-SAME: (%[[F0:[a-z0-9]+]]: memref<4x128xi32>, {{.*}}%[[H0:[a-z0-9]+]]: memref<2048xi64>, %[[C0:[a-z0-9]+]]: memref<2048xi32>, {{.*}}%[[CTL0:[a-z0-9]+]]: memref<8xi32>, {{.*}}%[[R0:[a-z0-9]+]]: memref<?x2xi32>, %[[L0:[a-z0-9]+]]: memref<?xi32>, %[[ST0:[a-z0-9]+]]: memref<1xi32>, %[[TABLE:[a-z0-9]+]]: memref<?x?xi64>)
// CHECK-SAME: workgroup(%[[COUNTS:[a-z0-9]+]] : memref<4xi32, #gpu.address_space<workgroup>> {{.*}}, %[[FIRSTS:[a-z0-9]+]] : memref<4xi32, #gpu.address_space<workgroup>> {{.*}}, %[[SUMS:.*]] : memref<32xi32, #gpu.address_space<workgroup>> {{.*}}, %[[SCALARS:.*]] : memref<9xi32, #gpu.address_space<workgroup>>
// CHECK-SAME: known_block_size = array<i32: 1024, 1, 1>
// The CTA's group (z) and its buffers: each parameter moved by the
// group's row of the table, bytes over its element size.
// CHECK: %[[GROUP:.*]] = gpu.block_id z
// CHECK: %[[D0:.*]] = memref.load %[[TABLE]][%[[GROUP]], %c0]
// CHECK: %[[E0:.*]] = arith.divsi %[[D0]], %c4_i64
// CHECK: %[[O0:.*]] = arith.index_cast %[[E0]]
// CHECK: %[[F:.*]] = memref.reinterpret_cast %[[F0]] to offset: [%[[O0]]], sizes: [4, 128], strides: [128, 1] : memref<4x128xi32> to memref<4x128xi32, strided<[128, 1], offset: ?>>
// CHECK: %[[H:.*]] = memref.reinterpret_cast %[[H0]] to offset: {{.*}} : memref<2048xi64> to
// CHECK: %[[C:.*]] = memref.reinterpret_cast %[[C0]] to offset: {{.*}} : memref<2048xi32> to
// CHECK: %[[CTL:.*]] = memref.reinterpret_cast %[[CTL0]] to offset: {{.*}} : memref<8xi32> to
// CHECK: %[[R:.*]] = memref.reinterpret_cast %[[R0]] to offset: {{.*}} : memref<?x2xi32> to
// CHECK: %[[L:.*]] = memref.reinterpret_cast %[[L0]] to offset: {{.*}} : memref<?xi32> to
// CHECK: %[[ST:.*]] = memref.reinterpret_cast %[[ST0]] to offset: {{.*}} : memref<1xi32> to
// The step from the log (an empty log: no candidates).
// CHECK: %[[WORDS:.*]] = memref.dim %[[L]], %c0
// CHECK: %[[STEP:.*]] = scf.if
// CHECK: memref.load %[[L]][%c0]
// 0: the gate, before this launch reports anything: a non-zero status word.
// CHECK: %[[STATUS:.*]] = memref.load %[[ST]][%c0] : memref<1xi32, strided<[1], offset: ?>>
// CHECK: %[[FAILED:.*]] = arith.cmpi ne, %[[STATUS]], %c0_i32
// CHECK: %[[FAILED32:.*]] = arith.extui %[[FAILED]]
// CHECK: memref.store %[[FAILED32]], %[[SCALARS]][%c8]
// A: counts (a lane's rows up to the first -1), then thread 0's ranks and
// control words. A thread per lane sets its count to `listed` (128) ...
// CHECK: %[[LANES:.*]] = arith.cmpi ult, %[[TID:.*]], %c4 : index
// CHECK: scf.if %[[LANES]]
// CHECK-NEXT: memref.store %c128_i32, %[[COUNTS]][%[[TID]]]
// CHECK: gpu.barrier
// ... every thread walks the 512 fetched rows, 4 x 1024 apart a trip: each
// row id and the one before it in its lane, all loaded before any is used ...
// CHECK: scf.for %[[ITEM:.*]] = %[[TID]] to %c512 step %c4096 {
// CHECK-NEXT: %[[LANE:.*]] = arith.divui %[[ITEM]], %c128
// CHECK-NEXT: %[[J:.*]] = arith.remui %[[ITEM]], %c128
// CHECK-NEXT: %[[JM1:.*]] = arith.subi %[[J]], %c1
// CHECK-NEXT: %[[OPENS_LANE:.*]] = arith.cmpi eq, %[[J]], %c0
// CHECK-NEXT: %[[JL:.*]] = arith.select %[[OPENS_LANE]], %[[J]], %[[JM1]]
// CHECK-NEXT: %[[ID:.*]] = memref.load %[[F]][%[[LANE]], %[[J]]]
// CHECK-NEXT: %[[LEFT:.*]] = memref.load %[[F]][%[[LANE]], %[[JL]]]
// CHECK-NEXT: arith.addi %[[ITEM]], %c1024
// CHECK-COUNT-6: memref.load %[[F]]
// CHECK-NOT: scf.if
// ... and where a -1 opens a run of them (the lane's first row, or a row id
// before it), takes the shared atomic min of its index into the lane's count.
// CHECK: %[[ROW_LEFT:.*]] = arith.cmpi sge, %[[LEFT]], %c0_i32
// CHECK-NEXT: %[[OPENS:.*]] = arith.ori %[[OPENS_LANE]], %[[ROW_LEFT]]
// CHECK-NEXT: %[[MISSING:.*]] = arith.cmpi slt, %[[ID]], %c0_i32
// CHECK-NEXT: %[[BOUNDARY:.*]] = arith.andi %[[MISSING]], %[[OPENS]]
// CHECK-NEXT: scf.if %[[BOUNDARY]] {
// CHECK-NEXT: %[[J32:.*]] = arith.index_cast %[[J]] : index to i32
// CHECK-NEXT: memref.atomic_rmw mins %[[J32]], %[[COUNTS]][%[[LANE]]]
// CHECK-COUNT-3: memref.atomic_rmw mins %{{.*}}, %[[COUNTS]]
// CHECK: gpu.barrier
// CHECK: %[[GATE:.*]] = memref.load %[[SCALARS]][%c8]
// CHECK: %[[GATED:.*]] = arith.cmpi ne, %[[GATE]], %c0_i32
// The ranks count at most `promotions` (here the list's 128) of a lane.
// CHECK: arith.minsi %{{.*}}, %c128_i32
// CHECK: memref.load %[[CTL]][%c0]
// CHECK: memref.load %[[CTL]][%c1]
// CHECK: memref.load %[[CTL]][%c2]
// Bad control words are reported only in a step that has not failed.
// CHECK: %[[OK:.*]] = arith.cmpi eq, %[[GATE]], %c0_i32
// CHECK: %[[REPORT:.*]] = arith.andi %{{.*}}, %[[OK]]
// CHECK: scf.if %[[REPORT]]
// CHECK: memref.atomic_rmw ori
// CHECK: %[[NONE:.*]] = arith.ori %{{.*}}, %[[GATED]]
// CHECK: arith.select %[[NONE]], %c0_i32
// The memo: no victims searched when it holds this (non-zero) step.
// CHECK: %[[MEMO:.*]] = memref.load %[[CTL]][%c6]
// CHECK: arith.cmpi eq, %[[MEMO]], %[[STEP]]
// CHECK: arith.cmpi ne, %[[STEP]], %c0_i32
// CHECK: gpu.barrier
// B: 4 fetched rows a trip, their row ids, history starts, counts and first
// ranks loaded before the first host row is written.
// CHECK: scf.for %{{.*}} = %[[TID]] to %c512 step %c4096 {
// CHECK-COUNT-4: memref.load %[[F]]
// CHECK-NOT: memref.store
// CHECK: memref.store %{{.*}}, %{{.*}} : memref<1024xi64, strided<[1], offset: ?>>
// CHECK: gpu.barrier
// C: the laps, 1024 slots a chunk while victims are still wanted; a
// candidate is hot and its last use is before the step.
// CHECK: %[[LAP0:.*]]:2 = scf.while (%[[AT:.*]] = %c0_i32, %[[RANKED:.*]] = %c0_i32)
// CHECK: %[[STILL:.*]] = arith.cmpi slt, %[[RANKED]], %[[WANTED:.*]] : i32
// CHECK: %[[INSIDE:.*]] = arith.cmpi slt, %[[AT]], %[[END:.*]] : i32
// CHECK: %[[GOES:.*]] = arith.andi %[[INSIDE]], %[[STILL]] : i1
// CHECK: scf.condition(%[[GOES]])
// CHECK: memref.load %[[H]]
// CHECK: memref.load %[[R]][%{{.*}}, %c0]
// CHECK: arith.cmpi ult
// CHECK: memref.load %[[C]]
// CHECK: gpu.shuffle  up
// CHECK: gpu.shuffle  up
// CHECK: gpu.shuffle  up
// CHECK: gpu.shuffle  up
// CHECK: gpu.shuffle  up
// CHECK: memref.store %{{.*}}, %[[SUMS]]
// CHECK: gpu.barrier
// CHECK: memref.atomic_rmw maxs %{{.*}}, %[[SCALARS]][%c5]
// CHECK: gpu.barrier
// CHECK: arith.addi %{{.*}}, %c1024_i32 : i32
// The second lap, from the victims the first ranked.
// CHECK: scf.while (%{{.*}} = %c0_i32, %{{.*}} = %[[LAP0]]#1)
// CHECK: gpu.shuffle  up
// E: the new hand, the free count left, the excess (+ F), the memo (the
// step when fewer victims than wanted were found), and the counts.
// CHECK: memref.store %{{.*}}, %[[CTL]][%c0]
// CHECK: memref.store %{{.*}}, %[[CTL]][%c1]
// CHECK: %[[EXCESS:.*]] = memref.load %[[CTL]][%c7]
// CHECK: %[[MORE:.*]] = arith.addi %[[EXCESS]]
// CHECK: memref.store %[[MORE]], %[[CTL]][%c7]
// CHECK: %[[NEEDED:.*]] = memref.load %[[SCALARS]][%c6]
// CHECK: arith.cmpi slt, %{{.*}}, %[[NEEDED]]
// CHECK: memref.store %[[STEP]], %[[CTL]][%c6]
// CHECK: memref.store %{{.*}}, %[[CTL]][%c3]
// CHECK: memref.store %{{.*}}, %[[CTL]][%c4]
// CHECK: %[[LISTED:.*]] = memref.load %[[SCALARS]][%c7]
// CHECK: memref.store %[[LISTED]], %[[CTL]][%c5]
// CHECK: gpu.return

// MANIFEST: "role": "kv_pool"
// MANIFEST: "role": "fetched_rows"
// MANIFEST: "role": "history_start"
// MANIFEST: "role": "hot_rows"
// MANIFEST: "role": "clock_cleared"
// MANIFEST: "role": "free_stack"
// MANIFEST: "role": "promotion_control"
// MANIFEST: "role": "place_rows"
// MANIFEST: "role": "place_slots"
// MANIFEST: "op": "plan_promotions"
// MANIFEST: "source": "pool_recency"
// MANIFEST: "source": "pool_log"
// MANIFEST: "op": "place_rows"
func.func @step(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>,
                %fetched: memref<4x128xi32>, %start: memref<4xi64>,
                %hot: memref<2048xi64>, %cleared: memref<2048xi32>, %free: memref<2048xi32>,
                %control: memref<8xi32>, %rows: memref<1024xi64>, %slots: memref<1024xi32>) {
  dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      fetched(%fetched : memref<4x128xi32>) history(%start : memref<4xi64>)
      hot(%hot : memref<2048xi64>) cleared(%cleared : memref<2048xi32>)
      free(%free : memref<2048xi32>) control(%control : memref<8xi32>)
      into(%rows, %slots : memref<1024xi64>, memref<1024xi32>) replacement = clock
  dhs.place_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      rows(%rows : memref<1024xi64>) slots(%slots : memref<1024xi32>)
  return
}
