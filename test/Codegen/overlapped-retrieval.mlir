// With overlap-retrieval, one-layer tensor-core attention reads its missing
// rows from staging that a fetch of 4 CTAs of 1024 threads fills beside it:
// the fetch lets the attention start at once (griddepcontrol
// launch_dependents; the runtime launches the attention as a programmatic
// dependent launch and clears the ready flags before the fetch), lists and
// copies 4 tiles of 64 listed rows a warp (up to 16 requests at a time,
// tile by tile; loads through the non-coherent path), and sets each tile's
// flag with a release store after a warp barrier; the
// attention's producer waits (acquire loads, nanosleep between polls) for
// the flag of a staged row's tile, reports a flag that stays unset, and the
// CTA ends after the fetch (griddepcontrol wait). Without the option the
// attention reads the host store itself.
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
// CHECK: gpu.launch_func @attention::@attention blocks in (%c2, %c1, %c1) threads in (%c384, %c1, %c1) {{.*}} args({{.*}}, %[[STAGE]] : memref<2x256x1x656xi8>, %[[READY]] : memref<2x4xi32>, {{.*}}) {dhs.layer = 0 : i64, dhs.op = "attention"
// CHECK-LABEL: gpu.func @fetch
// CHECK-SAME: known_block_size = array<i32: 1024, 1, 1>
// CHECK: nvvm.griddepcontrol launch_dependents
// CHECK: scf.for
// CHECK: nvvm.bar.warp.sync
// CHECK: memref.atomic_rmw addi
// CHECK: nvvm.bar.warp.sync
// CHECK: scf.for
// CHECK: llvm.load {{.*}} invariant {alignment = 16 : i64} : !llvm.ptr<1> -> vector<4xi32>
// CHECK: vector.store
// CHECK: nvvm.bar.warp.sync
// CHECK: llvm.inline_asm has_side_effects "st.release.gpu.global.u32 [$0], $1;", "l,r,~{memory}"
// CHECK-LABEL: gpu.func @attention
// CHECK: nvvm.setmaxregister  decrease 144
// CHECK: scf.while
// CHECK: llvm.inline_asm has_side_effects "ld.acquire.gpu.global.u32 $0, [$1];", "=r,l,~{memory}"
// CHECK: nvvm.nanosleep
// CHECK: memref.atomic_rmw ori %c128_i32
// CHECK: nvvm.griddepcontrol wait
// CHECK: nvvm.setmaxregister  increase 200

// FUSED-NOT: dhs.fetch
// FUSED: gpu.launch_func @sparse_attention::@sparse_attention
// FUSED-NOT: ready_flags

// MANIFEST: "role": "ready_flags"
// MANIFEST: "role": "ready_flags"
// FETCH: griddepcontrol.launch_dependents;
// FETCH: ld.global.nc.v4.b32
// FETCH: st.release.gpu.global.u32
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
