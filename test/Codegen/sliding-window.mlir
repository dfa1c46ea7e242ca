// A sliding window (DeepSeek-V4.1): the kernel walks the K selected rows and
// then the W window tokens of each query in one online softmax. Window tokens
// come from the request's ring (source 3), token p at ring row b * R + p mod R;
// a negative token count sets status bit 32.
// RUN: dhs-opt %s --dhs-lower-to-gpu --canonicalize --cse | FileCheck %s
// RUN: rm -rf %t && dhs-compile %s -o %t
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: %if ptxas %{ for f in %t/*.ptx; do %ptxas -arch=sm_90a $f -o $f.cubin || exit 1; done %}
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK
// LINK: link: OK

// 64 heads are 4 CTAs per query: the missing selected rows are fetched once
// into the arena and attended from there (window tokens come from the ring).
// CHECK-LABEL: func.func @step
// CHECK: gpu.launch_func @fetch::@fetch
// CHECK: gpu.launch_func @attention::@attention
// CHECK-SAME: %arg6 : memref<2x132x1x528xi8>, %arg7 : memref<2xi32>, %arg8 : memref<2x5x64x512xbf16>
// CHECK-SAME: dhs.window_size = 128 : i64
// The 10 x 4 CTAs are too few: K + W = 640 entries split 7 ways (96 each).
// CHECK: gpu.launch_func @attention_combine::@attention_combine
// CHECK-LABEL: gpu.func @attention
// CHECK-SAME: %[[RING:[^:]*]]: memref<2x132x1x528xi8>, %[[TOKENS:[^:]*]]: memref<2xi32>, %{{[^:]*}}: memref<2x5x64x512xbf16>, %{{[^:]*}}: memref<2x5x64x7x514xf32>, %[[STATUS:[^:]*]]: memref<1xi32>
// CHECK-DAG: %[[R:.*]] = arith.constant 132 : i64
// CHECK-DAG: %[[KW:.*]] = arith.constant 640 : index
// CHECK: %[[FLAT:.*]] = memref.collapse_shape %[[RING]] {{\[\[}}0, 1], [2], [3]] : memref<2x132x1x528xi8> into memref<264x1x528xi8>
// CHECK: memref.load %[[TOKENS]]
// CHECK: %[[END:.*]] = arith.minui %{{.*}}, %[[KW]] : index
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[END]] step %{{.*}}
// CHECK: memref.atomic_rmw ori %{{.*}}, %[[STATUS]]
// CHECK: memref.atomic_rmw ori %c32_i32, %[[STATUS]]
// CHECK: arith.remui %{{.*}}, %[[R]] : i64
// CHECK: arith.muli %{{.*}}, %[[R]] : i64

// MANIFEST: "role": "window_ring"
// MANIFEST: "role": "window_tokens"
// MANIFEST: "window_size": 128
func.func @step(%q: memref<2x5x64x512xbf16>, %rows: memref<2x5x512xi32>,
    %slots: memref<2x5x512xi32>, %start: memref<2xi64>, %len: memref<2xi32>,
    %pool: !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = 1024, host = ?>,
    %ring: memref<2x132x1x528xi8>, %tokens: memref<2xi32>,
    %out: memref<2x5x64x512xbf16>) {
  dhs.sparse_attention queries(%q : memref<2x5x64x512xbf16>)
      rows(%rows : memref<2x5x512xi32>) slots(%slots : memref<2x5x512xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = 1024, host = ?>)
      window(%ring, %tokens : memref<2x132x1x528xi8>, memref<2xi32>) size = 128
      layer = 0 output(%out : memref<2x5x64x512xbf16>) scale = 0.0441941738
  return
}
