// dhs.place_rows: one thread per 16-byte chunk of a placed token copies it
// from the mapped host store into its HBM slot; the token's first chunk
// records the slot (or -1) in the pool's residency map, or reports a host row
// outside the store (status 4) or a slot outside HBM (status 2).
// RUN: dhs-opt %s --dhs-lower-to-gpu --canonicalize --cse | FileCheck %s
// RUN: rm -rf %t && dhs-compile %s -o %t
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/place_rows.ptx -o %t/a.cubin %}
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK
// LINK: link: OK

// CHECK-LABEL: func.func @step
// CHECK: %[[MAP:.*]] = dhs.pool_map of %{{.*}} : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?> -> memref<?xi32>
// 1024 rows x 164 chunks of 16 bytes over 256 threads a block: 656 blocks.
// CHECK: gpu.launch_func @place_rows::@place_rows blocks in (%{{.*}}, %{{.*}}, %{{.*}}) threads in
// CHECK-SAME: %[[MAP]] : memref<?xi32>, %{{.*}} : memref<1024xi64>, %{{.*}} : memref<1024xi32>
// CHECK-LABEL: gpu.func @place_rows
// CHECK-SAME: (%[[HBM:.*]]: memref<?x4x656xi8>, %[[HOST:.*]]: memref<?x4x656xi8>, %[[M:.*]]: memref<?xi32>
// CHECK: memref.atomic_rmw ori
// CHECK: memref.store %{{.*}}, %[[M]][%{{.*}}] : memref<?xi32>
// CHECK: vector.load %[[HOST]]
// CHECK: vector.store %{{.*}}, %[[HBM]]

// MANIFEST: "role": "kv_pool"
// MANIFEST: "role": "place_rows"
// MANIFEST: "role": "place_slots"
// MANIFEST: "grid": [
// MANIFEST-NEXT: 656,
// MANIFEST: "source": "pool_map"
func.func @step(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>,
                %rows: memref<1024xi64>, %slots: memref<1024xi32>) {
  dhs.place_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      rows(%rows : memref<1024xi64>) slots(%slots : memref<1024xi32>)
  return
}
