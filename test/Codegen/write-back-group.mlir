// A layer group's attentions with write_back and overlap-retrieval: the
// fused form (up to 8% missing) writes back the host rows each attention
// reads; the staged form's fetch of whole tokens (both layers, 1312 bytes)
// writes each token it copies into its selections' entries (the staged
// attentions never take a tile, so every missing row goes through the
// fetch), and the staged attentions take no ring. The entries come from the
// group's resolve.
// RUN: dhs-opt %s --dhs-lower-to-gpu="min-blocks=0 overlap-retrieval=true" --canonicalize --cse | FileCheck %s
// RUN: rm -rf %t && dhs-compile %s --min-blocks=0 --overlap-retrieval -o %t
// RUN: %if ptxas %{ for f in %t/*.ptx; do %ptxas -arch=sm_90a $f -o $f.cubin || exit 1; done %}
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK
// LINK: link: OK
// A layer of the group writing its part of the tokens into other entries
// than the group's (which the runtime binds, and the decisions read) is
// refused when the step is loaded.
// RUN: sed -e '/^      layer = 0 output/,$ s/write_back(%entries :/write_back(%other :/' \
// RUN:     -e 's/^                %entries: memref<2x1x256xi32>,/&  %other: memref<2x1x256xi32>,/' %s \
// RUN:   > %t.other.mlir
// RUN: rm -rf %t.other && dhs-compile %t.other.mlir --min-blocks=0 -o %t.other
// RUN: not dhs-run %t.other --backend cpu 2>&1 | FileCheck %s --check-prefix=OTHER
// OTHER: error: manifest {{.*}}: launches[2] (sparse_attention) attends over pool argument 8 with other selections, slots, window ring or write-back ring entries than the group's earlier layers

// CHECK-LABEL: func.func @step
// CHECK: %[[RING:.*]] = dhs.pool_write_back of %{{.*}} -> memref<?x2x656xi8>
// CHECK: gpu.launch_func @resolve::@resolve
// CHECK: gpu.launch_func @fetch::@fetch {{.*}} %[[RING]] : memref<?x2x656xi8>
// CHECK-SAME: dhs.missing_above = 8.000000e-02 : f64, dhs.op = "fetch", dhs.roles = ["row_ids", "slots", "write_back", "history_start", "history_len", "host_tier", "write_back_ring", "staging", "ready_flags", "status"]
// CHECK: gpu.launch_func @sparse_attention::@sparse_attention {{.*}} %[[RING]] : memref<?x2x656xi8>
// CHECK-SAME: dhs.layer = 0 : i64, dhs.missing_up_to = 8.000000e-02 : f64
// CHECK-SAME: "write_back", "write_back_ring"
// CHECK-NEXT: gpu.launch_func @attention::@attention
// CHECK-SAME: dhs.layer = 0 : i64, dhs.missing_above = 8.000000e-02 : f64
// CHECK-NOT: write_back
// CHECK: gpu.launch_func @sparse_attention_0::@sparse_attention_0 {{.*}} %[[RING]] : memref<?x2x656xi8>
// CHECK-SAME: dhs.layer = 1 : i64, dhs.missing_up_to = 8.000000e-02 : f64
// CHECK-NEXT: gpu.launch_func @attention_1::@attention_1
// CHECK-SAME: dhs.layer = 1 : i64, dhs.missing_above = 8.000000e-02 : f64
// CHECK-NOT: write_back
// CHECK: return
// The fetch beside the attentions stores each chunk into staging and, where
// the selection has an entry in the ring, there.
// CHECK-LABEL: gpu.func @fetch(
// CHECK-SAME: %[[ENTRIES:[a-z0-9]+]]: memref<2x1x256xi32>, %{{[a-z0-9]+}}: memref<2xi64>, %{{[a-z0-9]+}}: memref<2xi32>, %{{[a-z0-9]+}}: memref<?x2x656xi8>, %[[R:[a-z0-9]+]]: memref<?x2x656xi8>
// CHECK: %[[FLAT:.*]] = memref.collapse_shape %[[ENTRIES]]
// CHECK: nvvm.griddepcontrol launch_dependents
// CHECK: %[[E:.*]] = memref.load %[[FLAT]][%{{.*}}, %{{.*}}] : memref<2x256xi32>
// CHECK: %[[GIVEN:.*]] = arith.cmpi sge, %[[E]], %c0_i32 : i32
// CHECK: %[[NOTPAST:.*]] = arith.cmpi slt, %[[E]], %{{.*}} : i32
// CHECK: %[[IN:.*]] = arith.andi %[[GIVEN]], %[[NOTPAST]] : i1
// CHECK: vector.store %[[CHUNK:.*]], %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] {{.*}} : memref<2x256x1312xi8>, vector<16xi8>
// CHECK-NEXT: scf.if %[[IN]] {
// CHECK: vector.store %[[CHUNK]], %[[R]][
// CHECK: llvm.inline_asm has_side_effects "st.release.gpu.global.u32
func.func @step(%q0: memref<2x1x64x576xbf16>, %q1: memref<2x1x64x576xbf16>,
                %rows: memref<2x1x256xi32>, %slots: memref<2x1x256xi32>,
                %entries: memref<2x1x256xi32>,
                %history_start: memref<2xi64>, %history_len: memref<2xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 1024, host = ?>,
                %out0: memref<2x1x64x512xbf16>, %out1: memref<2x1x64x512xbf16>) {
  dhs.resolve pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 1024, host = ?>)
      rows(%rows : memref<2x1x256xi32>)
      history(%history_start, %history_len : memref<2xi64>, memref<2xi32>)
      into(%slots : memref<2x1x256xi32>) write_back(%entries : memref<2x1x256xi32>)
  dhs.sparse_attention queries(%q0 : memref<2x1x64x576xbf16>)
      rows(%rows : memref<2x1x256xi32>) slots(%slots : memref<2x1x256xi32>)
      history(%history_start, %history_len : memref<2xi64>, memref<2xi32>)
      write_back(%entries : memref<2x1x256xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 1024, host = ?>)
      layer = 0 output(%out0 : memref<2x1x64x512xbf16>) scale = 0.0721687824
  dhs.sparse_attention queries(%q1 : memref<2x1x64x576xbf16>)
      rows(%rows : memref<2x1x256xi32>) slots(%slots : memref<2x1x256xi32>)
      history(%history_start, %history_len : memref<2xi64>, memref<2xi32>)
      write_back(%entries : memref<2x1x256xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 1024, host = ?>)
      layer = 1 output(%out1 : memref<2x1x64x512xbf16>) scale = 0.0721687824
  return
}
