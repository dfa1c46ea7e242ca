// With overlap-retrieval, one-layer tensor-core attention and a fetch of 4
// CTAs of 1024 threads beside it share the missing rows tile by tile: the
// fetch lets the attention start at once (griddepcontrol launch_dependents;
// the runtime launches the attention as a programmatic dependent launch and
// clears the ready flags before the fetch), claims 4 tiles of 64 listed rows
// a warp (compare-and-swap 0 -> 2 by lanes 0-3, broadcast by shuffles; up to
// 16 requests at a time, tile by tile), lists and copies the claimed tiles'
// missing rows (loads through the non-coherent path) and marks each staged
// (release store of 1 after a warp barrier). The attention's producer, for
// a missing row, takes the tile if nobody has (0 -> 3) and then reads the
// host store itself; if the fetch is copying it, it waits (acquire loads
// while 2, nanosleep between polls; a flag that stays 2 is reported); once
// staged it reads staging. The grid ends after the fetch: its first CTA
// waits for it as it ends (griddepcontrol wait; the others leave their SMs
// at once), and it lets a dependent launch start once all its CTAs run (a
// layer group's next attention: overlapped-retrieval-group.mlir). So the attention
// takes the histories and the host store too.
// Without the option the attention reads the host store itself.
// RUN: dhs-opt %s --dhs-lower-to-gpu="min-blocks=0 overlap-retrieval=true" --canonicalize --cse | FileCheck %s
// RUN: dhs-opt %s --dhs-lower-to-gpu="min-blocks=0" | FileCheck %s --check-prefix=FUSED
// RUN: rm -rf %t && dhs-compile %s --min-blocks=0 --overlap-retrieval -o %t
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: FileCheck %s --check-prefix=FETCH < %t/fetch.ptx
// RUN: FileCheck %s --check-prefix=ATTENTION < %t/attention.ptx
// RUN: %if ptxas %{ for f in %t/*.ptx; do %ptxas -arch=sm_90a $f -o $f.cubin || exit 1; done %}
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK

// CHECK-LABEL: func.func @step
// CHECK-DAG: %[[STAGE:.*]] = dhs.scratch {offset = 0 : i64} : memref<2x256x1x656xi8>
// CHECK-DAG: %[[READY:.*]] = dhs.scratch {offset = 335872 : i64} : memref<2x4xi32>
// CHECK: gpu.launch_func @fetch::@fetch blocks in (%c4, %c1, %c1) threads in (%c1024, %c1, %c1) dynamic_shared_memory_size %c98432_i32 args({{.*}}, %[[STAGE]] : memref<2x256x1x656xi8>, %[[READY]] : memref<2x4xi32>, %{{.*}} : memref<1xi32>)
// CHECK: gpu.launch_func @attention::@attention blocks in (%c2, %c1, %c1) threads in (%c384, %c1, %c1) {{.*}} args({{.*}}, %[[STAGE]] : memref<2x256x1x656xi8>, %[[READY]] : memref<2x4xi32>, {{.*}}) {dhs.dependent_launch, dhs.layer = 0 : i64, dhs.op = "attention", dhs.roles = ["queries", "row_ids", "slots", "staging", "ready_flags", "hbm_tier", "history_start", "history_len", "host_tier", "output", "status"]
// CHECK-LABEL: gpu.func @fetch
// CHECK-SAME: known_block_size = array<i32: 1024, 1, 1>
// CHECK: nvvm.griddepcontrol launch_dependents
// CHECK: scf.for
// CHECK: llvm.inline_asm has_side_effects "atom.acquire.gpu.global.cas.b32 $0, [$1], $2, $3;", "=r,l,r,r,~{memory}" %{{.*}}, %c0_i32, %c2_i32
// CHECK: nvvm.bar.warp.sync
// CHECK: gpu.shuffle  idx
// CHECK: memref.atomic_rmw addi
// CHECK: nvvm.bar.warp.sync
// CHECK: scf.for
// CHECK: llvm.load {{.*}} invariant {alignment = 16 : i64} : !llvm.ptr<1> -> vector<4xi32>
// CHECK: vector.store
// CHECK: nvvm.bar.warp.sync
// CHECK: llvm.inline_asm has_side_effects "st.release.gpu.global.u32 [$0], $1;", "l,r,~{memory}"
// CHECK-LABEL: gpu.func @attention
// CHECK: nvvm.griddepcontrol launch_dependents
// CHECK: nvvm.setmaxregister  decrease 144
// CHECK: llvm.inline_asm has_side_effects "atom.acquire.gpu.global.cas.b32 $0, [$1], $2, $3;", "=r,l,r,r,~{memory}" %{{.*}}, %c0_i32, %c3_i32
// CHECK: scf.while
// CHECK: llvm.inline_asm has_side_effects "ld.acquire.gpu.global.u32 $0, [$1];", "=r,l,~{memory}"
// CHECK: nvvm.nanosleep
// CHECK: memref.atomic_rmw ori %c128_i32
// CHECK: %[[Z:.*]] = arith.index_cast %block_id_z : index to i32
// CHECK-NEXT: %[[FIRST_SPLIT:.*]] = arith.cmpi eq, %[[Z]], %c0_i32 : i32
// CHECK-NEXT: %[[FIRST_REQUEST_HEADS:.*]] = arith.andi
// CHECK-NEXT: %[[FIRST:.*]] = arith.andi %[[FIRST_REQUEST_HEADS]], %[[FIRST_SPLIT]] : i1
// CHECK-NEXT: scf.if %[[FIRST]] {
// CHECK-NEXT: nvvm.griddepcontrol wait
// CHECK-NEXT: }
// CHECK: nvvm.setmaxregister  increase 200

// FUSED-NOT: dhs.fetch
// FUSED: gpu.launch_func @sparse_attention::@sparse_attention
// FUSED-NOT: ready_flags

// The fetch starts after the launches before it; the attention beside it
// (a programmatic dependent launch: it waits on the ready flags itself).
// MANIFEST-NOT: "dependent_launch"
// MANIFEST: "op": "fetch"
// MANIFEST: "role": "ready_flags"
// MANIFEST: "dependent_launch": true
// MANIFEST: "op": "attention"
// MANIFEST: "role": "ready_flags"
// FETCH: griddepcontrol.launch_dependents;
// FETCH: atom.acquire.gpu.global.cas.b32
// FETCH: shfl.sync.idx.b32
// FETCH: ld.global.nc.v4.b32
// FETCH: st.release.gpu.global.u32
// ATTENTION: griddepcontrol.launch_dependents;
// ATTENTION: atom.acquire.gpu.global.cas.b32
// ATTENTION: ld.acquire.gpu.global.u32
// ATTENTION: nanosleep.u32
// ATTENTION: griddepcontrol.wait;
// LINK: link: OK

func.func @step(%queries: memref<2x1x64x576xbf16>, %rows: memref<2x1x256xi32>,
                %slots: memref<2x1x256xi32>, %history_start: memref<2xi64>,
                %history_len: memref<2xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 1024, host = ?>,
                %out: memref<2x1x64x512xbf16>) {
  dhs.sparse_attention queries(%queries : memref<2x1x64x576xbf16>)
      rows(%rows : memref<2x1x256xi32>) slots(%slots : memref<2x1x256xi32>)
      history(%history_start, %history_len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 1024, host = ?>)
      layer = 0 output(%out : memref<2x1x64x512xbf16>) scale = 0.0721687824
  return
}
