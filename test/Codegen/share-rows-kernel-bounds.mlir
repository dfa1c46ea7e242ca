// dhs.share_rows at the op's largest K: 1 x 16384 selections per request.
// The table has 32768 slots (2 K: 4 K would not fit, nor first occurrences
// of 32 bits): 128 KB of row ids and 64 KB of first occurrences (i16), then
// 16384 taken bytes and 512 sums (16 rounds of the 32 warps' counts):
// 215040 bytes, within the 227 KB of an sm_90 CTA. Each of the 1024 threads
// owns 16 entries; Q = 1 looks nothing up (no third barrier).
// RUN: dhs-opt %s --dhs-lower-to-gpu --canonicalize --cse | FileCheck %s
// RUN: dhs-opt %s --dhs-lower-to-gpu | grep -c gpu.barrier | FileCheck %s --check-prefix=BARRIERS
// RUN: rm -rf %t && dhs-compile %s -o %t
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/share_rows.ptx -o %t/a.cubin %}
// BARRIERS: 7
// MANIFEST: "dynamic_shared_bytes": 215040

// CHECK: gpu.launch_func @share_rows::@share_rows blocks in (%c2, %c1, %c1) threads in (%c1024, %c1, %c1) dynamic_shared_memory_size %c215040_i32
// CHECK-LABEL: gpu.func @share_rows
// CHECK: memref.view %{{.*}}[%c0][] {{.*}} to memref<32768xi32, #gpu.address_space<workgroup>>
// CHECK: %[[FIRST:.*]] = memref.view %{{.*}}[%c131072][] {{.*}} to memref<32768xi16, #gpu.address_space<workgroup>>
// CHECK: memref.view %{{.*}}[%c196608][] {{.*}} to memref<16384xi8, #gpu.address_space<workgroup>>
// CHECK: memref.view %{{.*}}[%c212992][] {{.*}} to memref<512xi32, #gpu.address_space<workgroup>>
// The hash: the top 15 bits.
// CHECK: arith.shrui %{{.*}}, %c17_i32
// CHECK: arith.andi %{{.*}}, %c32767 : index
// 16 bits: the atomic min only where a plain read shows none earlier.
// CHECK: %[[EARLIER:.*]] = memref.load %[[FIRST]]
// CHECK: %[[LATER:.*]] = arith.cmpi ugt, %[[EARLIER]], %{{.*}} : i16
// CHECK: scf.if %[[LATER]]
// CHECK-NEXT: memref.atomic_rmw minu %{{.*}}, %[[FIRST]]
func.func @step(%rows: memref<2x1x16384xi32>, %slots: memref<2x1x16384xi32>,
                %shared_rows: memref<2x1x16384xi32>, %shared_slots: memref<2x1x16384xi32>,
                %tiles: memref<2xi32>) {
  dhs.share_rows rows(%rows : memref<2x1x16384xi32>) slots(%slots : memref<2x1x16384xi32>) tile = 64
      into(%shared_rows, %shared_slots, %tiles
           : memref<2x1x16384xi32>, memref<2x1x16384xi32>, memref<2xi32>)
  return
}
