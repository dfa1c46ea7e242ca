//===- RequestRings.cpp - Each request's draft and window rings -----------===//

#include "runtime/RequestRings.h"

#include "runtime/core/Checked.h"
#include "runtime/core/Error.h"

#include <algorithm>
#include <cstring>

namespace dhs::runtime {

void RequestRings::allocate(std::int32_t index) {
  try {
    if (layout_.draftWindow > 0) {
      rings_.allocateDraftRings(index);
      draftPositions_[index].assign(static_cast<std::size_t>(layout_.draftWindow), -1);
    }
    if (layout_.windowRing > 0) {
      rings_.allocateWindowRings(index);
      windowPositions_[index].assign(static_cast<std::size_t>(layout_.windowRing), -1);
      windowTokens_[index] = 0;
    }
  } catch (...) {
    rings_.freeDraftRings(index);
    rings_.freeWindowRings(index);
    draftPositions_.erase(index);
    windowPositions_.erase(index);
    windowTokens_.erase(index);
    throw;
  }
}

void RequestRings::free(std::int32_t index) {
  if (layout_.draftWindow > 0) {
    rings_.freeDraftRings(index);
    draftPositions_.erase(index);
  }
  if (layout_.windowRing > 0) {
    rings_.freeWindowRings(index);
    windowPositions_.erase(index);
    windowTokens_.erase(index);
  }
}

void RequestRings::appendDraft(std::int32_t index, std::int64_t position, std::int64_t count,
                               const std::uint8_t *rows) {
  const std::size_t rowBytes = static_cast<std::size_t>(layout_.rowBytes);
  const std::size_t token = static_cast<std::size_t>(layout_.draftTokenBytes());
  draftScratch_.assign(static_cast<std::size_t>(count) * token, 0);
  for (std::int32_t g = 0; g < layout_.groups(); ++g) {
    // [count][L][row] -> [count][G][row] (the last group's tail stays zero).
    const std::int32_t first = layout_.firstLayer(g), layers = layout_.endLayer(g) - first;
    for (std::int64_t t = 0; t < count; ++t)
      std::memcpy(draftScratch_.data() + static_cast<std::size_t>(t) * token,
                  rows + (static_cast<std::size_t>(t) * layout_.layers + first) * rowBytes,
                  static_cast<std::size_t>(layers) * rowBytes);
    try {
      rings_.writeDraft(index, g, position, count, draftScratch_.data());
    } catch (...) {
      // Earlier groups' rings hold the new tokens, later ones the old: the
      // slots written hold no position any more (a read of one refuses),
      // rather than mixed rows.
      forget(draftPositions_.at(index), position, count, layout_.draftWindow);
      throw;
    }
  }
  std::vector<std::int64_t> &slots = draftPositions_.at(index);
  for (std::int64_t t = 0; t < count; ++t)
    slots[static_cast<std::size_t>(floorMod(position + t, layout_.draftWindow))] = position + t;
}

void RequestRings::forget(std::vector<std::int64_t> &held, std::int64_t position,
                          std::int64_t count, std::int64_t ring) {
  for (std::int64_t t = 0; t < count; ++t)
    held[static_cast<std::size_t>(floorMod(position + t, ring))] = -1;
}

void RequestRings::readDraft(std::int32_t index, const std::string &who, std::int64_t end,
                             std::int64_t count, std::uint8_t *out) {
  const std::vector<std::int64_t> &slots = draftPositions_.at(index);
  // The first position, end - count, is negative or does not exist.
  const std::optional<std::int64_t> first = trySub(end, count);
  if (!first || *first < 0)
    throw OutOfRangeError("draft read of " + who + ": " + std::to_string(count) +
                          " tokens ending at " + std::to_string(end) +
                          " start at a negative position");
  for (std::int64_t p = *first; p < end; ++p) {
    const std::int64_t held = slots[static_cast<std::size_t>(floorMod(p, layout_.draftWindow))];
    if (held != p)
      throw OutOfRangeError("draft read of " + who + ": position " + std::to_string(p) +
                            (held < 0 ? std::string(" was never written")
                                      : " is not in the draft ring (its slot " +
                                            std::to_string(p % layout_.draftWindow) +
                                            " now holds position " + std::to_string(held) + ")"));
  }
  const std::size_t rowBytes = static_cast<std::size_t>(layout_.rowBytes);
  const std::size_t token = static_cast<std::size_t>(layout_.draftTokenBytes());
  draftScratch_.assign(static_cast<std::size_t>(count) * token, 0);
  for (std::int32_t g = 0; g < layout_.groups(); ++g) {
    rings_.readDraft(index, g, end, count, draftScratch_.data());
    const std::int32_t firstLayer = layout_.firstLayer(g),
                       layers = layout_.endLayer(g) - firstLayer;
    for (std::int64_t t = 0; t < count; ++t)
      std::memcpy(out + (static_cast<std::size_t>(t) * layout_.layers + firstLayer) * rowBytes,
                  draftScratch_.data() + static_cast<std::size_t>(t) * token,
                  static_cast<std::size_t>(layers) * rowBytes);
  }
}

void RequestRings::writeWindow(std::int32_t index, std::int64_t position, std::int64_t count,
                               const std::uint8_t *rows) {
  std::vector<std::int64_t> &held = windowPositions_.at(index);
  try {
    rings_.writeWindow(index, position, count, rows);
  } catch (...) {
    // (Token by token: some slots may hold the new tokens.)
    forget(held, position, count, layout_.windowRing);
    throw;
  }
  for (std::int64_t t = 0; t < count; ++t)
    held[static_cast<std::size_t>(floorMod(position + t, layout_.windowRing))] = position + t;
  // The newest token written is the request's last raw token.
  windowTokens_.at(index) = position + count;
}

std::int32_t RequestRings::windowTokens(std::int32_t index, const std::string &who,
                                        std::int64_t queries, std::int64_t window) const {
  const std::int64_t tokens = windowTokens_.at(index);
  const std::vector<std::int64_t> &held = windowPositions_.at(index);
  const std::int64_t first = std::max<std::int64_t>(0, tokens - (queries - 1) - window);
  for (std::int64_t p = first; p < tokens; ++p)
    if (held[static_cast<std::size_t>(floorMod(p, layout_.windowRing))] != p)
      throw InputError(who + "'s sliding window lacks raw token " + std::to_string(p) + " (of " +
                       std::to_string(tokens) + "): write it with writeWindow before the step");
  return static_cast<std::int32_t>(tokens);
}

} // namespace dhs::runtime
