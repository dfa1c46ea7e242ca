// dhs.place_rows: a warp per list entry copies the placed token from the
// mapped host store into its HBM slot, 16 bytes a lane (up to 2112 CTAs of 8
// warps, which stride over the rest of a longer list); lane 0 records the
// slot (or -1) in the pool's residency map and stamps a filled slot's
// replacement state with the step (word 0 of the pool's step log), or
// reports a host row outside the store (status 4) or a slot outside HBM
// (status 2).
// RUN: dhs-opt %s --dhs-lower-to-gpu --canonicalize --cse | FileCheck %s
// RUN: rm -rf %t && dhs-compile %s -o %t
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/place_rows.ptx -o %t/a.cubin %}
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK
// LINK: link: OK
// A list sized for a decision step's every promotion (524288 entries):
// 2112 CTAs, each warp striding over 16896-entry rounds.
// RUN: sed 's/1024xi/524288xi/g' %s | dhs-opt --dhs-lower-to-gpu --canonicalize --cse | FileCheck %s --check-prefix=LONG
// LONG: gpu.launch_func @place_rows::@place_rows blocks in (%c2112, %c1, %c1) threads in (%c256, %c1, %c1)
// LONG-LABEL: gpu.func @place_rows
// LONG: scf.for %{{.*}} = %{{.*}} to %c524288 step %c16896

// CHECK-LABEL: func.func @step
// CHECK-DAG: %[[LOG:.*]] = dhs.pool_log of %{{.*}} : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?> -> memref<?xi32>
// CHECK-DAG: %[[RECENCY:.*]] = dhs.pool_recency of %{{.*}} : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?> -> memref<?x2xi32>
// CHECK-DAG: %[[MAP:.*]] = dhs.pool_map of %{{.*}} : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?> -> memref<?xi32>
// 1024 entries over 8 warps a block: 128 blocks.
// CHECK: gpu.launch_func @place_rows::@place_rows blocks in (%{{.*}}, %{{.*}}, %{{.*}}) threads in
// CHECK-SAME: %[[MAP]] : memref<?xi32>, %{{.*}} : memref<1024xi64>, %{{.*}} : memref<1024xi32>, %[[RECENCY]] : memref<?x2xi32>, %[[LOG]] : memref<?xi32>, %{{.*}} : memref<1xi32>
// CHECK-LABEL: gpu.func @place_rows
// CHECK-SAME: (%[[HBM:[a-z0-9]+]]: memref<?x4x656xi8>, %[[HOST:[a-z0-9]+]]: memref<?x4x656xi8>, %[[M:[a-z0-9]+]]: memref<?xi32>, %{{[a-z0-9]+}}: memref<1024xi64>, %{{[a-z0-9]+}}: memref<1024xi32>, %[[R:[a-z0-9]+]]: memref<?x2xi32>, %[[L:[a-z0-9]+]]: memref<?xi32>
// A warp an entry: lane and warp of the thread.
// CHECK: %[[LANE:.*]] = arith.remui %{{.*}}, %c32 : index
// CHECK: %[[WARP:.*]] = arith.divui %{{.*}}, %c32 : index
// CHECK: scf.for %{{.*}} = %{{.*}} to %c1024 step %c1024
// Lane 0 reports and records.
// CHECK: arith.cmpi eq, %[[LANE]], %c0 : index
// CHECK: memref.atomic_rmw ori
// CHECK: memref.store %{{.*}}, %[[M]][%{{.*}}] : memref<?xi32>
// The step from the log, then [step, 0] into the slot's replacement state.
// CHECK: %[[STEP:.*]] = memref.load %[[L]][%{{.*}}] : memref<?xi32>
// CHECK: memref.store %[[STEP]], %[[R]][%{{.*}}, %c0] : memref<?x2xi32>
// CHECK: memref.store %c0_i32, %[[R]][%{{.*}}, %c1] : memref<?x2xi32>
// The lanes over the token's 164 chunks.
// CHECK: scf.for %{{.*}} = %[[LANE]] to %c164 step %c32
// CHECK: vector.load %[[HOST]]
// CHECK: vector.store %{{.*}}, %[[HBM]]

// MANIFEST: "role": "kv_pool"
// MANIFEST: "role": "place_rows"
// MANIFEST: "role": "place_slots"
// MANIFEST: "grid": [
// MANIFEST-NEXT: 128,
// MANIFEST: "source": "pool_map"
// MANIFEST: "source": "pool_recency"
// MANIFEST: "source": "pool_log"
func.func @step(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>,
                %rows: memref<1024xi64>, %slots: memref<1024xi32>) {
  dhs.place_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      rows(%rows : memref<1024xi64>) slots(%slots : memref<1024xi32>)
  return
}
