// 128 heads of MLA rows: each 64-head block of a query is a CTA of its own
// (grid y = 2), no cluster, that gathers every row of the query's tiles. The
// step has two forms, chosen per step by the share of its selected rows
// missing from HBM (runtime/core/LaunchForms.h): up to 2% the fused attention
// (dhs.missing_up_to), whose two CTAs each read the few host rows themselves
// and which launches no fetch (FP8: its resident form); above it the missing
// rows are fetched into HBM first (dhs.fetch, launched before the staged
// attention; both dhs.missing_above), so no host row crosses PCIe twice. The
// two CTAs of a query read the same rows at about the same time (the second
// mostly from L2). bf16 rows in HBM go to the tile by cp.async (36 copies:
// two rows of 18 chunks a thread), as with 64 heads. The FP8 producer of head
// block 0 alone prefetches into L2: the staged kernel the rows of tile t + 2
// once it has published tile t, the resident form the HBM rows of tile t + 1;
// bf16 producers do not. (Pairs of head-block CTAs in a 2-CTA cluster, each
// gathering half of every tile and copying it to the other, were measured
// slower since the bf16 rows' cp.async: bench/NOTES.md, forty-first session.)
// RUN: dhs-opt %s --dhs-lower-to-gpu="min-blocks=0" --canonicalize --cse \
// RUN:   | FileCheck %s --implicit-check-not=nvvm.cluster_dim --implicit-check-not=shared::cluster \
// RUN:   --implicit-check-not=acquire.cluster --implicit-check-not=dhs.racecheck \
// RUN:   --implicit-check-not=nvvm.prefetch
// RUN: sed 's/mla_bf16/mla_fp8/g' %s | dhs-opt --dhs-lower-to-gpu="min-blocks=0" \
// RUN:   | FileCheck %s --check-prefix=PREFETCH --implicit-check-not=nvvm.cluster_dim --implicit-check-not=shared::cluster \
// RUN:   --implicit-check-not=acquire.cluster --implicit-check-not=dhs.racecheck
// RUN: sed 's/mla_bf16/mla_fp8/g' %s | dhs-opt --dhs-lower-to-gpu="min-blocks=0" \
// RUN:   | FileCheck %s --check-prefix=RESIDENT
// RUN: rm -rf %t && dhs-compile %s --min-blocks=0 -o %t
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: FileCheck %s --check-prefix=PTX --implicit-check-not=.reqnctapercluster < %t/attention.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90a -v %t/attention.ptx -o %t/attention.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS %}
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK

// CHECK-LABEL: func.func @step
// CHECK: gpu.launch_func @fetch::@fetch {{.*}} {dhs.missing_above = 2.000000e-02 : f64, dhs.op = "fetch"
// CHECK-NEXT: gpu.launch_func @sparse_attention::@sparse_attention blocks in (%c2, %c2, %c1) threads in (%c384, %c1, %c1) dynamic_shared_memory_size %c231200_i32 {{.*}} dhs.missing_up_to = 2.000000e-02 : f64
// CHECK-NEXT: gpu.launch_func @attention::@attention blocks in (%c2, %c2, %c1) threads in (%c384, %c1, %c1) dynamic_shared_memory_size %c231200_i32 {{.*}} dhs.missing_above = 2.000000e-02 : f64
// CHECK-LABEL: gpu.func @sparse_attention(
// CHECK-NOT: gpu.func @sparse_attention_resident
// CHECK-LABEL: gpu.func @attention
// CHECK: nvvm.setmaxregister  decrease 144
// CHECK-COUNT-36: nvvm.cp.async.shared.global %{{.*}}, %{{.*}}, 16, cache =  cg
// CHECK-NOT: nvvm.cp.async.shared.global
// CHECK: nvvm.setmaxregister  increase 200
// CHECK: nvvm.setmaxregister  decrease 160
// CHECK: gpu.return

// The resident form: tile t + 1's rows in HBM (2 a thread, 2 lines each),
// in head block 0 only; the fused kernel's other form prefetches nothing.
// RESIDENT-LABEL: gpu.func @sparse_attention(
// RESIDENT-NOT: nvvm.prefetch
// RESIDENT-LABEL: gpu.func @sparse_attention_resident(
// RESIDENT: gpu.block_id  y
// RESIDENT-NEXT: %[[BY:.*]] = arith.index_cast
// RESIDENT-NEXT: %[[HEADBASE:.*]] = arith.muli %[[BY]], %c64_i32 : i32
// RESIDENT: %[[BLOCK0:.*]] = arith.cmpi eq, %[[HEADBASE]], %c0_i32{{.*}} : i32
// RESIDENT-NEXT: %[[ROW0:.*]] = arith.andi %{{.*}}, %[[BLOCK0]] : i1
// RESIDENT-NEXT: scf.if %[[ROW0]] {
// RESIDENT: nvvm.prefetch level =  L2
// RESIDENT: scf.if %[[ROW0]] {
// RESIDENT: nvvm.prefetch level =  L2
// RESIDENT: %[[BLOCK0B:.*]] = arith.cmpi eq, %[[HEADBASE]], %c0_i32{{.*}} : i32
// RESIDENT-NEXT: %[[ROW1:.*]] = arith.andi %{{.*}}, %[[BLOCK0B]] : i1
// RESIDENT-NEXT: scf.if %[[ROW1]] {
// RESIDENT: nvvm.prefetch level =  L2
// RESIDENT: scf.if %[[ROW1]] {
// RESIDENT: nvvm.prefetch level =  L2
// RESIDENT-NOT: nvvm.prefetch
// RESIDENT-LABEL: gpu.func @attention(

// Tile t + 2's rows (2 a thread, 2 lines each) after the full arrival, in
// head block 0 (headBase == 0) only.
// PREFETCH-LABEL: gpu.func @attention(
// PREFETCH: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>
// PREFETCH: nvvm.mbarrier.arrive
// PREFETCH: %[[BLOCK0:.*]] = arith.cmpi eq, %{{.*}}, %c0_i32{{.*}} : i32
// PREFETCH: %[[ROW0:.*]] = arith.andi %{{.*}}, %[[BLOCK0]] : i1
// PREFETCH: scf.if %[[ROW0]] {
// PREFETCH: nvvm.prefetch level =  L2
// PREFETCH: scf.if %[[ROW0]] {
// PREFETCH: nvvm.prefetch level =  L2
// PREFETCH: scf.if
// PREFETCH: nvvm.prefetch level =  L2
// PREFETCH: scf.if
// PREFETCH: nvvm.prefetch level =  L2
// PREFETCH-NOT: nvvm.prefetch
// PREFETCH: scf.yield

// MANIFEST: "kernel": "fetch"
// MANIFEST: "missing_above": 0.02
// MANIFEST: "kernel": "sparse_attention"
// MANIFEST: "missing_up_to": 0.02
// MANIFEST: "dynamic_shared_bytes": 231200
// MANIFEST: "kernel": "attention"
// MANIFEST: "missing_above": 0.02
// PTX: cp.async.cg.shared.global
// PTX: cp.async.mbarrier.arrive.shared.b64
// PTXAS: 0 bytes spill stores, 0 bytes spill loads
// PTXAS: Used 168 registers
// LINK: link: OK

func.func @step(%queries: memref<2x1x128x576xbf16>, %rows: memref<2x1x256xi32>,
                %slots: memref<2x1x256xi32>, %history_start: memref<2xi64>,
                %history_len: memref<2xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 1024, host = ?>,
                %out: memref<2x1x128x512xbf16>) {
  dhs.sparse_attention queries(%queries : memref<2x1x128x576xbf16>)
      rows(%rows : memref<2x1x256xi32>) slots(%slots : memref<2x1x256xi32>)
      history(%history_start, %history_len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 1024, host = ?>)
      layer = 0 output(%out : memref<2x1x128x512xbf16>) scale = 0.0721687824
  return
}
