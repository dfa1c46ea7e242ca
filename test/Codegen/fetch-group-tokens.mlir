// The fetch of a layer group's tokens (FP8 rows in groups of 4: 2624-byte
// tokens of the host store): like a row of one layer, a CTA per 256 listed
// rows compacts its missing ones in shared memory, then a warp copies each
// token, 6 loads of 16 bytes in flight per lane (164 chunks, shifted by up
// to 7 to cover whole 128-byte lines: 192 a round).
// RUN: dhs-opt %s --dhs-plan-staging --dhs-lower-to-gpu --canonicalize --cse | FileCheck %s
// RUN: rm -rf %t && dhs-compile %s -o %t
// RUN: %if ptxas %{ for f in %t/*.ptx; do %ptxas -arch=sm_90a $f -o $f.cubin || exit 1; done %}

// CHECK-LABEL: func.func @fetch_group
// 2 requests x 512 listed rows: 2 chunks of 256 a request, one a CTA.
// CHECK: gpu.launch_func @fetch::@fetch blocks in (%c2, %c2, %c1) threads in (%c256, %c1, %c1) dynamic_shared_memory_size %c1028_i32
// CHECK: gpu.func @fetch
// CHECK: gpu.dynamic_shared_memory
// CHECK-NEXT: %[[LIST:.*]] = memref.view {{.*}} to memref<257xi32, #gpu.address_space<workgroup>>
// CHECK: %[[AT:.*]] = memref.atomic_rmw addi %c1_i32, %[[LIST]][%c256]
// CHECK: gpu.barrier
// CHECK: %[[COUNT:.*]] = memref.load %[[LIST]][%c256]
// A warp a token: warp w takes tokens w, w + 8, ...
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c8
// CHECK: scf.for %{{.*}} = %{{.*}} to %c192 step %c192
// CHECK-COUNT-6: vector.load %{{.*}} : memref<?x4x656xi8>, vector<16xi8>
// CHECK: vector.store %{{.*}} : memref<2x512x2624xi8>, vector<16xi8>
func.func @fetch_group(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>,
                       %rows: memref<2x1x512xi32>, %slots: memref<2x1x512xi32>,
                       %start: memref<2xi64>, %len: memref<2xi32>) {
  %stage = dhs.scratch : memref<2x512x4x656xi8>
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      rows(%rows : memref<2x1x512xi32>) slots(%slots : memref<2x1x512xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      into(%stage : memref<2x512x4x656xi8>)
  return
}
