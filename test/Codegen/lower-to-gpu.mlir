// RUN: dhs-opt %s --dhs-lower-to-gpu --canonicalize --cse --split-input-file | FileCheck %s

// Two requests with two query positions, 16 heads (one CTA of 16 warps per
// query), K = 40 selected rows: three tiles of 16, the last one partial.

// CHECK: module attributes {gpu.container_module}
// CHECK-LABEL: func.func @step
// CHECK-SAME: (%[[Q:.*]]: memref<2x2x16x576xbf16>, %[[ROWS:.*]]: memref<2x2x40xi32>, %[[SLOTS:.*]]: memref<2x2x40xi32>, %[[START:.*]]: memref<2xi64>, %[[LEN:.*]]: memref<2xi32>, %[[POOL:.*]]: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 1024, host = ?>, %[[OUT:.*]]: memref<2x2x16x512xbf16>)
// CHECK-DAG: %[[C512:.*]] = arith.constant 512 : index
// CHECK-DAG: %[[C4:.*]] = arith.constant 4 : index
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[STATUS:.*]] = dhs.step_status : memref<1xi32>
// CHECK-DAG: %[[HOST:.*]] = dhs.pool_tier host of %[[POOL]] : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 1024, host = ?> -> memref<?x1x1152xi8>
// CHECK-DAG: %[[HBM:.*]] = dhs.pool_tier hbm of %[[POOL]] : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 1024, host = ?> -> memref<1024x1x1152xi8>
// CHECK-DAG: %[[HBMDYN:.*]] = memref.cast %[[HBM]] : memref<1024x1x1152xi8> to memref<?x1x1152xi8>
// CHECK: gpu.launch_func @sparse_attention::@sparse_attention
// CHECK-SAME: blocks in (%[[C4]], %[[C1]], %[[C1]]) threads in (%[[C512]], %[[C1]], %[[C1]])
// CHECK-SAME: args(%[[Q]] : memref<2x2x16x576xbf16>, %[[ROWS]] : memref<2x2x40xi32>, %[[SLOTS]] : memref<2x2x40xi32>, %[[START]] : memref<2xi64>, %[[LEN]] : memref<2xi32>, %[[HBMDYN]] : memref<?x1x1152xi8>, %[[HOST]] : memref<?x1x1152xi8>, %[[OUT]] : memref<2x2x16x512xbf16>, %[[STATUS]] : memref<1xi32>)
// CHECK-SAME: {dhs.layer = 0 : i64, dhs.op = "sparse_attention", dhs.roles = ["queries", "row_ids", "slots", "history_start", "history_len", "hbm_tier", "host_tier", "output", "status"], dhs.softmax_scale = 0.0416666679 : f32}
// CHECK-NOT: dhs.sparse_attention

// The kernel: 16 staged rows decoded to f32 in shared memory, with where each
// comes from.
// CHECK: gpu.module @sparse_attention
// CHECK: gpu.func @sparse_attention(%{{.*}}: memref<2x2x16x576xbf16>, %{{.*}}: memref<2x2x40xi32>, %{{.*}}: memref<2x2x40xi32>, %{{.*}}: memref<2xi64>, %{{.*}}: memref<2xi32>, %[[KHBM:.*]]: memref<?x1x1152xi8>, %[[KHOST:.*]]: memref<?x1x1152xi8>, %[[KOUT:.*]]: memref<2x2x16x512xbf16>, %[[KSTATUS:.*]]: memref<1xi32>)
// CHECK-SAME: workgroup(%[[TILE:.*]] : memref<16x576xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %[[SOURCE:.*]] : memref<16xi32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %[[INDEX:.*]] : memref<16xi64, #gpu.address_space<workgroup>> {llvm.align = 16 : i64})
// CHECK-SAME: kernel attributes {known_block_size = array<i32: 512, 1, 1>}
// The KV loop walks the selection in tiles of 16, carrying max, sum and 16 output elements per lane.
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args({{.*}}) -> (f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32)
// Phase A: bad input is reported, not read.
// CHECK: memref.atomic_rmw ori %{{.*}}, %[[KSTATUS]][%{{.*}}] : (i32, memref<1xi32>) -> i32
// CHECK: memref.store %{{.*}}, %[[SOURCE]][%{{.*}}]
// CHECK: memref.store %{{.*}}, %[[INDEX]][%{{.*}}]
// CHECK: gpu.barrier
// Phase B: 16-byte copies from the row's tier, decoded (bf16 -> f32) into
// shared memory.
// CHECK: scf.for
// CHECK: %[[TIER:.*]] = arith.select %{{.*}}, %[[KHOST]], %[[KHBM]] : memref<?x1x1152xi8>
// CHECK: %[[RAW:.*]] = vector.load %[[TIER]][%{{.*}}, %{{.*}}, %{{.*}}] {alignment = 16 : i64} : memref<?x1x1152xi8>, vector<16xi8>
// CHECK: %[[HALVES:.*]] = vector.bitcast %[[RAW]] : vector<16xi8> to vector<8xbf16>
// CHECK: arith.extf %[[HALVES]] : vector<8xbf16> to vector<8xf32>
// CHECK: vector.store %{{.*}}, %[[TILE]][%{{.*}}, %{{.*}}] {alignment = 16 : i64} : memref<16x576xf32, #gpu.address_space<workgroup>>, vector<8xf32>
// CHECK: gpu.barrier
// Phase C: per-row score by warp reduction, online softmax in base 2.
// CHECK: scf.for
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.f32"
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.f32"
// CHECK: gpu.barrier
// Epilogue: normalized, rounded to bf16.
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: memref.store %{{.*}}, %[[KOUT]]
// CHECK: gpu.return
func.func @step(%q: memref<2x2x16x576xbf16>, %rows: memref<2x2x40xi32>,
                %slots: memref<2x2x40xi32>, %start: memref<2xi64>,
                %len: memref<2xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 1024, host = ?>,
                %out: memref<2x2x16x512xbf16>) {
  dhs.sparse_attention queries(%q : memref<2x2x16x576xbf16>)
      rows(%rows : memref<2x2x40xi32>) slots(%slots : memref<2x2x40xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 1024, host = ?>)
      layer = 0 output(%out : memref<2x2x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

// The same with 32 heads over a one-layer pool: two CTAs per query would each
// read the query's missing rows over PCIe, so the rows are fetched once into
// an arena buffer [B, Q * K, layers, row bytes] and both CTAs attend from
// there (HBM). Pools of several layers stay fused (their fetch would copy
// every layer of the group).
// CHECK-LABEL: func.func @many_heads
// CHECK: %[[STAGE:.*]] = dhs.scratch {offset = 0 : i64} : memref<2x80x1x1152xi8>
// CHECK: gpu.launch_func @fetch::@fetch {{.*}} args(%arg1 : memref<2x2x40xi32>, %arg2 : memref<2x2x40xi32>, %arg3 : memref<2xi64>, %arg4 : memref<2xi32>, %{{.*}} : memref<?x1x1152xi8>, %[[STAGE]] : memref<2x80x1x1152xi8>, %{{.*}} : memref<1xi32>) {dhs.op = "fetch", dhs.roles = ["row_ids", "slots", "history_start", "history_len", "host_tier", "staging", "status"]}
// CHECK: gpu.launch_func @attention::@attention blocks in (%c4, %c2, %c1) {{.*}} args(%arg0 : memref<2x2x32x576xbf16>, %arg1 : memref<2x2x40xi32>, %arg2 : memref<2x2x40xi32>, %[[STAGE]] : memref<2x80x1x1152xi8>, %{{.*}} : memref<?x1x1152xi8>, %arg6 : memref<2x2x32x512xbf16>, %{{.*}} : memref<1xi32>) {dhs.layer = 0 : i64, dhs.op = "attention", dhs.roles = ["queries", "row_ids", "slots", "staging", "hbm_tier", "output", "status"]
// CHECK-NOT: dhs.sparse_attention
func.func @many_heads(%q: memref<2x2x32x576xbf16>, %rows: memref<2x2x40xi32>,
                %slots: memref<2x2x40xi32>, %start: memref<2xi64>,
                %len: memref<2xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 1024, host = ?>,
                %out: memref<2x2x32x512xbf16>) {
  dhs.sparse_attention queries(%q : memref<2x2x32x576xbf16>)
      rows(%rows : memref<2x2x40xi32>) slots(%slots : memref<2x2x40xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 1024, host = ?>)
      layer = 0 output(%out : memref<2x2x32x512xbf16>) scale = 0.0416666679
  return
}


// -----

// A pool of 4 layers stays fused with 32 heads: a fetch copies every layer of
// the group, 4 times the bytes this layer reads.
// CHECK-LABEL: func.func @many_heads_group
// CHECK-NOT: dhs.scratch {{.*}}xi8>
// CHECK: gpu.launch_func @sparse_attention{{(_[0-9]+)?}}::@sparse_attention
// CHECK-NOT: @fetch
func.func @many_heads_group(%q: memref<2x2x32x576xbf16>, %rows: memref<2x2x40xi32>,
                %slots: memref<2x2x40xi32>, %start: memref<2xi64>,
                %len: memref<2xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>,
                %out: memref<2x2x32x512xbf16>) {
  dhs.sparse_attention queries(%q : memref<2x2x32x576xbf16>)
      rows(%rows : memref<2x2x40xi32>) slots(%slots : memref<2x2x40xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      layer = 2 output(%out : memref<2x2x32x512xbf16>) scale = 0.0416666679
  return
}

// -----

// Six heads: one CTA of six warps per query. Two attention ops on one pool
// share its tier views and the step status.

// CHECK-LABEL: func.func @two_ops
// CHECK-COUNT-1: dhs.step_status
// CHECK-COUNT-1: dhs.pool_tier host
// CHECK: gpu.launch_func @sparse_attention::@sparse_attention
// CHECK-SAME: threads in (%{{.*}}, %{{.*}}, %{{.*}})
// CHECK: gpu.launch_func @sparse_attention_0::@sparse_attention_0
// CHECK: gpu.module @sparse_attention
// CHECK-SAME: {
// CHECK: known_block_size = array<i32: 192, 1, 1>
// CHECK: gpu.module @sparse_attention_0
func.func @two_ops(%q: memref<1x1x6x576xbf16>, %rows: memref<1x1x16xi32>,
                   %slots: memref<1x1x16xi32>, %start: memref<1xi64>,
                   %len: memref<1xi32>,
                   %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = ?, host = ?>,
                   %out: memref<1x1x6x512xbf16>, %out2: memref<1x1x6x512xbf16>) {
  dhs.sparse_attention queries(%q : memref<1x1x6x576xbf16>)
      rows(%rows : memref<1x1x16xi32>) slots(%slots : memref<1x1x16xi32>)
      history(%start, %len : memref<1xi64>, memref<1xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = ?, host = ?>)
      layer = 0 output(%out : memref<1x1x6x512xbf16>) scale = 0.5
  dhs.sparse_attention queries(%q : memref<1x1x6x576xbf16>)
      rows(%rows : memref<1x1x16xi32>) slots(%slots : memref<1x1x16xi32>)
      history(%start, %len : memref<1xi64>, memref<1xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = ?, host = ?>)
      layer = 0 output(%out2 : memref<1x1x6x512xbf16>) scale = 0.25
  return
}
