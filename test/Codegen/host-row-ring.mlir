// A fused FP8 attention of one CTA a query (64 heads) whose CTAs walk more
// than four tiles reads its host rows through a host-row ring: the second
// consumer warpgroup copies the host rows of tile t + 4 into ring entry
// t mod 5 (its part of a [CTAs, 5, 64, 656] scratch buffer) at the top of
// its iteration t, and arrives on that entry's staged mbarrier (five more,
// after empty[2]: 40 bytes more shared memory); the producer waits on it
// before it classifies the tile, and reads the rows there with coherent
// loads (ld.global, not ld.global.nc). The resident form takes the ring and
// leaves it alone. Four tiles or fewer (tensor-core-attention.mlir) keep no
// ring.
// RUN: dhs-opt %s --dhs-lower-to-gpu="min-blocks=0" --canonicalize --cse | FileCheck %s
// RUN: rm -rf %t && dhs-compile %s --min-blocks=0 -o %t
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: grep -c 'ld.global.nc' %t/sparse_attention.ptx | FileCheck %s --check-prefix=NC
// RUN: %if ptxas %{ %ptxas -arch=sm_90a -v %t/sparse_attention.ptx -o %t/sparse_attention.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS %}
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK

// CHECK-LABEL: func.func @step
// CHECK: %[[RING:.*]] = dhs.scratch {offset = 0 : i64} : memref<2x5x64x656xi8>
// CHECK: gpu.launch_func @sparse_attention::@sparse_attention blocks in (%c2, %c1, %c1) threads in (%c384, %c1, %c1) dynamic_shared_memory_size %c231240_i32
// CHECK-SAME: %[[RING]] : memref<2x5x64x656xi8>
// CHECK-SAME: "output", "host_row_ring", "status"
// CHECK-LABEL: gpu.func @sparse_attention(
// CHECK-COUNT-2: nvvm.mbarrier.init %{{.*}}, %c128_i32
// CHECK-COUNT-2: nvvm.mbarrier.init %{{.*}}, %c256_i32
// CHECK-COUNT-5: nvvm.mbarrier.init %{{.*}}, %c128_i32
// Producer: before classifying tile t + 1 (from tile 4 on) it waits for its
// ring entry (t + 1 - 4) mod 5, at 230176 + 8 x entry.
// CHECK: nvvm.setmaxregister  decrease 144
// CHECK: scf.for %[[TILE:.*]] = %c0 to %c8
// CHECK: %[[NEXT:.*]] = arith.addi %[[TILE]], %c1 : index
// CHECK: arith.cmpi uge, %[[NEXT]], %c4 : index
// CHECK: scf.if
// CHECK-NEXT: %[[SEQ:.*]] = arith.addi %[[TILE]], %c-3 : index
// CHECK-NEXT: arith.remui %[[SEQ]], %c5 : index
// CHECK: arith.addi %{{.*}}, %c230176_i32 : i32
// CHECK: arith.divui %[[SEQ]], %c5 : index
// CHECK: nvvm.mbarrier.try_wait.parity
// The rows' loads are coherent (the ring is written by the kernel).
// CHECK-NOT: llvm.load {{.*}} invariant
// CHECK: nvvm.convert.f8x2.to.f16x2
// CHECK: nvvm.setmaxregister  increase 200
// The second consumer warpgroup: the request's history bounds once, then in
// each iteration tile t + 4's selections, a ballot of the host rows of the
// warp's 16, and a loop over them two at a time (the lowest set bits; their
// ids from their lanes), 16 bytes a lane (chunks l and l + 32 of 41).
// CHECK: nvvm.setmaxregister  decrease 160
// CHECK: memref.load %arg3[%block_id_x] : memref<2xi64>
// CHECK-NEXT: memref.load %arg4[%block_id_x] : memref<2xi32>
// CHECK: scf.for %[[T:.*]] = %c0 to %c8
// CHECK-NEXT: %[[STAGED:.*]] = arith.addi %[[T]], %c4 : index
// CHECK-NEXT: arith.cmpi ult, %[[STAGED]], %c8 : index
// CHECK: memref.load %arg1[%block_id_x, %c0, %{{.*}}] : memref<2x1x512xi32>
// CHECK-NEXT: memref.load %arg2[%block_id_x, %c0, %{{.*}}] : memref<2x1x512xi32>
// CHECK: nvvm.vote.sync  ballot
// CHECK: arith.remui %[[T]], %c5 : index
// CHECK: scf.while
// CHECK: llvm.intr.cttz
// CHECK: gpu.shuffle  idx
// CHECK: arith.cmpi ult, %{{.*}}, %c41_i32 : i32
// CHECK: llvm.load {{.*}} invariant
// CHECK: gpu.shuffle  idx
// CHECK-COUNT-4: llvm.store {{.*}} : vector<4xi32>, !llvm.ptr<1>
// CHECK: arith.addi %{{.*}}, %c230176_i32 : i32
// CHECK: nvvm.mbarrier.arrive
// CHECK: nvvm.mbarrier.try_wait.parity
// CHECK: nvvm.barrier id = %c1_i32 number_of_threads = %c256_i32
// CHECK: gpu.return
// The resident form: no ring barrier, no copies.
// CHECK-LABEL: gpu.func @sparse_attention_resident
// CHECK-NOT: nvvm.vote.sync
// CHECK-NOT: c230176
// CHECK: gpu.return

// MANIFEST: "arena_bytes": 419840
// MANIFEST: "dynamic_shared_bytes": 231240
// MANIFEST: "offset": 0,
// MANIFEST-NEXT: "role": "host_row_ring",
// The resident form's 44 and the copies' 4 (host rows are read once).
// NC: {{^}}48{{$}}
// PTXAS-NOT: Potential Performance Loss
// PTXAS: Used 168 registers
// PTXAS: Used 168 registers
// LINK: link: OK

func.func @step(%queries: memref<2x1x64x576xbf16>, %rows: memref<2x1x512xi32>,
                %slots: memref<2x1x512xi32>, %history_start: memref<2xi64>,
                %history_len: memref<2xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 1024, host = ?>,
                %out: memref<2x1x64x512xbf16>) {
  dhs.sparse_attention queries(%queries : memref<2x1x64x576xbf16>)
      rows(%rows : memref<2x1x512xi32>) slots(%slots : memref<2x1x512xi32>)
      history(%history_start, %history_len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 1024, host = ?>)
      layer = 0 output(%out : memref<2x1x64x512xbf16>) scale = 0.0721687824
  return
}
