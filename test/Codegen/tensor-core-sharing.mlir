// A verify step's five query positions with a shared prefix (`shared`,
// dhs.share_rows): the five position CTAs of a request (and head block) form
// a cluster (nvvm.cluster_dim 5, 1, 1; never split over CTAs). Each CTA reads
// its request's shared tile count, clamped to the query's tiles (4 here), and
// rank 0 reports a larger one (BadSharedRows, 64), in every step, also
// those the kernel leaves to the unclustered one. Half h of shared tile t is
// gathered by rank (2t + h) mod 5 alone: its loads are skipped elsewhere, and
// it stores the rows (bias, id, dequantized chunks) into its own tile buffer;
// once the producer warpgroup stored the tile (fence, named barrier 4), 44
// threads copy its halves with bulk copies (cp.async.bulk shared::cta ->
// shared::cluster) into the four others' buffers: per half and CTA the 9
// blocks' 32 rows (4 KB each) and the 32 biases and ids (128 B each). Each
// CTA's "remote" mbarrier is armed with 37120 bytes (32 rows x (1152 + 4 +
// 4)) per half tile that another CTA gathers (none for the other tiles). A tile buffer is free once one
// thread of each consumer warpgroup of all five CTAs arrived (count 10; its
// racecheck value 10 + 5 x 256 = 1290); past the shared prefix one thread per
// consumer warpgroup arrives locally with count 5. The second consumer warpgroup
// compares each row's id with its own selection and reports a prefix that
// differs (BadSharedRows). Both this kernel and the tensor-core kernel of
// one query alone, no cluster (sparse_attention_0, launched first), count
// the requests with a tile count (not 0) by a barrier reduction (popc): the
// clustered one computes the step where they are at least half of the B = 2
// requests, the other one where they are not. Both walk the same tiles in
// the same order with the same arithmetic, so either gives a request the
// same bits.
// RUN: dhs-opt %s --dhs-plan-staging --dhs-lower-to-gpu="min-blocks=0" --canonicalize --cse | FileCheck %s
// RUN: dhs-opt %s --dhs-plan-staging --dhs-lower-to-gpu="min-blocks=0 tensor-cores=false" | FileCheck %s --check-prefix=CUDACORE
// RUN: rm -rf %t && dhs-compile %s --min-blocks=0 -o %t
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: FileCheck %s --check-prefix=PTX < %t/sparse_attention.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90a -v %t/sparse_attention.ptx -o %t/attention.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS %}
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK
// RUN: cp %t/sparse_attention.ptx %t/racecheck.ptx && %dhs_src/tools/racecheck-ptx.sh %t/racecheck.ptx
// RUN: FileCheck %s --check-prefix=RACECHECK < %t/racecheck.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90a -v %t/racecheck.ptx -o %t/racecheck.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS %}
// Cluster arrivals without the markers (or without the count's) are refused,
// the file left as it was.
// RUN: sed 's@ *// dhs\.racecheck: .*@@' %t/sparse_attention.ptx > %t/unmarked.ptx && cp %t/unmarked.ptx %t/unmarked.orig
// RUN: not %dhs_src/tools/racecheck-ptx.sh %t/unmarked.ptx 2>&1 | FileCheck %s --check-prefix=REFUSED
// RUN: cmp %t/unmarked.ptx %t/unmarked.orig
// RUN: sed 's@; // dhs\.racecheck: mov\.b32 .*@;@' %t/sparse_attention.ptx > %t/nocount.ptx
// RUN: not %dhs_src/tools/racecheck-ptx.sh %t/nocount.ptx 2>&1 | FileCheck %s --check-prefix=NOCOUNT

// CHECK-LABEL: func.func @step
// CHECK: gpu.launch_func @share_rows::@share_rows
// CHECK-NEXT: gpu.launch_func @sparse_attention_0::@sparse_attention_0 blocks in (%c10, %c1, %c1) threads in (%c384, %c1, %c1) dynamic_shared_memory_size %c231200_i32 {{.*}} dhs.unshared_requests
// CHECK-NEXT: gpu.launch_func @sparse_attention::@sparse_attention blocks in (%c10, %c1, %c1) threads in (%c384, %c1, %c1) dynamic_shared_memory_size %c232240_i32
// CHECK-NOT: dhs.unshared_requests
// CHECK-LABEL: gpu.func @sparse_attention
// CHECK-SAME: nvvm.cluster_dim = array<i32: 5, 1, 1>
// CHECK: %[[RANK:.*]] = nvvm.read.ptx.sreg.cluster.ctarank
// CHECK: %[[COUNT:.*]] = memref.load %arg7[%{{.*}}] : memref<2xi32>
// CHECK: %[[HAS:.*]] = arith.cmpi ne, %[[COUNT]], %c0_i32
// CHECK: %[[SHARERS:.*]] = nvvm.barrier #nvvm.reduction<popc> %{{.*}} -> i32
// CHECK: %[[TWICE_SHARERS:.*]] = arith.muli %[[SHARERS]], %c2_i32
// CHECK: %[[STEP_SHARES:.*]] = arith.cmpi sge, %[[TWICE_SHARERS]], %c2_i32
// CHECK-NEXT: %[[REQUESTED:.*]] = memref.load %arg7[%{{.*}}] : memref<2xi32>
// CHECK-NEXT: %[[CLAMPED:.*]] = arith.minui %[[REQUESTED]], %c4_i32
// CHECK-NEXT: %[[SHARED:.*]] = arith.index_cast %[[CLAMPED]] : i32 to index
// CHECK-NEXT: %[[TOO_MANY:.*]] = arith.cmpi ugt, %[[REQUESTED]], %c4_i32
// CHECK-NEXT: %[[THREAD0:.*]] = arith.cmpi eq, %{{.*}}, %c0_i32
// CHECK-NEXT: %[[RANK0:.*]] = arith.cmpi eq, %[[RANK]], %c0_i32
// CHECK: scf.if
// CHECK-NEXT: memref.atomic_rmw ori %c64_i32, %arg9[%c0]
// CHECK: scf.if %[[STEP_SHARES]] {
// CHECK: %[[EMPTY_COUNT:.*]] = llvm.inline_asm "mov.b32 $0, 10; // dhs.racecheck: mov.b32 $0, 1290;", "=r"  : () -> i32
// CHECK: nvvm.mbarrier.init %{{.*}}, %[[EMPTY_COUNT]] :
// CHECK: nvvm.mbarrier.init %{{.*}}, %[[EMPTY_COUNT]] :
// CHECK: nvvm.cluster.arrive
// CHECK-NEXT: nvvm.cluster.wait
// Producer: per tile the bytes other CTAs gather: (tile uge shared or
// (2t + h) mod 5 == rank) marks a half as this CTA's.
// Thread i sends to the (i / 11 + 1)-th next rank, whose shared base and
// barriers it maps once, before the loop.
// CHECK: nvvm.setmaxregister  decrease 144
// CHECK: %[[NTH:.*]] = arith.divui %{{.*}}, %c11_i32 : i32
// CHECK-NEXT: %[[NEXT:.*]] = arith.addi %[[NTH]], %c1_i32 : i32
// CHECK-NEXT: %[[AHEAD:.*]] = arith.addi %[[RANK]], %[[NEXT]] : i32
// CHECK-NEXT: %[[RECEIVER:.*]] = arith.remui %[[AHEAD]], %c5_i32 : i32
// CHECK-NEXT: nvvm.mapa %{{.*}}, %[[RECEIVER]] : !llvm.ptr<3> -> !llvm.ptr<7>
// CHECK: nvvm.mapa %{{.*}}, %[[RECEIVER]] : !llvm.ptr<3> -> !llvm.ptr<7>
// CHECK: scf.for %[[TILE:.*]] = %c0 to %c4 step %c1
// CHECK: %[[TWICE:.*]] = arith.muli %{{.*}}, %c2_i32
// CHECK-NEXT: %[[OWNER0:.*]] = arith.remui %[[TWICE]], %c5_i32
// CHECK-NEXT: %[[MINE0:.*]] = arith.cmpi eq, %[[OWNER0]], %[[RANK]]
// CHECK-NEXT: %[[PRIVATE:.*]] = arith.cmpi uge, %[[TILE]], %[[SHARED]] : index
// CHECK-NEXT: arith.ori %[[PRIVATE]], %[[MINE0]]
// CHECK: %[[BYTES:.*]] = arith.muli %{{.*}}, %c37120_i32
// CHECK: nvvm.mbarrier.arrive.expect_tx %{{.*}}, %[[BYTES]]
// The tile stored, its shared halves go to the four others.
// CHECK: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>
// CHECK-NEXT: nvvm.barrier id = %c4_i32 number_of_threads = %c128_i32
// CHECK-NEXT: arith.cmpi ult, %{{.*}}, %c44_i32
// CHECK: arith.remui %{{.*}}, %c11_i32
// CHECK-NOT: nvvm.mapa
// CHECK: cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [$0], [$1], $2, [$3];
// CHECK: cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [$0], [$1], $2, [$3];
// CHECK: nvvm.mbarrier.arrive
// Consumers release each tile on all five CTAs (threads 32, 64, 96, 1, 33).
// CHECK: nvvm.setmaxregister  increase 200
// CHECK: dhs.racecheck: { .reg .b64 %dhs_rc<6>;
// CHECK: arith.cmpi eq, %{{.*}}, %c32_i32
// CHECK: arith.cmpi eq, %{{.*}}, %c33_i32
// Past the shared prefix no other CTA writes into this one's buffers: one
// local arrival counts for all five (no lockstep on private tiles).
// CHECK: } else {
// CHECK: nvvm.mbarrier.arrive %{{.*}}, %c5_i32 : !llvm.ptr<3> -> i64
// The second warpgroup checks the ids: thread i < 64, row i.
// CHECK: nvvm.setmaxregister  decrease 160
// CHECK: arith.cmpi ult, %{{.*}}, %c64_i32
// CHECK: %[[NE:.*]] = arith.cmpi ne, %{{.*}}, %{{.*}} : i32
// CHECK-NEXT: scf.if %[[NE]]
// CHECK-NEXT: memref.atomic_rmw ori %c64_i32, %arg9[%c0]
// CHECK: nvvm.cluster.arrive
// CHECK-NEXT: nvvm.cluster.wait
// CHECK-NEXT: }
// CHECK-NEXT: gpu.return
// The unclustered kernel: the steps the clustered one skips.
// (Its attributes whole: no nvvm.cluster_dim.)
// CHECK-LABEL: gpu.func @sparse_attention_0(
// CHECK-SAME: kernel attributes {known_block_size = array<i32: 384, 1, 1>, nvvm.minctasm = 1 : i32} {
// CHECK: nvvm.barrier #nvvm.reduction<popc> %{{.*}} -> i32
// CHECK: %[[ALONE:.*]] = arith.cmpi slt, %{{.*}}, %c2_i32
// (A bad count is the clustered kernel's to report, in every step.)
// CHECK-NOT: memref.atomic_rmw ori %c64_i32
// CHECK: scf.if %[[ALONE]] {
// CHECK-NOT: nvvm.cluster
// CHECK-NOT: cp.async.bulk.shared::cluster
// CHECK: gpu.return

// Without tensor cores (a fetch, then the CUDA-core kernel) each position
// is computed over its own rows: the prefix's order changes nothing there,
// and the kernel takes no tile counts.
// CUDACORE-LABEL: gpu.func @attention
// CUDACORE-SAME: memref<2x5x64x512xbf16>, %arg6: memref<1xi32>) workgroup
// CUDACORE-NOT: nvvm.cluster_dim

// MANIFEST: "dynamic_shared_bytes": 231200
// MANIFEST: "kernel": "sparse_attention_0"
// MANIFEST: "role": "shared_tiles"
// MANIFEST: "unshared_requests": true
// MANIFEST: "dynamic_shared_bytes": 232240
// MANIFEST: "kernel": "sparse_attention"
// MANIFEST: "role": "shared_tiles"
// PTX: .explicitcluster
// PTX-NEXT: .reqnctapercluster 5, 1, 1
// PTX: mov.b32 %r[[COUNT:[0-9]+]], 10; // dhs.racecheck: mov.b32 %r[[COUNT]], 1290;
// PTX: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64
// PTX: cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes
// ptxas spills a few words at this K (none for K = 2048).
// PTXAS: {{[0-9]+}} bytes spill stores, {{[0-9]+}} bytes spill loads
// PTXAS: Used 168 registers
// LINK: link: OK
// RACECHECK-NOT: dhs.racecheck
// RACECHECK: {{^}}	mov.b32 %r[[COUNT:[0-9]+]], 1290;{{$}}
// RACECHECK: {{^}}	{ .reg .b64 %dhs_rc<6>; add.s64 %dhs_rc0, %rd{{[0-9]+}}, 16; {{.*}} mapa.shared::cluster.u64 %dhs_rc5, %dhs_rc0, 4; mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%dhs_rc5]; }{{$}}
// REFUSED: racecheck-ptx: {{.*}}unmarked.ptx has cluster mbarrier arrivals but 0 racecheck arrival markers and 0 count markers
// NOCOUNT: racecheck-ptx: {{.*}}nocount.ptx has cluster mbarrier arrivals but 2 racecheck arrival markers and 0 count markers

func.func @step(%queries: memref<2x5x64x576xbf16>, %rows: memref<2x5x256xi32>,
                %slots: memref<2x5x256xi32>, %history_start: memref<2xi64>,
                %history_len: memref<2xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 1024, host = ?>,
                %out: memref<2x5x64x512xbf16>) {
  %shared_rows = dhs.scratch : memref<2x5x256xi32>
  %shared_slots = dhs.scratch : memref<2x5x256xi32>
  %tiles = dhs.scratch : memref<2xi32>
  dhs.share_rows rows(%rows : memref<2x5x256xi32>) slots(%slots : memref<2x5x256xi32>) tile = 64
      into(%shared_rows, %shared_slots, %tiles : memref<2x5x256xi32>, memref<2x5x256xi32>, memref<2xi32>)
  dhs.sparse_attention queries(%queries : memref<2x5x64x576xbf16>)
      rows(%shared_rows : memref<2x5x256xi32>) slots(%shared_slots : memref<2x5x256xi32>)
      history(%history_start, %history_len : memref<2xi64>, memref<2xi32>)
      shared(%tiles : memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 1024, host = ?>)
      layer = 0 output(%out : memref<2x5x64x512xbf16>) scale = 0.0721687824
  return
}
