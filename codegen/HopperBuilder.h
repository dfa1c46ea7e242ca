//===- HopperBuilder.h - Hopper operations of tensor-core kernels -*- C++ -*-===//
//
// What a tensor-core kernel builds on Hopper (sm_90a) besides its own
// logic: raw global loads from a memref's address, wgmma's shared-memory
// descriptors of 128-byte swizzled operands, the bf16 wgmma itself, and the
// fence that orders generic stores to shared memory before the async proxy
// (wgmma, mbarriers) reads them.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_CODEGEN_HOPPERBUILDER_H
#define DHS_CODEGEN_HOPPERBUILDER_H

#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace mlir::dhs {

/// Builders of Hopper operations over an ImplicitLocOpBuilder.
struct HopperBuilder {
  ImplicitLocOpBuilder &b;

  /// The address (i64, generic) of the first element of memref `memref`.
  Value getAddress(Value memref);
  /// A global pointer to `address` (i64).
  Value globalPointer(Value address);
  /// Loads 16 bytes (vector<4xi32>) from global `address` (i64, 16-byte
  /// aligned): data read-only for the kernel's whole run (`invariant`:
  /// ld.global.nc), else data other threads of the CTA wrote (ld.global).
  Value loadGlobal16(Value address, bool invariant = true);
  /// Stores 16 bytes (vector<4xi32> `value`) to global `address` (i64,
  /// 16-byte aligned).
  void storeGlobal16(Value address, Value value);
  /// Brings the line of global `address` (i64) into L2 (prefetch.global.L2).
  void prefetchL2(Value address);
  /// The wgmma descriptor of a 128-byte swizzled operand at shared address
  /// `address` (i64), with leading and stride byte offsets.
  Value descriptor(Value address, int64_t leadingBytes, int64_t strideBytes);
  /// The accumulator of an m64nNk16 wgmma: a struct of n / 2 f32 per thread.
  Type accumulatorType(int64_t n);
  /// accumulator (+)= A B for A [64 x 16] and B [16 x n], bf16 operands given
  /// by their descriptors (A K-major; B K-major, or N-major when
  /// `transposeB`), f32 accumulation; without `accumulate`, the accumulator
  /// is overwritten.
  Value wgmma(Value accumulator, Value descA, Value descB, int64_t n, bool accumulate,
              bool transposeB);
  /// Orders this thread's generic-proxy writes to shared memory before later
  /// async-proxy reads (wgmma operands).
  void fenceAsyncShared();

  //===--------------------------------------------------------------------===//
  // Clusters (distributed shared memory)
  //===--------------------------------------------------------------------===//

  /// This CTA's rank in its cluster (i32).
  Value clusterRank();
  /// The address in the shared::cluster window (i32) of shared pointer
  /// `pointer` (!llvm.ptr<3>) in the CTA of cluster rank `rank` (i32).
  Value clusterAddress(Value pointer, Value rank);
  /// Copies `size` bytes (i32, a multiple of 16) from shared::cta address
  /// `source` (i32) of this CTA to shared::cluster address `destination`
  /// (i32) of another CTA with the bulk-copy engine, completing them on the
  /// mbarrier at shared::cluster `barrier` (i32) of that CTA. The source's
  /// generic writes must be fenced to the async proxy first.
  void copyToCluster(Value destination, Value source, Value size, Value barrier);
  /// Arrives on the mbarrier at shared pointer `barrier` (!llvm.ptr<3>) of
  /// the CTA of cluster rank `rank` (i32), with release semantics at cluster
  /// scope.
  void arriveRemote(Value barrier, Value rank);

  /// Cross-kernel flags in global memory (a fetch running beside the
  /// attention that reads what it staged): `ld.acquire.gpu` of the 32-bit
  /// word at `address` (i64) and `st.release.gpu` of `value` (i32) there.
  Value loadAcquire(Value address);
  void storeRelease(Value address, Value value);
  /// `atom.acquire.gpu.cas` of the 32-bit word at `address` (i64): stores
  /// `desired` (i32) if it holds `expected` (i32); returns what it held.
  Value compareAndSwap(Value address, Value expected, Value desired);
  /// Polls the flag at `address` (i64) with loadAcquire while it holds
  /// `pending`, sleeping `sleepNs` between polls, at most `polls` times;
  /// returns whether it changed (i1).
  Value waitFlag(Value address, int64_t polls, int64_t sleepNs, int32_t pending = 0);
  /// Polls the same way until the flag holds `wanted`; returns whether it
  /// does (i1).
  Value waitFlagFor(Value address, int64_t polls, int64_t sleepNs, int32_t wanted);
  /// Waits until the phase of parity `parity` (i32) of the mbarrier at
  /// shared pointer `barrier` (!llvm.ptr<3>, this CTA's) completes, with
  /// acquire semantics at cluster scope (nvvm.mbarrier.try_wait.parity
  /// acquires at CTA scope only), which synchronizes with release arrivals
  /// from threads of other CTAs of the cluster; `ticks` is the suspend time
  /// hint in nanoseconds.
  void waitParityCluster(Value barrier, Value parity, int64_t ticks);
  /// For compute-sanitizer racecheck only (tools/racecheck-ptx.sh): a PTX
  /// comment `// dhs.racecheck: { ... }` that holds arriveRemote's arrivals
  /// on the mbarrier `offset` bytes past shared pointer `pointer`
  /// (!llvm.ptr<3>) in the CTAs of cluster ranks 0 to `ranks` - 1, its address
  /// computation and mapa included; racecheck-ptx.sh uncomments it. ptxas
  /// assembles nothing from the comment and the pointer's computation
  /// stays as it is, if `pointer` is computed anyway: an address computed
  /// only for the marker would replace the same one computed under a later
  /// branch and move it out of the branch, which changes the kernel.
  void racecheckArriveCluster(Value pointer, int64_t offset, int64_t ranks);
  /// The i32 constant `value`, from an opaque `mov.b32` whose PTX line
  /// carries `// dhs.racecheck: mov.b32 <reg>, racecheckValue;`, which
  /// tools/racecheck-ptx.sh puts in its place (an mbarrier count in the
  /// racecheck form).
  Value racecheckConstant(int64_t value, int64_t racecheckValue);
  /// All threads of the cluster meet (barrier.cluster arrive + wait):
  /// release and acquire at cluster scope.
  void clusterSync();
};

} // namespace mlir::dhs

#endif // DHS_CODEGEN_HOPPERBUILDER_H
