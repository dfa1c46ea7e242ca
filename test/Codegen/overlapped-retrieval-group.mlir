// With overlap-retrieval, the tensor-core attentions of a layer group that
// read one selection get a second form: one fetch of whole tokens (all the
// pool's layers, 1312 bytes here) that runs beside them, with one set of
// ready flags, and staged attentions over it. The runtime runs one form a
// step by the share of the group's selected rows missing from HBM: the fused
// attentions (each reading its own host rows; their resident kernels up to
// 2%) up to 8%, the fetch and staged attentions above. Each launch carries
// its band (dhs.missing_up_to, dhs.missing_above), each staged attention
// comes right after its layer's fused one. A group's staged attention never
// takes a tile (the other layers would then read its host rows too): its
// producer waits until the fetch has staged the tile (acquire loads while
// the flag is not 1, nanosleep between polls; a flag that stays unset is
// reported), and each attention lets the next layer's start once all its
// CTAs run (griddepcontrol launch_dependents: the runtime launches every
// attention with ready flags as a programmatic dependent launch), so that
// the next layer's CTAs take the SMs of finished ones while the fetch runs:
// only a grid's first CTA waits for the grid before it as it ends (which
// orders the grids' ends), the others leave at once.
// Without the option each layer reads its host rows itself, every step.
// RUN: dhs-opt %s --dhs-lower-to-gpu="min-blocks=0 overlap-retrieval=true" --canonicalize --cse | FileCheck %s
// RUN: dhs-opt %s --dhs-lower-to-gpu="min-blocks=0" | FileCheck %s --check-prefix=FUSED
// RUN: rm -rf %t && dhs-compile %s --min-blocks=0 --overlap-retrieval -o %t
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: FileCheck %s --check-prefix=ATTENTION < %t/attention.ptx
// RUN: %if ptxas %{ for f in %t/*.ptx; do %ptxas -arch=sm_90a $f -o $f.cubin || exit 1; done %}
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK
// RUN: dhs-run %t --backend cpu --resident 0,0.5,0.95,1 --history-rows 512 | FileCheck %s --check-prefix=CPU

// CHECK-LABEL: func.func @step
// CHECK-DAG: %[[READY:.*]] = dhs.scratch {offset = 671744 : i64} : memref<2x4xi32>
// CHECK-DAG: %[[STAGE:.*]] = dhs.scratch {offset = 0 : i64} : memref<2x256x2x656xi8>
// CHECK: gpu.launch_func @fetch::@fetch blocks in (%c4, %c1, %c1) threads in (%c1024, %c1, %c1) {{.*}}, %[[STAGE]] : memref<2x256x2x656xi8>, %[[READY]] : memref<2x4xi32>, {{.*}} {dhs.missing_above = 8.000000e-02 : f64, dhs.op = "fetch"
// CHECK-NOT: @fetch
// CHECK: gpu.launch_func @sparse_attention::@sparse_attention {{.*}} {dhs.layer = 0 : i64, dhs.missing_up_to = 8.000000e-02 : f64, dhs.op = "sparse_attention", dhs.resident_kernel = "sparse_attention_resident"
// CHECK-NEXT: gpu.launch_func @attention::@attention {{.*}}, %[[STAGE]] : memref<2x256x2x656xi8>, %[[READY]] : memref<2x4xi32>, {{.*}} {dhs.dependent_launch, dhs.layer = 0 : i64, dhs.missing_above = 8.000000e-02 : f64, dhs.op = "attention"
// CHECK-NOT: @fetch
// CHECK: gpu.launch_func @sparse_attention_0::@sparse_attention_0 {{.*}} {dhs.layer = 1 : i64, dhs.missing_up_to = 8.000000e-02 : f64, dhs.op = "sparse_attention"
// CHECK-NEXT: gpu.launch_func @attention_1::@attention_1 {{.*}}, %[[STAGE]] : memref<2x256x2x656xi8>, %[[READY]] : memref<2x4xi32>, {{.*}} {dhs.dependent_launch, dhs.layer = 1 : i64, dhs.missing_above = 8.000000e-02 : f64, dhs.op = "attention"
// CHECK-LABEL: gpu.func @fetch
// CHECK: nvvm.griddepcontrol launch_dependents
// CHECK: "atom.acquire.gpu.global.cas.b32 $0, [$1], $2, $3;"{{.*}}, %c0_i32, %c2_i32
// CHECK: "st.release.gpu.global.u32 [$0], $1;"
// CHECK-LABEL: gpu.func @attention(
// CHECK: nvvm.griddepcontrol launch_dependents
// CHECK: nvvm.setmaxregister  decrease 144
// CHECK-NOT: atom.acquire.gpu.global.cas
// CHECK: %[[MISSING:.*]] = arith.cmpi ne, %[[FLAG:.*]], %c0_i64 : i64
// CHECK-NEXT: scf.if %[[MISSING]] {
// CHECK-NEXT: %[[POLL:.*]]:2 = scf.while
// CHECK-NEXT: "ld.acquire.gpu.global.u32 $0, [$1];", "=r,l,~{memory}" %[[FLAG]]
// CHECK-NEXT: arith.cmpi ne, %{{.*}}, %c1_i32 : i32
// CHECK: nvvm.nanosleep
// CHECK: %[[UNSET:.*]] = arith.cmpi ne, %[[POLL]]#1, %c1_i32 : i32
// CHECK-NEXT: scf.if %[[UNSET]] {
// CHECK-NEXT: memref.atomic_rmw ori %c128_i32
// CHECK-NOT: atom.acquire.gpu.global.cas
// CHECK: %[[Z:.*]] = arith.index_cast %block_id_z : index to i32
// CHECK-NEXT: %[[FIRST_SPLIT:.*]] = arith.cmpi eq, %[[Z]], %c0_i32 : i32
// CHECK-NEXT: %[[FIRST_REQUEST_HEADS:.*]] = arith.andi
// CHECK-NEXT: %[[FIRST:.*]] = arith.andi %[[FIRST_REQUEST_HEADS]], %[[FIRST_SPLIT]] : i1
// CHECK-NEXT: scf.if %[[FIRST]] {
// CHECK-NEXT: nvvm.griddepcontrol wait
// CHECK-LABEL: gpu.func @attention_1(
// CHECK: nvvm.griddepcontrol launch_dependents
// CHECK-NOT: atom.acquire.gpu.global.cas
// CHECK: %[[Z:.*]] = arith.index_cast %block_id_z : index to i32
// CHECK-NEXT: %[[FIRST_SPLIT:.*]] = arith.cmpi eq, %[[Z]], %c0_i32 : i32
// CHECK-NEXT: %[[FIRST_REQUEST_HEADS:.*]] = arith.andi
// CHECK-NEXT: %[[FIRST:.*]] = arith.andi %[[FIRST_REQUEST_HEADS]], %[[FIRST_SPLIT]] : i1
// CHECK-NEXT: scf.if %[[FIRST]] {
// CHECK-NEXT: nvvm.griddepcontrol wait

// FUSED-NOT: dhs.fetch
// FUSED: gpu.launch_func @sparse_attention::@sparse_attention
// FUSED: gpu.launch_func @sparse_attention_0::@sparse_attention_0
// FUSED-NOT: ready_flags

// MANIFEST: "kernel": "fetch",
// MANIFEST: "missing_above": 0.080000000000000002,
// MANIFEST: "kernel": "sparse_attention",
// MANIFEST: "missing_up_to": 0.080000000000000002,
// MANIFEST: "resident_kernel": "sparse_attention_resident"
// MANIFEST: "kernel": "attention",
// MANIFEST: "missing_above": 0.080000000000000002,

// ATTENTION: griddepcontrol.launch_dependents;
// ATTENTION-NOT: atom.acquire.gpu.global.cas
// ATTENTION: ld.acquire.gpu.global.u32
// ATTENTION: nanosleep.u32
// ATTENTION: griddepcontrol.wait;
// LINK: link: OK
// CPU: form at 0.00: the launches for rows missing above 8%
// CPU-NEXT: form at 0.50: the launches for rows missing above 8%
// CPU-NEXT: form at 0.95: the launches for rows missing in (2%, 8%]
// CPU-NEXT: form at 1.00: the launches for rows missing up to 2%
// CPU-NEXT: outputs at all 4 residency mixes: bit-identical
// CPU: result: PASS

func.func @step(%q0: memref<2x1x64x576xbf16>, %q1: memref<2x1x64x576xbf16>,
                %rows: memref<2x1x256xi32>, %slots: memref<2x1x256xi32>,
                %history_start: memref<2xi64>, %history_len: memref<2xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 1024, host = ?>,
                %out0: memref<2x1x64x512xbf16>, %out1: memref<2x1x64x512xbf16>) {
  dhs.sparse_attention queries(%q0 : memref<2x1x64x576xbf16>)
      rows(%rows : memref<2x1x256xi32>) slots(%slots : memref<2x1x256xi32>)
      history(%history_start, %history_len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 1024, host = ?>)
      layer = 0 output(%out0 : memref<2x1x64x512xbf16>) scale = 0.0721687824
  dhs.sparse_attention queries(%q1 : memref<2x1x64x576xbf16>)
      rows(%rows : memref<2x1x256xi32>) slots(%slots : memref<2x1x256xi32>)
      history(%history_start, %history_len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 1024, host = ?>)
      layer = 1 output(%out1 : memref<2x1x64x512xbf16>) scale = 0.0721687824
  return
}
