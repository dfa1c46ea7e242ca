// dhs.resolve as a kernel: a thread per selection looks its host row
// (history_start + id) up in the pool's residency map; bad ids are reported
// and resolve to -1. Unless the pool's step log is empty, hits stamp the
// pool's replacement state (an atomic exchange each: the first hit of a slot
// in the step also moves the last use to the previous one) and each block
// appends its first hits and its misses to the log, at bases one thread
// reserves with one global atomic per count.
// RUN: dhs-opt %s --dhs-lower-to-gpu --canonicalize --cse | FileCheck %s
// RUN: rm -rf %t && dhs-compile %s -o %t
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/resolve.ptx -o %t/k.cubin %}
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json

// CHECK-LABEL: func.func @step
// CHECK-DAG: %[[LOG:.*]] = dhs.pool_log of %{{.*}} -> memref<?xi32>
// CHECK-DAG: %[[RECENCY:.*]] = dhs.pool_recency of %{{.*}} -> memref<?x2xi32>
// CHECK-DAG: %[[MAP:.*]] = dhs.pool_map of %{{.*}} -> memref<?xi32>
// CHECK: gpu.launch_func @resolve::@resolve blocks in (%{{.*}}, %{{.*}}, %{{.*}}) threads in (%c256, {{.*}} args(%{{.*}} : memref<4x2x256xi32>, %[[MAP]] : memref<?xi32>, %{{.*}} : memref<4xi64>, %{{.*}} : memref<4xi32>, %{{.*}} : memref<4x2x256xi32>, %[[RECENCY]] : memref<?x2xi32>, %[[LOG]] : memref<?xi32>, %{{.*}} : memref<1xi32>) {dhs.op = "resolve", dhs.roles = ["row_ids", "residency_map", "history_start", "history_len", "slots", "replacement_state", "step_log", "status"]}
// CHECK: gpu.func @resolve({{.*}}%[[R:[a-z0-9]+]]: memref<?x2xi32>, %[[L:[a-z0-9]+]]: memref<?xi32>, %{{[a-z0-9]+}}: memref<1xi32>) workgroup(%[[COUNTS:.*]] : memref<5xi32, #gpu.address_space<workgroup>>
// CHECK: scf.if
// CHECK: memref.load %{{.*}} : memref<?xi32>
// CHECK: memref.atomic_rmw ori
// CHECK: memref.store %{{.*}} : memref<4x2x256xi32>
// The booking: an empty log records nothing.
// CHECK: %[[WORDS:.*]] = memref.dim %[[L]], %c0
// CHECK: arith.cmpi ne, %[[WORDS]], %c0
// CHECK: gpu.barrier
// CHECK: %[[STEP:.*]] = memref.load %[[L]][%c0]
// CHECK: %[[OLD:.*]] = memref.atomic_rmw assign %[[STEP]], %[[R]][%{{.*}}, %c0]
// CHECK: arith.cmpi ne, %[[OLD]], %[[STEP]]
// CHECK: memref.store %[[OLD]], %[[R]][%{{.*}}, %c1]
// CHECK: memref.atomic_rmw addi %{{.*}}, %[[COUNTS]]
// CHECK: gpu.barrier
// CHECK: memref.atomic_rmw addi %{{.*}}, %[[L]][%c1]
// CHECK: memref.atomic_rmw addi %{{.*}}, %[[L]][%c2]
// CHECK: memref.atomic_rmw addi %{{.*}}, %[[L]][%c3]
// CHECK: gpu.barrier
// Hit slots from word 4, (lane, id) misses from word 4 + 2048.
// CHECK: arith.cmpi slt, %{{.*}}, %c2052_i64
// CHECK: memref.store %{{.*}}, %[[L]]
// CHECK: memref.store %{{.*}}, %[[L]]
// CHECK: memref.store %{{.*}}, %[[L]]
// MANIFEST: "op": "resolve"
// MANIFEST: "source": "pool_map"
// MANIFEST: "source": "pool_recency"
// MANIFEST: "source": "pool_log"
func.func @step(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = ?, host = ?>,
                %rows: memref<4x2x256xi32>, %start: memref<4xi64>,
                %len: memref<4xi32>, %slots: memref<4x2x256xi32>) {
  dhs.resolve pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = ?, host = ?>)
      rows(%rows : memref<4x2x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>) into(%slots : memref<4x2x256xi32>)
  return
}
