// The write-back ring through a step's kernels (dhs.pool_write_back): resolve
// gives each missing selection its ring entry (its index in the step log's
// misses while the ring, whose size the runtime picks, has room; -1
// otherwise), union_missing lists each row's entry beside it, sort_rows
// moves the entries with their rows (a 64-bit word each: the row above its
// entry), plan_promotions puts each promotion's entry beside it in the plan
// (-1 for releases and padding), and place_rows copies a row from its ring
// entry (HBM to HBM) or, without one, from the host store.
// RUN: dhs-opt %s --dhs-lower-to-gpu --canonicalize --cse | FileCheck %s
// RUN: rm -rf %t && dhs-compile %s -o %t
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/resolve.ptx -o %t/a.cubin %}
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/sort_rows.ptx -o %t/a.cubin %}
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/plan_promotions.ptx -o %t/a.cubin %}
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/place_rows.ptx -o %t/a.cubin %}
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK
// LINK: link: OK

// CHECK-LABEL: func.func @step
// CHECK: %[[RING:.*]] = dhs.pool_write_back of %{{.*}} -> memref<?x1x656xi8>
// CHECK: gpu.launch_func @resolve::@resolve {{.*}} %[[RING]] : memref<?x1x656xi8>
// CHECK-SAME: dhs.roles = ["row_ids", "residency_map", "history_start", "history_len", "slots", "write_back", "write_back_ring",
// CHECK: gpu.launch_func @union_missing::@union_missing
// CHECK-SAME: dhs.roles = ["row_ids", "slots", "missing", "remap", "write_back", "missing_sources"]
// The sort's 64-bit words: 256 rows padded to 256, 2 KB of dynamic shared memory.
// CHECK: gpu.launch_func @sort_rows::@sort_rows blocks in (%c4, %c1, %c1) threads in (%c128, %c1, %c1) dynamic_shared_memory_size %c2048_i32
// CHECK-SAME: dhs.roles = ["missing", "fetched_rows", "missing_sources", "fetched_sources"]
// CHECK: gpu.launch_func @plan_promotions::@plan_promotions
// CHECK-SAME: "place_rows", "place_slots", "fetched_sources", "place_sources"
// CHECK: gpu.launch_func @place_rows::@place_rows {{.*}} %[[RING]] : memref<?x1x656xi8>
// CHECK-SAME: dhs.roles = ["hbm_tier", "host_tier", "residency_map", "place_rows", "place_slots", "place_sources", "write_back_ring",

// resolve: a miss's entry is its index in the log's misses (the block's
// base + its place), kept while below the ring's entries.
// CHECK-LABEL: gpu.func @resolve
// CHECK-SAME: %[[ENTRIES:[a-z0-9]+]]: memref<4x1x256xi32>, %[[R:[a-z0-9]+]]: memref<?x1x656xi8>
// CHECK: %[[SIZE:.*]] = memref.dim %[[R]], %c0 : memref<?x1x656xi8>
// CHECK: %[[ROOM:.*]] = arith.index_cast %[[SIZE]] : index to i64
// CHECK: %[[BASE:.*]] = memref.load %{{.*}}[%c4] : memref<5xi32, #gpu.address_space<workgroup>>
// CHECK: %[[INDEX:.*]] = arith.addi %[[BASE]], %{{.*}} : i32
// CHECK: %[[WIDE:.*]] = arith.extui %[[INDEX]] : i32 to i64
// CHECK: %[[FITS:.*]] = arith.cmpi slt, %[[WIDE]], %[[ROOM]] : i64
// CHECK: %[[KEPT:.*]] = arith.andi %{{.*}}, %[[FITS]] : i1
// CHECK: %[[ENTRY:.*]] = arith.select %[[KEPT]], %[[INDEX]], %c-1_i32 : i32
// CHECK: memref.store %[[ENTRY]], %[[ENTRIES]][%{{.*}}, %c0, %{{.*}}] : memref<4x1x256xi32>

// union_missing: the owner of a row lists it and its entry, others -1.
// CHECK-LABEL: gpu.func @union_missing
// CHECK-SAME: %[[UNION:[a-z0-9]+]]: memref<4x256xi32>, %{{[a-z0-9]+}}: memref<4x1x256xi32>, %{{[a-z0-9]+}}: memref<4x1x256xi32>, %[[SOURCES:[a-z0-9]+]]: memref<4x256xi32>
// CHECK: %[[LISTED:.*]] = arith.select %[[OWNS:[0-9a-z_]+]], %{{.*}}, %c-1_i32 : i32
// CHECK-NEXT: memref.store %[[LISTED]], %[[UNION]]
// CHECK-NEXT: %[[WRITTEN:.*]] = memref.load %{{.*}} : memref<4x256xi32>
// CHECK-NEXT: %[[SOURCE:.*]] = arith.select %[[OWNS]], %[[WRITTEN]], %c-1_i32 : i32
// CHECK-NEXT: memref.store %[[SOURCE]], %[[SOURCES]]

// sort_rows: row above entry in one word, sorted as unsigned words; a -1
// row's entry written as -1.
// CHECK-LABEL: gpu.func @sort_rows
// CHECK: %[[WORDS:.*]] = memref.view %{{.*}}[%c0][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<256xi64, #gpu.address_space<workgroup>>
// CHECK: arith.shli %{{.*}}, %c32_i64 : i64
// CHECK: arith.ori
// CHECK: memref.store %{{.*}}, %[[WORDS]]
// CHECK: arith.cmpi ugt, %{{.*}}, %{{.*}} : i64
// CHECK: %[[HIGH:.*]] = arith.shrui %{{.*}}, %c32_i64 : i64
// CHECK: %[[ROW:.*]] = arith.trunci %[[HIGH]] : i64 to i32
// CHECK: %[[VALUE:.*]] = arith.trunci %{{.*}} : i64 to i32
// CHECK: %[[NONE:.*]] = arith.cmpi eq, %[[ROW]], %c-1_i32 : i32
// CHECK: arith.select %[[NONE]], %c-1_i32, %[[VALUE]] : i32

// place_rows: the ring's entry when the row has one, else the host store.
// CHECK-LABEL: gpu.func @place_rows
// CHECK-SAME: (%[[HBM:[a-z0-9]+]]: memref<?x1x656xi8>, %[[HOST:[a-z0-9]+]]: memref<?x1x656xi8>, %{{[a-z0-9]+}}: memref<?xi32>, %{{[a-z0-9]+}}: memref<2048xi64>, %{{[a-z0-9]+}}: memref<2048xi32>, %[[PLACED:[a-z0-9]+]]: memref<2048xi32>, %[[FROM:[a-z0-9]+]]: memref<?x1x656xi8>
// CHECK: %[[ENTRY:.*]] = memref.load %[[PLACED]][%{{.*}}] : memref<2048xi32>
// CHECK: %[[HAS:.*]] = arith.cmpi sge, %[[ENTRY]], %c0_i32 : i32
// CHECK: scf.if %[[HAS]] -> (vector<16xi8>)
// CHECK: vector.load %[[FROM]]
// CHECK: } else {
// CHECK: vector.load %[[HOST]]
// CHECK: vector.store %{{.*}}, %[[HBM]]

// MANIFEST: "role": "write_back"
// MANIFEST: "role": "missing_sources"
// MANIFEST: "role": "fetched_sources"
// MANIFEST: "role": "place_sources"
// MANIFEST: "kernel": "resolve"
// MANIFEST: "role": "write_back_ring"
// MANIFEST-NEXT: "shape": [
// MANIFEST-NEXT: -1,
// MANIFEST-NEXT: 1,
// MANIFEST-NEXT: 656
// MANIFEST-NEXT: ],
// MANIFEST-NEXT: "source": "pool_write_back"
func.func @step(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 2048, host = ?>,
                %rows: memref<4x1x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
                %slots: memref<4x1x256xi32>, %entries: memref<4x1x256xi32>,
                %union: memref<4x256xi32>, %remap: memref<4x1x256xi32>, %sources: memref<4x256xi32>,
                %fetched: memref<4x256xi32>, %fetched_sources: memref<4x256xi32>,
                %hot: memref<2048xi64>, %cleared: memref<2048xi32>, %free: memref<2048xi32>,
                %control: memref<8xi32>, %plan_rows: memref<2048xi64>, %plan_slots: memref<2048xi32>,
                %plan_sources: memref<2048xi32>) {
  dhs.resolve pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 2048, host = ?>)
      rows(%rows : memref<4x1x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      into(%slots : memref<4x1x256xi32>) write_back(%entries : memref<4x1x256xi32>)
  dhs.union_missing rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      into(%union, %remap : memref<4x256xi32>, memref<4x1x256xi32>)
      write_back(%entries : memref<4x1x256xi32>) sources(%sources : memref<4x256xi32>)
  dhs.sort_rows rows(%union : memref<4x256xi32>) into(%fetched : memref<4x256xi32>)
      carry(%sources : memref<4x256xi32>) into(%fetched_sources : memref<4x256xi32>)
  dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 2048, host = ?>)
      fetched(%fetched : memref<4x256xi32>) history(%start : memref<4xi64>)
      hot(%hot : memref<2048xi64>) cleared(%cleared : memref<2048xi32>)
      free(%free : memref<2048xi32>) control(%control : memref<8xi32>)
      into(%plan_rows, %plan_slots : memref<2048xi64>, memref<2048xi32>)
      sources(%fetched_sources : memref<4x256xi32>) into(%plan_sources : memref<2048xi32>)
      replacement = clock
  dhs.place_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 2048, host = ?>)
      rows(%plan_rows : memref<2048xi64>) slots(%plan_slots : memref<2048xi32>)
      sources(%plan_sources : memref<2048xi32>)
  return
}
