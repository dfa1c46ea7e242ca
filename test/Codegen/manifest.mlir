// RUN: dhs-compile %s --emit=manifest | FileCheck %s

// Roles come from the ops that use the arguments; kernel parameters say
// where each memref descriptor comes from.
// CHECK: "arguments": [
// CHECK:   "dtype": "bf16",
// CHECK:   "index": 0,
// CHECK:   "kind": "memref",
// CHECK:   "role": "queries",
// CHECK:   "shape": [
// CHECK-NEXT: 2,
// CHECK-NEXT: 1,
// CHECK-NEXT: 8,
// CHECK-NEXT: 576
// CHECK:   "role": "row_ids",
// CHECK:   "role": "slots",
// CHECK:   "role": "history_start",
// CHECK:   "role": "history_len",
// CHECK:   "format": "mla_bf16",
// CHECK-NEXT: "hbm_slots": 512,
// CHECK-NEXT: "host_rows": -1,
// CHECK-NEXT: "index": 5,
// CHECK-NEXT: "kind": "kv_pool",
// CHECK-NEXT: "layers": 1,
// CHECK-NEXT: "qk_dim": 576,
// CHECK-NEXT: "role": "kv_pool",
// CHECK-NEXT: "row_bytes": 1152,
// CHECK-NEXT: "row_elems": 576,
// CHECK-NEXT: "v_dim": 512
// CHECK:   "role": "output",
// CHECK: "format": "dhs-step-manifest",
// CHECK: "launches": [
// CHECK:   "block": [
// CHECK-NEXT: 256,
// CHECK:   "dynamic_shared_bytes": 0,
// CHECK:   "grid": [
// CHECK-NEXT: 2,
// CHECK-NEXT: 1,
// CHECK-NEXT: 1
// CHECK:   "kernel": "sparse_attention",
// CHECK:   "layer": 0,
// CHECK:   "op": "sparse_attention",
// CHECK:   "params": [
// CHECK:     "source": "argument"
// CHECK:     "dtype": "i8",
// CHECK-NEXT: "index": 5,
// CHECK-NEXT: "role": "hbm_tier",
// CHECK-NEXT: "shape": [
// CHECK-NEXT: -1,
// CHECK-NEXT: 1,
// CHECK-NEXT: 1152
// CHECK-NEXT: ],
// CHECK-NEXT: "source": "pool_hbm"
// CHECK:     "source": "pool_host"
// CHECK:     "dtype": "i32",
// CHECK-NEXT: "role": "status",
// CHECK-NEXT: "shape": [
// CHECK-NEXT: 1
// CHECK-NEXT: ],
// CHECK-NEXT: "source": "status"
// CHECK:   "ptx": "sparse_attention.ptx",
// CHECK:   "softmax_scale": 0.125
// CHECK: "step": "step",
// CHECK: "target": {
// CHECK-NEXT: "chip": "sm_90a",
// CHECK-NEXT: "features": "+ptx81"
// CHECK: "version": 2
func.func @step(%q: memref<2x1x8x576xbf16>, %rows: memref<2x1x32xi32>,
                %slots: memref<2x1x32xi32>, %start: memref<2xi64>,
                %len: memref<2xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 512, host = ?>,
                %out: memref<2x1x8x512xbf16>) {
  dhs.sparse_attention queries(%q : memref<2x1x8x576xbf16>)
      rows(%rows : memref<2x1x32xi32>) slots(%slots : memref<2x1x32xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 512, host = ?>)
      layer = 0 output(%out : memref<2x1x8x512xbf16>) scale = 0.125
  return
}
