// Greedy acceptance as a kernel: per request a block argmax at each verified
// position, then the drafts compared in order.
// RUN: dhs-opt %s --dhs-lower-to-gpu --canonicalize --cse --split-input-file | FileCheck %s
// RUN: rm -rf %t && dhs-compile %dhs_src/examples/accept_step.mlir -o %t
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t/accept.ptx -o %t/k.cubin %}
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK
// LINK: link: OK

// CHECK-LABEL: func.func @greedy
// CHECK: gpu.launch_func @accept::@accept blocks in (%c8, %c1, %c1) threads in (%c1024, %c1, %c1) args({{.*}}) {dhs.op = "accept", dhs.roles = ["draft_tokens", "target_probs", "seeds", "step_counter", "accepted", "next_token"]}
// CHECK: gpu.func @accept
// CHECK-SAME: workgroup({{.*}} : memref<32xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, {{.*}} : memref<32xi32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, {{.*}} : memref<5xi32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64})
// Per position (5 = gamma + 1) a strided scan keeps its first maximum (a
// strict compare over increasing tokens)...
// CHECK: scf.for %[[POS:.*]] = %c0 to %c5 step %c1 {
// CHECK: scf.for %[[TOKEN:.*]] = %thread_id_x to %c32000 step %c1024 iter_args(%[[BEST:.*]] = %cst, %{{.*}} = %c0_i32) -> (f32, i32) {
// CHECK: %[[P:.*]] = memref.load %{{.*}}[%block_id_x, %[[POS]], %[[TOKEN]]] : memref<8x5x32000xf32>
// CHECK: arith.cmpf ogt, %[[P]], %[[BEST]] : f32
// ...and the warps fold pairs: the larger value, on a tie the lower token.
// CHECK: %[[V:.*]], %{{.*}} = gpu.shuffle xor %[[SCAN:.*]]#0, %c16_i32, %c32_i32 : f32
// CHECK: %[[T:.*]], %{{.*}} = gpu.shuffle xor %[[SCAN]]#1, %c16_i32, %c32_i32 : i32
// CHECK: %[[LARGER:.*]] = arith.cmpf ogt, %[[V]], %[[SCAN]]#0 : f32
// CHECK: %[[EQUAL:.*]] = arith.cmpf oeq, %[[V]], %[[SCAN]]#0 : f32
// CHECK: %[[LOWER:.*]] = arith.cmpi slt, %[[T]], %[[SCAN]]#1 : i32
// CHECK: %[[TIE:.*]] = arith.andi %[[EQUAL]], %[[LOWER]] : i1
// CHECK: arith.ori %[[LARGER]], %[[TIE]] : i1
// CHECK: gpu.barrier
// Thread 0 compares the drafts in order, counting until the first mismatch;
// the next token is the argmax after the accepted ones.
// CHECK: scf.if
// CHECK: %[[COUNT:.*]]:2 = scf.for %[[I:.*]] = %c0 to %c4 step %c1 iter_args(%[[N:.*]] = %c0_i32, %[[GOING:.*]] = %c1_i32) -> (i32, i32) {
// CHECK: %[[DRAFT:.*]] = memref.load %arg0[%block_id_x, %[[I]]] : memref<8x4xi32>
// CHECK: %[[ARGMAX:.*]] = memref.load %{{.*}}[%[[I]]] : memref<5xi32, #gpu.address_space<workgroup>>
// CHECK: %[[MATCH:.*]] = arith.cmpi eq, %[[DRAFT]], %[[ARGMAX]] : i32
// CHECK: %[[STILL:.*]] = arith.cmpi ne, %[[GOING]], %c0_i32 : i32
// CHECK: arith.andi %[[STILL]], %[[MATCH]] : i1
// CHECK: memref.store %[[COUNT]]#0, %arg4[%block_id_x] : memref<8xi32>
// CHECK: %[[AT:.*]] = arith.index_cast %[[COUNT]]#0 : i32 to index
// CHECK: %[[NEXT:.*]] = memref.load %{{.*}}[%[[AT]]] : memref<5xi32, #gpu.address_space<workgroup>>
// CHECK: memref.store %[[NEXT]], %arg5[%block_id_x] : memref<8xi32>
func.func @greedy(%draft: memref<8x4xi32>, %target: memref<8x5x32000xf32>,
                  %seeds: memref<8xi64>, %counter: memref<1xi64>,
                  %accepted: memref<8xi32>, %next: memref<8xi32>) {
  dhs.accept greedy draft(%draft : memref<8x4xi32>)
      target(%target : memref<8x5x32000xf32>)
      seeds(%seeds : memref<8xi64>) step(%counter : memref<1xi64>)
      into(%accepted, %next : memref<8xi32>, memref<8xi32>)
  return
}

// -----

// Rejection sampling: thread 0 decides, the block samples the next token. A
// -1 draft ends a shorter block (no p or q read for it; the bonus token
// follows it), and the lowest token among the chunks owning the threshold
// wins (an atomic min over INT32_MAX).
// CHECK-LABEL: func.func @sampling
// CHECK: gpu.launch_func @accept::@accept {{.*}} args(%{{.*}} : memref<8x4xi32>, %{{.*}} : memref<8x5x100xf32>, %{{.*}} : memref<8x4x100xf32>, %{{.*}} : memref<8xi64>, %{{.*}} : memref<1xi64>, %{{.*}} : memref<8xi32>, %{{.*}} : memref<8xi32>) {dhs.op = "accept", dhs.roles = ["draft_tokens", "target_probs", "draft_probs", "seeds", "step_counter", "accepted", "next_token"]}
// CHECK: gpu.func @accept
// CHECK: %[[NONE:.*]] = arith.constant 2147483647 : i32
// CHECK: arith.cmpi sge, %{{.*}}, %c0_i32 : i32
// CHECK: arith.muli %{{.*}}, %{{.*}} : i64
// CHECK: memref.store %[[NONE]]
// CHECK: arith.minui %{{.*}}, %c3 : index
// CHECK: gpu.shuffle up
// CHECK: memref.atomic_rmw mins
// CHECK: arith.cmpi eq, %{{.*}}, %[[NONE]] : i32
func.func @sampling(%draft: memref<8x4xi32>, %target: memref<8x5x100xf32>,
                    %q: memref<8x4x100xf32>, %seeds: memref<8xi64>,
                    %counter: memref<1xi64>, %accepted: memref<8xi32>,
                    %next: memref<8xi32>) {
  dhs.accept rejection_sampling draft(%draft : memref<8x4xi32>)
      target(%target : memref<8x5x100xf32>) draft_probs(%q : memref<8x4x100xf32>)
      seeds(%seeds : memref<8xi64>) step(%counter : memref<1xi64>)
      into(%accepted, %next : memref<8xi32>, memref<8xi32>)
  return
}
