//===- CpuLaunches.h - A compiled step's launches on the host ---*- C++ -*-===//
//
// The CPU backend runs a compiled step as the GPU does: launch by launch, in
// manifest order, over the step's argument buffers, the pools' two tiers,
// the staging arena the compiler planned (arena_bytes, scratch offsets) and
// a status word, each launch with its kernel's semantics (docs/compiler.md):
//   union_missing   per request, the distinct missing rows of all query
//                   positions (the first selection of a row owns it) and each
//                   missing selection's owner (remap);
//   share_rows      per request, the rows every query position selected
//                   (whole tiles of them) first in every position's list, each
//                   with its own slot, then the position's other entries;
//   fetch           the listed missing rows, whole tokens, from the host store
//                   into staging; bad row ids set status bits and copy nothing;
//   attention       CpuAttention over HBM slots and staging (staged), or
//   sparse_attention  over HBM slots and the host store (fused), with the
//                   sliding window where the step has one; a shared prefix
//                   (shared_tiles) is checked, as the kernel checks it;
//   attention_combine  nothing: the CPU computes each output whole;
//   resolve         nothing: the Runtime resolved the selections into the
//                   slots argument through the controller (the CPU keeps no
//                   device residency map).
// Other launch kinds do not belong to an attention step's layers.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CPU_CPULAUNCHES_H
#define DHS_RUNTIME_CPU_CPULAUNCHES_H

#include "runtime/cpu/CpuAttention.h"

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace dhs::runtime {

struct Manifest;

/// A compiled step's memory on the host.
struct CpuStepMemory {
  /// One pool argument's tiers, tokens of `tokenBytes` (its layers' rows).
  struct Pool {
    const std::uint8_t *hbm = nullptr;  ///< [hbmSlots][tokenBytes]
    const std::uint8_t *host = nullptr; ///< [hostRows][tokenBytes]
    std::int64_t hbmSlots = 0;
    std::int64_t hostRows = 0;
    std::int64_t tokenBytes = 0;
  };
  std::vector<std::uint8_t *> arguments; ///< memref arguments by index (null: none)
  std::vector<Pool> pools;               ///< pool arguments by index
  std::uint8_t *arena = nullptr;         ///< the staging arena (arena_bytes)
  std::uint32_t status = 0;              ///< bits the launches OR in (StatusBits.def)
};

/// Runs launches of compiled steps on the host.
class CpuLaunches {
public:
  /// Attention on `threads` threads (0: one per hardware thread).
  explicit CpuLaunches(unsigned threads) : attention_(CpuPrecision::Float, threads) {}

  /// Runs launches [first, end) of `manifest` over `memory`, those of the
  /// form at `formShare` (LaunchForms.h; 1: the forms for the most rows
  /// missing). `poolLayer` >= 0 makes attention read that layer of its
  /// pool's tokens instead of the launch's (a one-layer step replayed for
  /// every layer of a group). Throws InputError for attention input outside
  /// the tiers (the kernels' status bits; fetches OR theirs into
  /// memory.status), Error for a launch kind that has no place in an
  /// attention step.
  void run(const Manifest &manifest, std::size_t first, std::size_t end, CpuStepMemory &memory,
           std::int64_t poolLayer = -1, double formShare = 1.0);

  /// Rows the fetch launches copied from the host store since the last
  /// resetFetched(), and whether any fetch ran.
  std::int64_t fetchedRows() const { return fetchedRows_; }
  bool fetched() const { return fetched_; }
  /// Rows (tokens) read from the host store since the last resetFetched():
  /// the fetches' and fused attention's, which reads each distinct missing
  /// row of a request once (shared retrieval, as a fetch of the union).
  std::int64_t hostRowsRead() const { return hostRowsRead_; }
  void resetFetched() {
    fetchedRows_ = 0;
    hostRowsRead_ = 0;
    fetched_ = false;
  }

private:
  /// Fused attention's missing rows: each distinct one of a request copied
  /// once into staging, which the problem then reads as its host store.
  void stageMissingRows(const CpuStepMemory::Pool &pool);

  CpuAttention attention_;
  SparseAttentionProblem problem_; // reused between launches
  std::int64_t fetchedRows_ = 0, hostRowsRead_ = 0;
  bool fetched_ = false;
  std::vector<bf16_t> staging_;                                // fused: [staged][token]
  std::unordered_map<std::int32_t, std::int32_t> stagedIndex_; // a request's row -> staged
};

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CPU_CPULAUNCHES_H
