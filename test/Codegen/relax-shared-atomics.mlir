// Atomics on shared memory (address space 3) become relaxed and CTA-scoped;
// atomics on global memory keep their ordering and scope.
// RUN: dhs-opt %s --pass-pipeline='builtin.module(gpu.module(dhs-relax-shared-atomics))' | FileCheck %s
// The PTX of a kernel with a shared-memory hash table (dhs.share_rows) then
// has no system-scoped fence in its compare-and-swap loops.
// RUN: rm -rf %t && dhs-compile %S/share-rows-kernel.mlir -o %t
// RUN: FileCheck %s --check-prefix=PTX < %t/share_rows.ptx

// CHECK-LABEL: gpu.module @kernels
gpu.module @kernels {
  // CHECK-LABEL: llvm.func @claim
  llvm.func @claim(%shared: !llvm.ptr<3>, %global: !llvm.ptr<1>, %row: i32, %k: i16) {
    %empty = llvm.mlir.constant(-1 : i32) : i32
    // CHECK: llvm.cmpxchg %{{.*}}, %{{.*}}, %{{.*}} syncscope("block") monotonic monotonic : !llvm.ptr<3>, i32
    %0 = llvm.cmpxchg %shared, %empty, %row acq_rel monotonic : !llvm.ptr<3>, i32
    // CHECK: llvm.atomicrmw umin %{{.*}}, %{{.*}} syncscope("block") monotonic : !llvm.ptr<3>, i16
    %1 = llvm.atomicrmw umin %shared, %k acq_rel : !llvm.ptr<3>, i16
    // CHECK: llvm.cmpxchg %{{.*}}, %{{.*}}, %{{.*}} acq_rel monotonic : !llvm.ptr<1>, i32
    %2 = llvm.cmpxchg %global, %empty, %row acq_rel monotonic : !llvm.ptr<1>, i32
    // CHECK: llvm.atomicrmw _or %{{.*}}, %{{.*}} acq_rel : !llvm.ptr<1>, i32
    %3 = llvm.atomicrmw _or %global, %row acq_rel : !llvm.ptr<1>, i32
    llvm.return
  }
}

// PTX: .entry share_rows(
// PTX-NOT: .sys
// PTX: atom.relaxed.cta.shared.cas.b32
// PTX-NOT: .sys
