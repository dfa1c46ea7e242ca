// 128 heads of bf16 MLA rows: the two 64-head CTAs of a query form a 2-CTA
// cluster (nvvm.cluster_dim, PTX .reqnctapercluster) and gather each tile
// once for both. Each producer fills half of every tile (its cluster rank's
// 32 rows) into its own tile buffer and, with st.async, into the peer's,
// whose "remote" mbarriers (count 1, armed with the peer's 36992 bytes per
// tile) complete on those bytes. A tile buffer is free again once one thread
// of each consumer warpgroup of both CTAs arrived on its empty barrier
// (count 4, remote arrives). Cluster barriers before the first remote access
// and before exit. FP8 rows stay unclustered (measured slower, bench/NOTES.md),
// and so does tensor-core-clusters=false.
// RUN: dhs-opt %s --dhs-lower-to-gpu="min-blocks=0" --canonicalize --cse | FileCheck %s
// RUN: dhs-opt %s --dhs-lower-to-gpu="min-blocks=0 tensor-core-clusters=false" | FileCheck %s --check-prefix=OFF
// RUN: sed 's/mla_bf16/mla_fp8/g' %s | dhs-opt --dhs-lower-to-gpu="min-blocks=0" | FileCheck %s --check-prefix=OFF
// RUN: rm -rf %t && dhs-compile %s --min-blocks=0 -o %t
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: FileCheck %s --check-prefix=PTX < %t/attention.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90a -v %t/attention.ptx -o %t/attention.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS %}
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK

// CHECK-LABEL: func.func @step
// CHECK: gpu.launch_func @attention::@attention blocks in (%c2, %c2, %c1) threads in (%c384, %c1, %c1) dynamic_shared_memory_size %c231216_i32
// CHECK-LABEL: gpu.func @attention
// CHECK-SAME: nvvm.cluster_dim = array<i32: 1, 2, 1>
// CHECK: nvvm.read.ptx.sreg.cluster.ctarank
// CHECK: nvvm.mbarrier.init %{{.*}}, %c128_i32
// CHECK: nvvm.mbarrier.init %{{.*}}, %c128_i32
// CHECK: nvvm.mbarrier.init %{{.*}}, %c4_i32
// CHECK: nvvm.mbarrier.init %{{.*}}, %c4_i32
// CHECK: nvvm.mbarrier.init %{{.*}}, %c1_i32
// CHECK: nvvm.mbarrier.init %{{.*}}, %c1_i32
// CHECK: nvvm.fence.mbarrier.init
// CHECK: nvvm.cluster.arrive
// CHECK-NEXT: nvvm.cluster.wait
// Producer: it waits for empty[b] with a cluster-scope acquire (the releasing
// arrivals include the peer's consumers), the peer's tile bytes are expected,
// then each chunk goes to both.
// CHECK: nvvm.setmaxregister  decrease 144
// CHECK: nvvm.mapa
// CHECK: scf.for
// CHECK: arith.addi %{{.*}}, %c230160_i32
// CHECK-NEXT: %[[FREE:.*]] = llvm.getelementptr
// CHECK-NEXT: llvm.inline_asm has_side_effects "{{.*}}mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 P1, [$0], $1, 10000000;{{.*}}" %[[FREE]], %{{.*}} : (!llvm.ptr<3>, i32) -> ()
// CHECK: nvvm.mbarrier.arrive.expect_tx %{{.*}}, %c36992_i32
// CHECK: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32
// CHECK: st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32
// Consumers wait for both halves, release the tile in both CTAs.
// CHECK: nvvm.setmaxregister  increase 200
// CHECK: nvvm.mbarrier.try_wait.parity %{{.*}}, %[[PARITY:.*]], %c10000000_i32
// CHECK: nvvm.mbarrier.try_wait.parity %{{.*}}, %[[PARITY]], %c10000000_i32
// CHECK: nvvm.mapa %{{.*}}, %c0_i32
// CHECK: nvvm.mbarrier.arrive %{{.*}} {scope = #nvvm.mem_scope<cluster>} : !llvm.ptr<7>
// CHECK: nvvm.mapa %{{.*}}, %c1_i32
// CHECK: nvvm.mbarrier.arrive %{{.*}} {scope = #nvvm.mem_scope<cluster>} : !llvm.ptr<7>
// CHECK: nvvm.cluster.arrive
// CHECK-NEXT: nvvm.cluster.wait
// CHECK-NEXT: gpu.return

// OFF-LABEL: gpu.func @
// OFF-NOT: nvvm.cluster_dim
// OFF-NOT: st.async
// OFF-NOT: acquire.cluster
// OFF: gpu.return

// MANIFEST: "dynamic_shared_bytes": 231216
// PTX: .explicitcluster
// PTX-NEXT: .reqnctapercluster 1, 2, 1
// PTX: barrier.cluster.arrive
// PTX: mbarrier.arrive.release.cluster.shared::cluster.b64
// PTX: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 P1, [%r{{[0-9]+}}], %r{{[0-9]+}}, 10000000;
// PTX: st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32
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
