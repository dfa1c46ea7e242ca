// FP8 rows are dequantized in the kernel while they are staged.
// RUN: dhs-opt %s --dhs-lower-to-gpu --canonicalize --cse --split-input-file | FileCheck %s
// RUN: rm -rf %t && mkdir -p %t && split-file %s %t
// RUN: dhs-compile %t/mla_fp8.mlir -o %t/mla_fp8 && dhs-compile %t/v41_fp8.mlir -o %t/v41_fp8
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/mla_fp8/sparse_attention.ptx -o %t/a.cubin %}
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/v41_fp8/sparse_attention.ptx -o %t/b.cubin %}
// RUN: dhs-run %t/mla_fp8 --link-only | FileCheck %s --check-prefix=LINK
// RUN: dhs-run %t/v41_fp8 --link-only | FileCheck %s --check-prefix=LINK
// LINK: link: OK

//--- mla_fp8.mlir
// DeepSeek-V3.2 rows (656 B): 32 chunks of 16 e4m3 dims, each times the fp32
// scale of its 128 dims (bytes 512 + 4 * (chunk / 8)), then 8 chunks of bf16
// RoPE dims from byte 528 into key columns 512..575.
// CHECK-LABEL: gpu.func @sparse_attention
// CHECK-SAME: memref<?x1x656xi8>
// CHECK-SAME: workgroup(%[[TILE:.*]] : memref<16x576xf32, #gpu.address_space<workgroup>>
// CHECK: vector.load %{{.*}} : memref<?x1x656xi8>, vector<16xi8>
// CHECK: vector.load %{{.*}} {alignment = 4 : i64} : memref<?x1x656xi8>, vector<4xi8>
// CHECK: vector.bitcast %{{.*}} : vector<4xi8> to vector<1xf32>
// CHECK: arith.extui %{{.*}} : vector<16xi8> to vector<16xi32>
// CHECK: arith.bitcast %{{.*}} : vector<16xi32> to vector<16xf32>
// CHECK: arith.mulf %{{.*}} : vector<16xf32>
// CHECK: vector.store %{{.*}}, %[[TILE]][%{{.*}}, %{{.*}}] {alignment = 16 : i64} : memref<16x576xf32, #gpu.address_space<workgroup>>, vector<16xf32>
// CHECK: vector.bitcast %{{.*}} : vector<16xi8> to vector<8xbf16>
// CHECK: vector.store %{{.*}}, %[[TILE]][%{{.*}}, %{{.*}}] {alignment = 16 : i64} : memref<16x576xf32, #gpu.address_space<workgroup>>, vector<8xf32>
func.func @step(%q: memref<2x1x16x576xbf16>, %rows: memref<2x1x64xi32>,
                %slots: memref<2x1x64xi32>, %start: memref<2xi64>, %len: memref<2xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 256, host = ?>,
                %out: memref<2x1x16x512xbf16>) {
  dhs.sparse_attention queries(%q : memref<2x1x16x576xbf16>)
      rows(%rows : memref<2x1x64xi32>) slots(%slots : memref<2x1x64xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 256, host = ?>)
      layer = 0 output(%out : memref<2x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

//--- v41_fp8.mlir
// DeepSeek-V4.1 compressed rows (528 B): 512 e4m3 dims, one ue8m0 scale byte
// (2^(e-127), f32 bits e << 23) per 32 dims at byte 512 + chunk / 2; keys and
// values are the same 512 dims. Two layers per token: layer 1 reads bytes
// 528..1055 of each token.
// CHECK-LABEL: gpu.func @sparse_attention
// CHECK-SAME: memref<?x2x528xi8>
// CHECK-SAME: workgroup(%[[TILE:.*]] : memref<16x512xf32, #gpu.address_space<workgroup>>
// CHECK: %[[C1:.*]] = arith.constant 1 : index
// CHECK: vector.load %{{.*}}[%{{.*}}, %[[C1]], %{{.*}}] {alignment = 16 : i64} : memref<?x2x528xi8>, vector<16xi8>
// CHECK: vector.load %{{.*}}[%{{.*}}, %[[C1]], %{{.*}}] {alignment = 1 : i64} : memref<?x2x528xi8>, vector<1xi8>
// CHECK: arith.shli %{{.*}}, %{{.*}} : i32
// CHECK: vector.store %{{.*}}, %[[TILE]][%{{.*}}, %{{.*}}] {alignment = 16 : i64} : memref<16x512xf32, #gpu.address_space<workgroup>>, vector<16xf32>
// CHECK-NOT: vector<8xbf16>
func.func @step(%q: memref<2x1x16x512xbf16>, %rows: memref<2x1x64xi32>,
                %slots: memref<2x1x64xi32>, %start: memref<2xi64>, %len: memref<2xi32>,
                %pool: !dhs.kv_pool<#dhs.v41_fp8, layers = 2, hbm = 256, host = ?>,
                %out: memref<2x1x16x512xbf16>) {
  dhs.sparse_attention queries(%q : memref<2x1x16x512xbf16>)
      rows(%rows : memref<2x1x64xi32>) slots(%slots : memref<2x1x64xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.v41_fp8, layers = 2, hbm = 256, host = ?>)
      layer = 1 output(%out : memref<2x1x16x512xbf16>) scale = 0.0441941738
  return
}
