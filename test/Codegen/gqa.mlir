// GQA rows: a CTA per (query, block of heads sharing one KV head) stages that
// KV head's key into columns [0, 128) and its value into [128, 256).
// RUN: dhs-opt %s --dhs-lower-to-gpu --canonicalize --cse | FileCheck %s
// RUN: rm -rf %t && dhs-compile %s -o %t
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/sparse_attention.ptx -o %t/k.cubin %}
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json

// 32 heads over 8 KV heads: 4 heads (warps) per CTA, 8 CTAs per query.
// CHECK-LABEL: func.func @step
// CHECK: gpu.launch_func @sparse_attention::@sparse_attention blocks in (%{{.*}}, %c8, %{{.*}}) threads in (%c128,
// CHECK: gpu.func @sparse_attention
// CHECK-SAME: workgroup(%[[TILE:.*]] : memref<16x256xf32, #gpu.address_space<workgroup>>
// Keys: chunk (kv head * 16 + i); values: chunk (8 + kv head) * 16 + i.
// CHECK: vector.bitcast %{{.*}} : vector<16xi8> to vector<8xbf16>
// CHECK: vector.store %{{.*}}, %[[TILE]][%{{.*}}, %{{.*}}] {alignment = 16 : i64} : memref<16x256xf32, #gpu.address_space<workgroup>>, vector<8xf32>
// CHECK: vector.store %{{.*}}, %[[TILE]][%{{.*}}, %{{.*}}] {alignment = 16 : i64} : memref<16x256xf32, #gpu.address_space<workgroup>>, vector<8xf32>
// LINK: link: OK
// MANIFEST: "element": "bf16",
// MANIFEST: "format": "gqa",
// MANIFEST: "kv_heads": 8,
func.func @step(%q: memref<2x1x32x128xbf16>, %rows: memref<2x1x64xi32>,
                %slots: memref<2x1x64xi32>, %start: memref<2xi64>, %len: memref<2xi32>,
                %pool: !dhs.kv_pool<#dhs.gqa<kv_heads = 8, head_dim = 128, dtype = bf16>, layers = 1, hbm = 256, host = ?>,
                %out: memref<2x1x32x128xbf16>) {
  dhs.sparse_attention queries(%q : memref<2x1x32x128xbf16>)
      rows(%rows : memref<2x1x64xi32>) slots(%slots : memref<2x1x64xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.gqa<kv_heads = 8, head_dim = 128, dtype = bf16>, layers = 1, hbm = 256, host = ?>)
      layer = 0 output(%out : memref<2x1x32x128xbf16>) scale = 0.0883883461
  return
}
