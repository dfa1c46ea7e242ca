//===- InvariantChecker.h - The runtime's invariant checks ------*- C++ -*-===//
//
// What RuntimeConfig::checkInvariants checks (and Runtime::checkInvariants on
// demand): host rows keep the bytes they were written with (a hash per row),
// every HBM slot a layer read holds its host row, every slot just filled does,
// a device step log says what the selections give, and the device residency
// maps and replacement state mirror the controller. A violation throws
// InvariantError (or Error for the device state) naming it.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_INVARIANTCHECKER_H
#define DHS_RUNTIME_INVARIANTCHECKER_H

#include "runtime/core/ProblemShape.h"
#include "runtime/core/Tiers.h"
#include "runtime/residency/Residency.h"

#include <cstdint>
#include <vector>

namespace dhs::runtime {

/// Checks a session's tiers against its residency controller.
class InvariantChecker {
public:
  /// With `hashRows`, every host row written is hashed (recordHash) and
  /// checked whenever it is read.
  InvariantChecker(const TierLayout &layout, const ProblemShape &shape, TierStorage &storage,
                   const ResidencyController &controller, bool hashRows);

  /// Records the hash of a host row just written.
  void recordHash(std::int32_t layer, std::int64_t hostRow);
  /// After layer `layer` ran: every row it selected is what was written, and
  /// every HBM slot it read holds that row. `lanes` [B] (request index or
  /// -1), `historyStart` [B], the group's `rows` and `slots` [B, Q, K].
  void checkReads(std::int32_t layer, const std::int32_t *lanes, const std::int64_t *historyStart,
                  const std::int32_t *rows, const std::int32_t *slots) const;
  /// A group's step log against its selections `rowIds` [B, Q, K] and the
  /// controller's residency table: each slot hit once, each miss, the valid
  /// count. Writes the slots the kernels read into `slots` [B, Q, K].
  void checkStepLog(std::int32_t group, const StepLog &log, const std::int64_t *historyStart,
                    const std::int32_t *rowIds, std::int32_t *slots) const;
  /// Every slot just filled holds its host row, in every layer of its group
  /// (`copies` may hold releases too: slot -1).
  void checkCopies(const std::vector<RowCopy> &copies) const;
  /// Every row of request index `index` is what was written and, where
  /// resident, in HBM too; `when` names the occasion in messages.
  void checkRequestRows(std::int32_t index, const char *when) const;
  /// The device residency maps (a placement step loaded) and, when the steps
  /// resolve on the device, the replacement state mirror the controller.
  void checkDeviceState(bool resolvesOnDevice) const;
  /// No host row of a group is released and placed in one batch of changes.
  void checkDistinctChanges(const std::vector<RowCopy> &changes) const;

private:
  std::uint64_t rowHash(const std::uint8_t *row) const;
  bool changedSinceWritten(std::int32_t layer, std::int64_t hostRow, const std::uint8_t *row) const;

  TierLayout layout_;
  ProblemShape shape_;
  TierStorage &storage_;
  const ResidencyController &controller_;
  std::vector<std::uint64_t> hashes_; // [layer][host row]
};

} // namespace dhs::runtime

#endif // DHS_RUNTIME_INVARIANTCHECKER_H
