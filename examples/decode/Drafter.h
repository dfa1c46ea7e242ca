//===- Drafter.h - Self-speculation over the draft ring ---------*- C++ -*-===//
//
// dhs-decode's drafter: the target's own weights, attending (on the host,
// densely) only to the newest `window` tokens before each position, whose
// KV rows live in the request's draft ring in the runtime (dhs_draft_append,
// dhs_draft_read). It never touches the target's history or residency.
//
// A drafted position's ring rows stay valid when the target accepts its
// token; rejected positions are rewritten by the next round. The ring holds
// window + kMaxGamma tokens so that a round's rejected tail never
// overwrites a row the next round still reads.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_EXAMPLES_DECODE_DRAFTER_H
#define DHS_EXAMPLES_DECODE_DRAFTER_H

#include "examples/decode/Model.h"
#include "runtime/capi/dhs_runtime.h"

#include <cstdint>
#include <vector>

namespace dhs::decode {

/// Longest draft block dhs-decode supports (the compiled verify steps' Q - 1).
inline constexpr int kMaxGamma = 8;

/// The drafter's rows of the prompt's last tokens, computed on the host: the
/// drafter run over positions [max(0, end - 2 window), end) (nothing before
/// the first of them). Rows [count][layers][576]; returns the first position.
std::int64_t draftPrefill(const Model &model, const std::vector<int> &tokens, std::int64_t end,
                          int window, std::vector<std::uint16_t> &rows);

/// The drafter of one runtime session.
class Drafter {
public:
  /// `window`: tokens each drafted position attends to (the ring holds
  /// window + kMaxGamma).
  Drafter(const Model &model, dhs_runtime *runtime, int window);

  /// Writes request `id`'s prefill rows [count][layers][576] (positions
  /// start .. start+count-1) into its ring. Throws DecodeError.
  void admit(std::uint64_t id, std::int64_t start, const std::vector<std::uint16_t> &rows);

  /// Drafts up to `gamma` tokens that follow `tokens` (its last token is the
  /// next input; every earlier accepted token has ring rows or is caught up
  /// first). Greedy, or sampled from the drafter's distribution with the
  /// seed; `probs` (when not null) receives each draft's distribution q
  /// [gamma][vocab]. Throws DecodeError.
  std::vector<int> draft(std::uint64_t id, const std::vector<int> &tokens, int gamma, bool sampling,
                         std::uint64_t seed, std::vector<float> *probs);

  /// The request's stream is now `length` tokens long (after acceptance).
  void accepted(std::uint64_t id, std::int64_t length);

  /// Forgets a finished request.
  void finish(std::uint64_t id);

private:
  struct Ring {
    std::uint64_t id;
    std::int64_t lo = 0;  ///< first position ever written
    std::int64_t end = 0; ///< rows valid for positions [lo, end) of the stream
  };
  Ring &ring(std::uint64_t id);
  /// Runs the drafter on `token` at `position` (its window read from the
  /// ring), appends its rows at `position`, returns its logits.
  std::vector<float> step(Ring &ring, int token, std::int64_t position);

  const Model &model_;
  dhs_runtime *runtime_;
  int window_;
  std::vector<Ring> rings_;
};

} // namespace dhs::decode

#endif // DHS_EXAMPLES_DECODE_DRAFTER_H
