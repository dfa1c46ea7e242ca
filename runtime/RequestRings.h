//===- RequestRings.h - Each request's draft and window rings ---*- C++ -*-===//
//
// The Runtime's bookkeeping of the rings a RingStore keeps per admitted
// request: which logical position each draft-ring slot and each window-ring
// slot holds (so that a read of a position overwritten or never written is
// refused by name), the raw tokens of each request's window, and the
// conversions between the engine's [count][L][row_bytes] tokens and a draft
// ring's [count][G][row_bytes] tokens of one group. Callers check request
// ids, counts and pointers first (Runtime::requireDraft, writeWindow).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_REQUESTRINGS_H
#define DHS_RUNTIME_REQUESTRINGS_H

#include "runtime/core/Tiers.h"

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace dhs::runtime {

/// The draft and window rings of the admitted requests, by request index.
class RequestRings {
public:
  RequestRings(const TierLayout &layout, RingStore &rings) : layout_(layout), rings_(rings) {}

  /// Allocates the rings the layout has (draft window, window ring) for a
  /// request just admitted. Throws CapacityError when memory is short, with
  /// nothing kept.
  void allocate(std::int32_t index);
  /// Frees a request's rings (none: no effect).
  void free(std::int32_t index);

  /// Writes `count` draft tokens `rows` [count][L][row_bytes] at positions
  /// position .. position+count-1 of every group's ring. A write that fails
  /// leaves those slots holding no position (reads refuse them), never some
  /// groups' new tokens beside others' old ones.
  void appendDraft(std::int32_t index, std::int64_t position, std::int64_t count,
                   const std::uint8_t *rows);
  /// Reads the draft tokens at positions end-count .. end-1 into `out`
  /// [count][L][row_bytes] after checking that the rings hold each of them;
  /// throws OutOfRangeError naming `who` and the position otherwise.
  void readDraft(std::int32_t index, const std::string &who, std::int64_t end, std::int64_t count,
                 std::uint8_t *out);

  /// Writes `count` raw window tokens [count][L][row_bytes] at positions
  /// position .. position+count-1; the request then has position + count
  /// raw tokens. A write that fails leaves those slots holding no token (a
  /// step that needs one refuses).
  void writeWindow(std::int32_t index, std::int64_t position, std::int64_t count,
                   const std::uint8_t *rows);
  /// The raw tokens of a request's window, after checking that its ring
  /// holds every token a step of `queries` positions over a window of
  /// `window` tokens reads; throws InputError naming `who` and the token
  /// otherwise.
  std::int32_t windowTokens(std::int32_t index, const std::string &who, std::int64_t queries,
                            std::int64_t window) const;

private:
  /// Marks the slots of positions position .. position+count-1 of a ring
  /// of `ring` slots as holding none.
  static void forget(std::vector<std::int64_t> &held, std::int64_t position, std::int64_t count,
                     std::int64_t ring);

  TierLayout layout_;
  RingStore &rings_;
  /// Per request index: the logical position each draft-ring slot holds
  /// (-1: never written), shared by the groups (appends write all layers).
  std::unordered_map<std::int32_t, std::vector<std::int64_t>> draftPositions_;
  std::vector<std::uint8_t> draftScratch_; // one group's tokens
  /// Per request index: the raw-token position each window-ring slot holds
  /// (-1: never written), and the raw tokens written so far.
  std::unordered_map<std::int32_t, std::vector<std::int64_t>> windowPositions_;
  std::unordered_map<std::int32_t, std::int64_t> windowTokens_;
};

} // namespace dhs::runtime

#endif // DHS_RUNTIME_REQUESTRINGS_H
