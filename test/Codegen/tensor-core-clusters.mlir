// 128 heads of bf16 MLA rows: the two 64-head CTAs of a query form a 2-CTA
// cluster (nvvm.cluster_dim, PTX .reqnctapercluster) and gather each tile
// once for both. Each producer fills half of every tile (its cluster rank's
// 32 rows) into its own tile buffer, then copies that half into the peer's
// with ten bulk copies (cp.async.bulk.shared::cluster: each block's 4 KB
// half, and the 128 bytes of its row biases), whose "remote" mbarriers
// (count 1, armed with the peer's 36992 bytes per tile) complete on those
// bytes. A tile buffer is free again once one thread
// of each consumer warpgroup of both CTAs arrived on its empty barrier
// (count 4, remote arrives). Cluster barriers before the first remote access
// and before exit. FP8 rows stay unclustered (measured slower, bench/NOTES.md),
// and so does tensor-core-clusters=false. The FP8 producer of head block 0
// prefetches into L2 the rows of tile t + 2 once it has published tile t (the
// other CTA of the query reads the same rows); bf16 producers do not.
// For compute-sanitizer racecheck, which does not credit ordering that reaches
// thread 32 / 64's arrival through a named barrier, every consumer thread
// carries the arrivals on both CTAs' empty barriers in a PTX comment
// (`// dhs.racecheck: ...`), and the count 4 its racecheck value 4 + 2 x 256
// = 516; tools/racecheck-ptx.sh (tools/gpu-soak.sh sanitize) turns them into
// instructions, and refuses cluster arrivals without the markers. The kernel
// the GPU runs has neither: the same SASS as without the markers.
// RUN: dhs-opt %s --dhs-lower-to-gpu="min-blocks=0" --canonicalize --cse | FileCheck %s
// RUN: dhs-opt %s --dhs-lower-to-gpu="min-blocks=0 tensor-core-clusters=false" \
// RUN:   | FileCheck %s --check-prefix=OFF --implicit-check-not=nvvm.cluster_dim --implicit-check-not=shared::cluster \
// RUN:   --implicit-check-not=acquire.cluster --implicit-check-not=dhs.racecheck \
// RUN:   --implicit-check-not=nvvm.prefetch
// RUN: sed 's/mla_bf16/mla_fp8/g' %s | dhs-opt --dhs-lower-to-gpu="min-blocks=0" \
// RUN:   | FileCheck %s --check-prefix=PREFETCH --implicit-check-not=nvvm.cluster_dim --implicit-check-not=shared::cluster \
// RUN:   --implicit-check-not=acquire.cluster --implicit-check-not=dhs.racecheck
// RUN: rm -rf %t && dhs-compile %s --min-blocks=0 -o %t
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: FileCheck %s --check-prefix=PTX < %t/attention.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90a -v %t/attention.ptx -o %t/attention.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS %}
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK
// The racecheck form: markers replaced, bar.arrive waits, and ptxas assembles it.
// RUN: cp %t/attention.ptx %t/racecheck.ptx && %dhs_src/tools/racecheck-ptx.sh %t/racecheck.ptx
// RUN: FileCheck %s --check-prefix=RACECHECK < %t/racecheck.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90a -v %t/racecheck.ptx -o %t/racecheck.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS %}
// Cluster arrivals without the markers (or without the count's) are refused,
// the file left as it was.
// RUN: sed 's@ *// dhs\.racecheck: .*@@' %t/attention.ptx > %t/unmarked.ptx && cp %t/unmarked.ptx %t/unmarked.orig
// RUN: not %dhs_src/tools/racecheck-ptx.sh %t/unmarked.ptx 2>&1 | FileCheck %s --check-prefix=REFUSED
// RUN: cmp %t/unmarked.ptx %t/unmarked.orig
// RUN: sed 's@; // dhs\.racecheck: mov\.b32 .*@;@' %t/attention.ptx > %t/nocount.ptx
// RUN: not %dhs_src/tools/racecheck-ptx.sh %t/nocount.ptx 2>&1 | FileCheck %s --check-prefix=NOCOUNT

// CHECK-LABEL: func.func @step
// CHECK: gpu.launch_func @attention::@attention blocks in (%c2, %c2, %c1) threads in (%c384, %c1, %c1) dynamic_shared_memory_size %c231216_i32
// CHECK-LABEL: gpu.func @attention
// CHECK-SAME: nvvm.cluster_dim = array<i32: 1, 2, 1>
// CHECK: %[[RANK:.*]] = nvvm.read.ptx.sreg.cluster.ctarank
// CHECK: %[[EMPTY_COUNT:.*]] = llvm.inline_asm "mov.b32 $0, 4; // dhs.racecheck: mov.b32 $0, 516;", "=r"  : () -> i32
// CHECK: nvvm.mbarrier.init %{{.*}}, %c128_i32
// CHECK: nvvm.mbarrier.init %{{.*}}, %c128_i32
// CHECK: nvvm.mbarrier.init %{{.*}}, %[[EMPTY_COUNT]] :
// CHECK: nvvm.mbarrier.init %{{.*}}, %[[EMPTY_COUNT]] :
// CHECK: nvvm.mbarrier.init %{{.*}}, %c1_i32
// CHECK: nvvm.mbarrier.init %{{.*}}, %c1_i32
// CHECK: nvvm.fence.mbarrier.init
// CHECK: nvvm.cluster.arrive
// CHECK-NEXT: nvvm.cluster.wait
// Producer: it waits for empty[b] with a cluster-scope acquire (the releasing
// arrivals include the peer's consumers), the peer's tile bytes are expected,
// then its half of the tile is stored, fenced to the async proxy, and once
// the producer's threads are past the named barrier, its first 10 threads copy
// it to the peer. The peer's shared base and barriers are mapped once, before
// the loop.
// CHECK: nvvm.setmaxregister  decrease 144
// CHECK: %[[PEER:.*]] = arith.xori %[[RANK]], %c1_i32 : i32
// CHECK-NEXT: %[[PEER_BASE:.*]] = nvvm.mapa %{{.*}}, %[[PEER]] : !llvm.ptr<3> -> !llvm.ptr<7>
// CHECK: %[[PEER_BARRIERS:.*]] = nvvm.mapa %{{.*}}, %[[PEER]] : !llvm.ptr<3> -> !llvm.ptr<7>
// CHECK-NOT: nvvm.mapa
// CHECK: scf.for
// CHECK: arith.addi %{{.*}}, %c230160_i32
// CHECK-NEXT: %[[FREE:.*]] = llvm.getelementptr
// CHECK-NEXT: llvm.inline_asm has_side_effects "{{.*}}mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 P1, [$0], $1, 10000000;{{.*}}" %[[FREE]], %{{.*}} : (!llvm.ptr<3>, i32) -> ()
// CHECK: nvvm.mbarrier.arrive.expect_tx %{{.*}}, %c36992_i32
// CHECK: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>
// CHECK-NEXT: nvvm.barrier id = %c4_i32 number_of_threads = %c128_i32
// CHECK-NEXT: %[[COPIER:.*]] = arith.cmpi ult, %{{.*}}, %c10_i32 : i32
// CHECK-NEXT: scf.if %[[COPIER]] {
// CHECK-NOT: nvvm.mapa
// CHECK: llvm.inline_asm has_side_effects "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [$0], [$1], $2, [$3];"
// CHECK-NOT: cp.async.bulk
// CHECK: nvvm.setmaxregister  increase 200
// Consumers wait for both halves, release the tile in both CTAs: every thread
// passes the racecheck marker (empty[b] = full[b] + 16 bytes, from the pointer
// the full wait used), then thread 32 / 64 arrives.
// CHECK: nvvm.mbarrier.try_wait.parity %[[FULL:.*]], %[[PARITY:.*]], %c10000000_i32
// CHECK: nvvm.mbarrier.try_wait.parity %{{.*}}, %[[PARITY]], %c10000000_i32
// CHECK: llvm.inline_asm has_side_effects "// dhs.racecheck: { .reg .b64 %dhs_rc<3>; add.s64 %dhs_rc0, $0, 16; mapa.shared::cluster.u64 %dhs_rc1, %dhs_rc0, 0; mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%dhs_rc1]; mapa.shared::cluster.u64 %dhs_rc2, %dhs_rc0, 1; mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%dhs_rc2]; }", "l,~{memory}" %[[FULL]] : (!llvm.ptr<3>) -> ()
// CHECK-NEXT: arith.cmpi eq, %{{.*}}, %c32_i32
// CHECK-NEXT: scf.if
// CHECK: nvvm.mapa %{{.*}}, %c0_i32
// CHECK: nvvm.mbarrier.arrive %{{.*}} {scope = #nvvm.mem_scope<cluster>} : !llvm.ptr<7>
// CHECK: nvvm.mapa %{{.*}}, %c1_i32
// CHECK: nvvm.mbarrier.arrive %{{.*}} {scope = #nvvm.mem_scope<cluster>} : !llvm.ptr<7>
// The second warpgroup's release, the same way.
// CHECK: nvvm.mbarrier.try_wait.parity %[[FULL2:.*]], %[[PARITY2:.*]], %c10000000_i32
// CHECK: llvm.inline_asm has_side_effects "// dhs.racecheck: {{.*}}" %[[FULL2]] : (!llvm.ptr<3>) -> ()
// CHECK-NEXT: arith.cmpi eq, %{{.*}}, %c32_i32
// CHECK: nvvm.mbarrier.arrive %{{.*}} {scope = #nvvm.mem_scope<cluster>} : !llvm.ptr<7>
// CHECK: nvvm.mbarrier.arrive %{{.*}} {scope = #nvvm.mem_scope<cluster>} : !llvm.ptr<7>
// CHECK-NOT: dhs.racecheck
// CHECK: nvvm.cluster.arrive
// CHECK-NEXT: nvvm.cluster.wait
// CHECK-NEXT: gpu.return

// Without clusters (and FP8 rows, never clustered) none of the cluster's
// operations appear anywhere in the module (the --implicit-check-not
// options above), nor, with bf16 rows, a prefetch.
// OFF-LABEL: gpu.func @attention(
// OFF: gpu.return

// Tile t + 2's rows (2 a thread, 2 lines each) after the full arrival, in
// head block 0 (headBase == 0) only.
// PREFETCH-LABEL: gpu.func @attention
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

// MANIFEST: "dynamic_shared_bytes": 231216
// PTX: .explicitcluster
// PTX-NEXT: .reqnctapercluster 1, 2, 1
// PTX: mov.b32 %r[[COUNT:[0-9]+]], 4; // dhs.racecheck: mov.b32 %r[[COUNT]], 516;
// PTX: mbarrier.init.shared.b64 [%rd{{[0-9]+}}+230160], %r[[COUNT]];
// PTX-NEXT: mbarrier.init.shared.b64 [%rd{{[0-9]+}}+230168], %r[[COUNT]];
// PTX: barrier.cluster.arrive
// PTX: {{^}}	// dhs.racecheck: { .reg .b64 %dhs_rc<3>; add.s64 %dhs_rc0, %rd{{[0-9]+}}, 16; mapa.shared::cluster.u64 %dhs_rc1, %dhs_rc0, 0; mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%dhs_rc1]; mapa.shared::cluster.u64 %dhs_rc2, %dhs_rc0, 1; mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%dhs_rc2]; }
// PTX: {{^}}	mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%rd{{[0-9]+}}], %r{{[0-9]+}};
// PTX: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 P1, [%r{{[0-9]+}}], %r{{[0-9]+}}, 10000000;
// PTX: cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes
// PTXAS: 0 bytes spill stores, 0 bytes spill loads
// PTXAS: Used 168 registers
// LINK: link: OK

// RACECHECK-NOT: dhs.racecheck
// RACECHECK-NOT: bar.arrive
// RACECHECK: {{^}}	mov.b32 %r[[COUNT:[0-9]+]], 516;{{$}}
// RACECHECK: mbarrier.init.shared.b64 [%rd{{[0-9]+}}+230160], %r[[COUNT]];
// RACECHECK: {{^}}	{ .reg .b64 %dhs_rc<3>; add.s64 %dhs_rc0, %rd{{[0-9]+}}, 16; mapa.shared::cluster.u64 %dhs_rc1, %dhs_rc0, 0; mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%dhs_rc1]; mapa.shared::cluster.u64 %dhs_rc2, %dhs_rc0, 1; mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%dhs_rc2]; }{{$}}
// RACECHECK: {{^}}	{ .reg .b64 %dhs_rc<3>; add.s64 %dhs_rc0, %rd{{[0-9]+}}, 16;
// RACECHECK-NOT: dhs.racecheck
// RACECHECK-NOT: bar.arrive
// REFUSED: racecheck-ptx: {{.*}}unmarked.ptx has cluster mbarrier arrivals but 0 racecheck arrival markers and 0 count markers
// NOCOUNT: racecheck-ptx: {{.*}}nocount.ptx has cluster mbarrier arrivals but 2 racecheck arrival markers and 0 count markers

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
