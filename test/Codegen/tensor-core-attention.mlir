// MLA attention with 64 heads per KV head and selections in multiples of 64
// runs on the tensor cores: one CTA of three warpgroups (384 threads, 231200
// bytes of dynamic shared memory: Q, two swizzled tiles of 64 rows, P, the
// rows' rescale factors and biases, four mbarriers) per 64 heads of a query.
// The producer warpgroup gathers and dequantizes tiles (full/empty
// mbarriers), the softmax warpgroup computes Q K^T (36 wgmma m64n64k16, the
// first without accumulating) and the first half of P V (4 m64n256k16 over
// the same tile, N-major), the third warpgroup the second half; named
// barriers 1 and 2 hand P over and back, 3 ends both consumers differently.
// Q is copied by the consumer threads' cp.async, which each consumer
// warpgroup waits for (named barrier 5) just before its loop: the producer
// starts gathering the first tile at once.
// The launch has a second kernel of the same signature, its resident form,
// whose producer loads the selections of tile t + 2 at the top of each
// iteration (faster with every row in HBM) instead of classifying the next
// tile's rows first (faster with rows on the host), and prefetches the next
// tile's HBM rows into L2: the runtime launches one of the two each step by
// the rows it expects from the host.
// 16 heads, or --tensor-cores=false, keep the CUDA-core kernel.
// RUN: dhs-opt %s --dhs-lower-to-gpu="min-blocks=0" --canonicalize --cse | FileCheck %s
// RUN: dhs-opt %s --dhs-lower-to-gpu="min-blocks=264" --canonicalize --cse | FileCheck %s --check-prefix=SPLIT
// RUN: dhs-opt %s --dhs-lower-to-gpu="min-blocks=0 tensor-cores=false" | FileCheck %s --check-prefix=CORES
// RUN: rm -rf %t && dhs-compile %s --min-blocks=0 -o %t
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: grep -c 'wgmma.mma_async.sync.aligned' %t/sparse_attention.ptx | FileCheck %s --check-prefix=COUNT
// RUN: FileCheck %s --check-prefix=PTX < %t/sparse_attention.ptx
// RUN: grep -c 'prefetch.global.L2' %t/sparse_attention.ptx | FileCheck %s --check-prefix=PREFETCH
// RUN: %if ptxas %{ %ptxas -arch=sm_90a -v %t/sparse_attention.ptx -o %t/sparse_attention.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS %}
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK

// CHECK-LABEL: func.func @step
// CHECK: gpu.launch_func @sparse_attention::@sparse_attention blocks in (%c2, %c1, %c1) threads in (%c384, %c1, %c1) dynamic_shared_memory_size %c231200_i32
// CHECK-SAME: dhs.resident_kernel = "sparse_attention_resident"
// CHECK: llvm.mlir.global external @dhs_tensor_core_shared() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<0 x i8>
// CHECK-LABEL: gpu.func @sparse_attention
// CHECK-SAME: known_block_size = array<i32: 384, 1, 1>
// CHECK-SAME: nvvm.minctasm = 1 : i32
// (Unsplit, nothing after it starts early.)
// CHECK-NOT: nvvm.griddepcontrol
// CHECK-COUNT-18: nvvm.cp.async.shared.global {{.*}}, 16, cache =  cg
// CHECK: nvvm.cp.async.commit.group
// CHECK: nvvm.mbarrier.init %{{.*}}, %c128_i32
// CHECK: nvvm.mbarrier.init %{{.*}}, %c128_i32
// CHECK: nvvm.mbarrier.init %{{.*}}, %c256_i32
// CHECK: nvvm.mbarrier.init %{{.*}}, %c256_i32
// Producer: waits for an empty tile, fills it, publishes it to wgmma.
// CHECK: nvvm.setmaxregister  decrease 144
// The request's history bounds, loaded once: no row's address waits for them.
// CHECK-NEXT: memref.load %arg3[%block_id_x] : memref<2xi64>
// CHECK-NEXT: memref.load %arg4[%block_id_x] : memref<2xi32>
// CHECK: scf.for
// The next tile's rows are classified first: no selection or bound is loaded
// before the wait for an empty tile.
// CHECK-NOT: memref.load %arg{{[1234]}}[
// CHECK: nvvm.mbarrier.try_wait.parity
// CHECK: nvvm.convert.f8x2.to.f16x2
// CHECK: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK: nvvm.mbarrier.arrive
// Softmax warpgroup.
// CHECK: nvvm.setmaxregister  increase 200
// CHECK-NEXT: nvvm.cp.async.wait.group 0
// CHECK-NEXT: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK-NEXT: nvvm.barrier id = %c5_i32 number_of_threads = %c256_i32
// CHECK: nvvm.mbarrier.try_wait.parity
// CHECK: nvvm.wgmma.fence.aligned
// CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 64, k = 16>, D[<f32>, <zero>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK-COUNT-35: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 64, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: nvvm.barrier id = %c2_i32 number_of_threads = %c256_i32
// CHECK: nvvm.barrier.arrive id = %c1_i32 number_of_threads = %c256_i32
// CHECK-COUNT-4: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 256, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <row>]
// The output: each warpgroup stages its half (64 rows of 256 bf16) where Q
// was, then writes it out 16 bytes a thread, whole rows a warp.
// CHECK-COUNT-64: llvm.store {{.*}} {alignment = 4 : i64} : vector<2xbf16>, !llvm.ptr<3>
// CHECK: nvvm.barrier id = %c6_i32 number_of_threads = %c128_i32
// CHECK-COUNT-16: llvm.store {{.*}} {alignment = 16 : i64} : vector<4xi32>, !llvm.ptr<1>
// CHECK: nvvm.barrier.arrive id = %c3_i32 number_of_threads = %c256_i32
// Second half of the values.
// CHECK: nvvm.setmaxregister  decrease 160
// CHECK-NEXT: nvvm.cp.async.wait.group 0
// CHECK-NEXT: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK-NEXT: nvvm.barrier.arrive id = %c5_i32 number_of_threads = %c256_i32
// CHECK: nvvm.barrier id = %c1_i32 number_of_threads = %c256_i32
// CHECK-COUNT-4: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 256, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <row>]
// CHECK: nvvm.barrier.arrive id = %c2_i32 number_of_threads = %c256_i32
// CHECK-COUNT-64: llvm.store {{.*}} {alignment = 4 : i64} : vector<2xbf16>, !llvm.ptr<3>
// CHECK: nvvm.barrier id = %c7_i32 number_of_threads = %c128_i32
// CHECK-COUNT-16: llvm.store {{.*}} {alignment = 16 : i64} : vector<4xi32>, !llvm.ptr<1>
// CHECK: nvvm.barrier id = %c3_i32 number_of_threads = %c256_i32
// CHECK: gpu.return
// The resident form: the bounds loaded once too, then at the top of each
// iteration the selections of tile t + 2 (both rows of the thread).
// CHECK-LABEL: gpu.func @sparse_attention_resident
// CHECK-SAME: known_block_size = array<i32: 384, 1, 1>
// CHECK-SAME: nvvm.minctasm = 1 : i32
// CHECK: nvvm.setmaxregister  decrease 144
// CHECK-NEXT: memref.load %arg3[%block_id_x] : memref<2xi64>
// CHECK-NEXT: memref.load %arg4[%block_id_x] : memref<2xi32>
// CHECK: scf.for %[[TILE:.*]] = %c0 to %c4
// Tile t + 1's rows classified first, and those in HBM prefetched into L2:
// per row, lane segment s takes the lines at bytes s x 128 and
// min(512 + s x 128, 655).
// CHECK: scf.if
// CHECK: %[[LINE:.*]] = arith.muli %{{.*}}, %c128_i32 : i32
// CHECK: nvvm.prefetch level =  L2, %{{.*}} : !llvm.ptr<1>
// CHECK-NEXT: %[[SECOND:.*]] = arith.addi %[[LINE]], %c512_i32 : i32
// CHECK-NEXT: arith.minui %[[SECOND]], %c655_i32 : i32
// CHECK: nvvm.prefetch level =  L2, %{{.*}} : !llvm.ptr<1>
// CHECK: scf.if
// CHECK-COUNT-2: nvvm.prefetch level =  L2
// CHECK: arith.addi %[[TILE]], %c2 : index
// CHECK: memref.load %arg1[%block_id_x, %c0, %{{.*}}] : memref<2x1x256xi32>
// CHECK-NEXT: memref.load %arg2[%block_id_x, %c0, %{{.*}}] : memref<2x1x256xi32>
// CHECK: nvvm.mbarrier.try_wait.parity
// CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 64, k = 16>, D[<f32>, <zero>]
// CHECK: gpu.return

// Two queries of 64 heads fill 2 SMs: each query's 4 tiles go to 2 CTAs
// (2 tiles each), merged by the combine kernel (16 heads a CTA).
// SPLIT: gpu.launch_func @sparse_attention::@sparse_attention blocks in (%c2, %c1, %c2) threads in (%c384, %c1, %c1)
// SPLIT-SAME: memref<2x1x64x2x514xf32>
// SPLIT: gpu.launch_func @attention_combine::@attention_combine blocks in (%c2, %c4, %c1) threads in (%c512, %c1, %c1)
// SPLIT-SAME: {dhs.dependent_launch, dhs.op = "attention_combine"
// Each split CTA lets the combine start as it begins; the combine waits for
// the attention's grid to end before it reads the partials.
// SPLIT-LABEL: gpu.func @sparse_attention(
// SPLIT: nvvm.griddepcontrol  launch_dependents
// A split CTA's unscaled fp32 partials (rows 2056 bytes apart, so 8-byte
// stores) go through shared memory in two passes of 128 columns a
// warpgroup, each warp then writing 256 contiguous bytes of a row a store.
// SPLIT: nvvm.setmaxregister  increase 200
// SPLIT-COUNT-32: llvm.store {{.*}} {alignment = 8 : i64} : vector<2xf32>, !llvm.ptr<3>
// SPLIT-NEXT: nvvm.barrier id = %c6_i32 number_of_threads = %c128_i32
// SPLIT-COUNT-32: llvm.store {{.*}} {alignment = 8 : i64} : vector<2xf32>, !llvm.ptr<1>
// SPLIT-NEXT: nvvm.barrier id = %c6_i32 number_of_threads = %c128_i32
// SPLIT-COUNT-32: llvm.store {{.*}} {alignment = 8 : i64} : vector<2xf32>, !llvm.ptr<3>
// SPLIT-NEXT: nvvm.barrier id = %c6_i32 number_of_threads = %c128_i32
// SPLIT-COUNT-32: llvm.store {{.*}} {alignment = 8 : i64} : vector<2xf32>, !llvm.ptr<1>
// SPLIT: nvvm.setmaxregister  decrease 160
// SPLIT-COUNT-32: llvm.store {{.*}} {alignment = 8 : i64} : vector<2xf32>, !llvm.ptr<3>
// SPLIT-NEXT: nvvm.barrier id = %c7_i32 number_of_threads = %c128_i32
// SPLIT-LABEL: gpu.func @attention_combine
// SPLIT: nvvm.griddepcontrol  wait

// The CUDA-core kernel: 16 heads a CTA, so the one-layer pool's missing rows
// are fetched once into the arena first.
// CORES: gpu.launch_func @fetch::@fetch
// CORES: gpu.launch_func @attention::@attention blocks in ({{.*}}, %c4, {{.*}}) threads in (%c512,
// CORES-NOT: wgmma

// MANIFEST: "block": [
// MANIFEST-NEXT: 384,
// MANIFEST: "dynamic_shared_bytes": 231200
// MANIFEST: "resident_kernel": "sparse_attention_resident"
// 44 wgmma in each of the two kernels.
// COUNT: 88
// Only the resident form prefetches (2 rows x 2 lines a lane).
// PREFETCH: {{^}}4{{$}}
// PTX: .extern .shared .align 1024 .b8 dhs_tensor_core_shared[];
// PTX: .maxntid 384, 1, 1
// PTX: .minnctapersm 1
// PTX-DAG: setmaxnreg.dec.sync.aligned.u32
// PTX-DAG: cvt.rn.f16x2.e4m3x2
// PTX-DAG: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// PTX-DAG: wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16
// PTXAS-NOT: Potential Performance Loss
// PTXAS: Used 168 registers
// PTXAS: Used 168 registers
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
