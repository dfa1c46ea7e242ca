// dhs.sparse_attention with write_back (the CUDA-core kernel at 16 heads,
// one-layer FP8 rows): the classifying threads look up a host row's ring entry (the CTAs
// of a query's first head block only: the others read the same rows), an
// entry outside the ring is reported (status 2) and not written; staging a
// tile stores each host chunk it loads into the entry as well, and the
// chunk no segment stages (the four scales, bytes 512-527) is copied after
// them. Its missing rows are not staged (no dhs.fetch): the kernel reads
// them itself.
// RUN: dhs-opt %s --dhs-lower-to-gpu --canonicalize --cse | FileCheck %s
// RUN: rm -rf %t && dhs-compile %s -o %t
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/sparse_attention.ptx -o %t/a.cubin %}
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK
// LINK: link: OK
// With 64 heads the tensor-core kernel writes back: each thread's producer
// looks up a host row's entry as it classifies the row (head block 0 only),
// carries it a tile with the row's chunks, and stores the chunks as loaded
// (11 of 16 bytes for an FP8 row; the scales' chunk by lane segment 0)
// into the entry once the tile buffer is free, before dequantizing them.
// RUN: sed 's/x16x/x64x/g' %s | dhs-opt --dhs-lower-to-gpu --canonicalize --cse \
// RUN:   | FileCheck %s --check-prefix=TC
// RUN: rm -rf %t.tc && sed 's/x16x/x64x/g' %s > %t.mlir && dhs-compile %t.mlir -o %t.tc
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t.tc/sparse_attention.ptx -o %t.tc/a.cubin %}
// TC-LABEL: gpu.func @sparse_attention(
// TC-SAME: %[[ENTRIES:[a-z0-9]+]]: memref<4x1x256xi32>, %[[R:[a-z0-9]+]]: memref<?x1x656xi8>, %{{[a-z0-9]+}}: memref<4x1x64x512xbf16>
// TC: memref.load %[[ENTRIES]][%block_id_x, %c0, %{{.*}}] : memref<4x1x256xi32>
// TC: memref.extract_aligned_pointer_as_index %[[R]]
// TC-COUNT-8: llvm.store %{{.*}}, %{{.*}} {alignment = 16 : i64} : vector<4xi32>, !llvm.ptr<1>
// TC: scf.if
// TC: llvm.store %{{.*}}, %{{.*}} {alignment = 16 : i64} : vector<4xi32>, !llvm.ptr<1>
// TC: llvm.store %{{.*}}, %{{.*}} {alignment = 16 : i64} : vector<4xi32>, !llvm.ptr<1>
// TC: llvm.store %{{.*}}, %{{.*}} {alignment = 16 : i64} : vector<4xi32>, !llvm.ptr<1>
// TC: nvvm.convert.f8x2.to.f16x2
// With 128 heads of bf16 rows in a layer group's pool (fused: each of the
// query's two CTAs gathers every row itself, no cluster) only head block 0
// (head base 0) looks up the entries; the other CTA reads the same rows.
// RUN: sed 's/x16x/x128x/g; s/mla_fp8, layers = 1/mla_bf16, layers = 4/g' %s \
// RUN:   | dhs-opt --dhs-lower-to-gpu --canonicalize --cse \
// RUN:   | FileCheck %s --check-prefix=GROUP128 --implicit-check-not=nvvm.cluster_dim
// GROUP128-LABEL: gpu.func @sparse_attention(
// GROUP128-SAME: %[[GENTRIES:[a-z0-9]+]]: memref<4x1x256xi32>, %{{[a-z0-9]+}}: memref<?x4x1152xi8>, %{{[a-z0-9]+}}: memref<4x1x128x512xbf16>
// GROUP128: %[[BLOCKY:.*]] = arith.index_cast %block_id_y : index to i32
// GROUP128-NEXT: %[[HEADBASE:.*]] = arith.muli %[[BLOCKY]], %c64_i32 : i32
// GROUP128: %[[BLOCK0:.*]] = arith.cmpi eq, %[[HEADBASE]], %c0_i32 : i32
// GROUP128-NEXT: %[[GHOSTROW:.*]] = arith.andi %{{.*}}, %{{.*}} : i1
// GROUP128-NEXT: %[[GLOOKS:.*]] = arith.andi %[[GHOSTROW]], %[[BLOCK0]] : i1
// GROUP128-NEXT: scf.if %[[GLOOKS]] -> (i32) {
// GROUP128-NEXT: memref.load %[[GENTRIES]][%block_id_x, %c0, %{{.*}}] : memref<4x1x256xi32>
// With 128 heads (two CTAs a query) the missing rows are fetched once into
// staging (dhs.fetch) and the fetch writes them back: the token's entry is
// looked up beside its copy, an entry outside the ring is reported by the
// token's first lane, and each chunk stored into staging is stored into the
// entry too. The staged attention reads staging and writes nothing back.
// RUN: sed 's/x16x/x128x/g' %s | dhs-opt --dhs-lower-to-gpu --canonicalize --cse \
// RUN:   | FileCheck %s --check-prefix=STAGED
// RUN: rm -rf %t.staged && sed 's/x16x/x128x/g' %s > %t.staged.mlir
// RUN: dhs-compile %t.staged.mlir -o %t.staged
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t.staged/fetch.ptx -o %t.staged/a.cubin %}
// RUN: dhs-run %t.staged --link-only | FileCheck %s --check-prefix=LINK
// STAGED-LABEL: func.func @step
// STAGED: %[[SRING:.*]] = dhs.pool_write_back of %{{.*}} -> memref<?x1x656xi8>
// STAGED: gpu.launch_func @resolve::@resolve
// STAGED: gpu.launch_func @fetch::@fetch {{.*}} %[[SRING]] : memref<?x1x656xi8>
// STAGED-SAME: dhs.roles = ["row_ids", "slots", "write_back", "history_start", "history_len", "host_tier", "write_back_ring", "staging", "status"]
// STAGED: gpu.launch_func @attention::@attention
// STAGED-SAME: dhs.roles = ["queries", "row_ids", "slots", "staging", "hbm_tier", "output", "partials", "status"]
// STAGED-LABEL: gpu.func @fetch(
// STAGED-SAME: %[[SENTRIES:[a-z0-9]+]]: memref<4x1x256xi32>, %{{[a-z0-9]+}}: memref<4xi64>, %{{[a-z0-9]+}}: memref<4xi32>, %[[SHOST:[a-z0-9]+]]: memref<?x1x656xi8>, %[[SR:[a-z0-9]+]]: memref<?x1x656xi8>
// STAGED: %[[SFLAT:.*]] = memref.collapse_shape %[[SENTRIES]]
// STAGED: %[[SE:.*]] = memref.load %[[SFLAT]][%block_id_x, %{{.*}}] : memref<4x256xi32>
// STAGED: %[[SROOM:.*]] = arith.index_cast %{{.*}} : index to i32
// STAGED: %[[SPAST:.*]] = arith.cmpi sge, %[[SE]], %[[SROOM]] : i32
// STAGED: %[[SBELOW:.*]] = arith.cmpi slt, %[[SE]], %c-1_i32 : i32
// STAGED: %[[SOUT:.*]] = arith.ori %[[SBELOW]], %[[SPAST]] : i1
// STAGED: %[[SREPORTS:.*]] = arith.andi %[[SOUT]], %{{.*}} : i1
// STAGED: scf.if %[[SREPORTS]] {
// STAGED: memref.atomic_rmw ori %c2_i32
// STAGED: %[[SGIVEN:.*]] = arith.cmpi sge, %[[SE]], %c0_i32 : i32
// STAGED: %[[SNOTPAST:.*]] = arith.cmpi slt, %[[SE]], %[[SROOM]] : i32
// STAGED: %[[SIN:.*]] = arith.andi %[[SGIVEN]], %[[SNOTPAST]] : i1
// STAGED: %[[SAT:.*]] = arith.index_cast %[[SE]] : i32 to index
// STAGED: %[[SCHUNK:.*]] = vector.load %[[SHOST]]
// STAGED: vector.store %[[SCHUNK]], %{{.*}}[%block_id_x, %{{.*}}, %{{.*}}] {{.*}} : memref<4x256x656xi8>, vector<16xi8>
// STAGED-NEXT: scf.if %[[SIN]] {
// STAGED: vector.store %[[SCHUNK]], %[[SR]][%[[SAT]], %{{.*}}, %{{.*}}] {{.*}} : memref<?x1x656xi8>, vector<16xi8>

// CHECK-LABEL: func.func @step
// CHECK: %[[RING:.*]] = dhs.pool_write_back of %{{.*}} -> memref<?x1x656xi8>
// CHECK: gpu.launch_func @resolve::@resolve
// CHECK-NOT: @fetch
// CHECK: gpu.launch_func @sparse_attention::@sparse_attention {{.*}} %[[RING]] : memref<?x1x656xi8>
// CHECK-SAME: dhs.roles = ["queries", "row_ids", "slots", "history_start", "history_len", "hbm_tier", "host_tier", "write_back", "write_back_ring",

// CHECK-LABEL: gpu.func @sparse_attention
// CHECK-SAME: %[[HOST:[a-z0-9]+]]: memref<?x1x656xi8>, %[[ENTRIES:[a-z0-9]+]]: memref<4x1x256xi32>, %[[R:[a-z0-9]+]]: memref<?x1x656xi8>
// A. Classification: a host row (source 2) of head block 0 has its entry.
// CHECK: %[[FIRST:.*]] = arith.cmpi eq, %block_id_y, %c0 : index
// CHECK: %[[HOSTROW:.*]] = arith.cmpi eq, %{{.*}}, %c2_i32 : i32
// CHECK: %[[LISTED:.*]] = arith.andi %{{.*}}, %[[HOSTROW]] : i1
// CHECK: %[[WRITES:.*]] = arith.andi %[[LISTED]], %[[FIRST]] : i1
// CHECK: %[[ENTRY:.*]] = scf.if %[[WRITES]] -> (i32) {
// CHECK: memref.load %[[ENTRIES]][%block_id_x, %c0, %{{.*}}] : memref<4x1x256xi32>
// CHECK: scf.yield %c-1_i32 : i32
// CHECK: %[[SIZE:.*]] = memref.dim %[[R]], %c0 : memref<?x1x656xi8>
// CHECK: %[[ROOM:.*]] = arith.index_cast %[[SIZE]] : index to i32
// CHECK: %[[PAST:.*]] = arith.cmpi sge, %[[ENTRY]], %[[ROOM]] : i32
// CHECK: %[[BELOW:.*]] = arith.cmpi slt, %[[ENTRY]], %c-1_i32 : i32
// CHECK: %[[OUTSIDE:.*]] = arith.ori %[[BELOW]], %[[PAST]] : i1
// CHECK: scf.if %[[OUTSIDE]] {
// CHECK: memref.atomic_rmw ori %c2_i32
// CHECK: %[[KEPT:.*]] = arith.select %[[OUTSIDE]], %c-1_i32, %[[ENTRY]] : i32
// CHECK: memref.store %[[KEPT]], %[[ENTRYOF:[a-z0-9]+]][%thread_id_x] : memref<16xi32, #gpu.address_space<workgroup>>
// B. Staging: the chunk as loaded, into the row's entry.
// CHECK: %[[CHUNK:.*]] = vector.load %{{.*}}[%{{.*}}, %c0, %[[AT:.*]]] {alignment = 16 : i64} : memref<?x1x656xi8>, vector<16xi8>
// CHECK: %[[E:.*]] = memref.load %[[ENTRYOF]][%{{.*}}] : memref<16xi32, #gpu.address_space<workgroup>>
// CHECK: %[[HAS:.*]] = arith.cmpi sge, %[[E]], %c0_i32 : i32
// CHECK: scf.if %[[HAS]] {
// CHECK: vector.store %[[CHUNK]], %[[R]][%{{.*}}, %c0, %[[AT]]]
// The scales' chunk, from the host store into the entry.
// CHECK: scf.for %[[ROW:.*]] = %thread_id_x to %c16 step %c512 {
// CHECK: %[[E2:.*]] = memref.load %[[ENTRYOF]][%[[ROW]]]
// CHECK: scf.if
// CHECK: %[[SCALES:.*]] = vector.load %[[HOST]][%{{.*}}, %c0, %c512]
// CHECK: vector.store %[[SCALES]], %[[R]][%{{.*}}, %c0, %c512]
// CHECK: gpu.barrier
func.func @step(%queries: memref<4x1x16x576xbf16>,
                %rows: memref<4x1x256xi32>, %slots: memref<4x1x256xi32>,
                %entries: memref<4x1x256xi32>,
                %history_start: memref<4xi64>, %history_len: memref<4xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 2048, host = ?>,
                %out: memref<4x1x16x512xbf16>) {
  dhs.resolve pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 2048, host = ?>)
      rows(%rows : memref<4x1x256xi32>)
      history(%history_start, %history_len : memref<4xi64>, memref<4xi32>)
      into(%slots : memref<4x1x256xi32>) write_back(%entries : memref<4x1x256xi32>)
  dhs.sparse_attention queries(%queries : memref<4x1x16x576xbf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      history(%history_start, %history_len : memref<4xi64>, memref<4xi32>)
      write_back(%entries : memref<4x1x256xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<4x1x16x512xbf16>) scale = 0.0416666679
  return
}
