//===- TierLayout.h - Sizes of the KV tiers ---------------------*- C++ -*-===//
//
// How a session's KV rows are laid out in its tiers: L layers in groups of G,
// pools of P layers per token (P = 1 or G; a smaller last group's pool holds
// only its own layers when the step declares it so), slots and host rows per
// pool, and the sizes of the draft and window rings. docs/runtime.md
// describes the tiers.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_TIERLAYOUT_H
#define DHS_RUNTIME_CORE_TIERLAYOUT_H

#include "runtime/core/Checked.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace dhs::runtime {

/// Sizes of the tiers.
struct TierLayout {
  std::int32_t layers = 1;         ///< L
  std::int32_t layersPerGroup = 1; ///< G
  std::int32_t layersPerPool = 1;  ///< P: 1, or G (one pool per group)
  std::int32_t lastPoolLayers = 1; ///< layers per token of the last pool: P, or
                                   ///< the last group's own layers (fewer than P)
  std::int32_t hbmSlots = 0;       ///< slots per layer (= per group)
  std::int64_t hostRows = 0;       ///< host-store rows per layer
  std::int64_t rowBytes = 0;       ///< bytes per row
  std::int32_t draftWindow = 0;    ///< W_draft: tokens per draft ring (0: none)
  std::int32_t windowRing = 0;     ///< R: raw tokens per sliding-window ring (0: none)
  std::int64_t writeBackRows = 0;  ///< tokens per pool's write-back ring (0: none)

  /// Layer groups: ceil(L / G).
  std::int32_t groups() const { return (layers + layersPerGroup - 1) / layersPerGroup; }
  /// Layers of group g: [first, end).
  std::int32_t firstLayer(std::int32_t g) const { return g * layersPerGroup; }
  /// One past the last layer of group g.
  std::int32_t endLayer(std::int32_t g) const { return std::min(layers, (g + 1) * layersPerGroup); }
  /// Pools: ceil(L / P).
  std::int32_t pools() const { return (layers + layersPerPool - 1) / layersPerPool; }
  /// The pool holding a layer.
  std::size_t poolOf(std::int32_t layer) const {
    return static_cast<std::size_t>(layer / layersPerPool);
  }
  /// Layers per token of a pool: P, the last pool's lastPoolLayers.
  std::int32_t layersIn(std::size_t pool) const {
    return pool + 1 == static_cast<std::size_t>(pools()) ? lastPoolLayers : layersPerPool;
  }
  /// Bytes of one token in a pool: its layers x row_bytes.
  std::int64_t tokenBytes(std::size_t pool) const { return layersIn(pool) * rowBytes; }
  /// Bytes of one token in all pools together.
  std::int64_t storedTokenBytes() const {
    return (static_cast<std::int64_t>(pools() - 1) * layersPerPool + lastPoolLayers) * rowBytes;
  }
  /// Bytes of one token of a draft ring: G * row_bytes (a group's layers;
  /// the last group's ring is padded when G does not divide L).
  std::int64_t draftTokenBytes() const { return layersPerGroup * rowBytes; }
  /// Byte offset of a layer's row within its pool's token.
  std::int64_t layerOffset(std::int32_t layer) const { return (layer % layersPerPool) * rowBytes; }
  /// Byte offset of a layer's row of token `index` (a host row or a slot) in
  /// its pool's tier.
  std::size_t rowOffset(std::int32_t layer, std::int64_t index) const {
    return static_cast<std::size_t>(index * tokenBytes(poolOf(layer)) + layerOffset(layer));
  }
  /// Bytes of one draft ring: W_draft tokens.
  std::size_t draftRingBytes() const {
    return static_cast<std::size_t>(draftWindow) * static_cast<std::size_t>(draftTokenBytes());
  }
  /// Bytes of one pool's window ring: R tokens of the pool.
  std::size_t windowRingBytes(std::size_t pool) const {
    return static_cast<std::size_t>(windowRing) * static_cast<std::size_t>(tokenBytes(pool));
  }
  /// Byte offset of a pool's window ring among a request's rings, laid out
  /// pool after pool.
  std::size_t windowRingOffset(std::size_t pool) const {
    return pool * static_cast<std::size_t>(windowRing) *
           static_cast<std::size_t>(layersPerPool * rowBytes);
  }
  /// Bytes of a request's window rings of all pools.
  std::size_t windowRingsBytes() const {
    return static_cast<std::size_t>(windowRing) * static_cast<std::size_t>(storedTokenBytes());
  }
};

/// Calls `copy(ring offset, token offset, bytes)` for every piece of writing
/// `count` raw tokens [count][L][row_bytes] at positions position.. into
/// window rings laid out pool after pool, [R][pool's layers x row_bytes]
/// each: a token's layers of one pool go to slot (position + t) mod R of
/// that pool's ring.
template <typename Copy>
void forEachWindowCopy(const TierLayout &layout, std::int64_t position, std::int64_t count,
                       Copy copy) {
  const std::size_t rowBytes = static_cast<std::size_t>(layout.rowBytes);
  for (std::int64_t t = 0; t < count; ++t) {
    const std::size_t slot = static_cast<std::size_t>(floorMod(position + t, layout.windowRing));
    for (std::int32_t pool = 0; pool < layout.pools(); ++pool) {
      const std::size_t p = static_cast<std::size_t>(pool);
      const std::int32_t first = pool * layout.layersPerPool;
      const std::int32_t layers = std::min(layout.layersIn(p), layout.layers - first);
      copy(layout.windowRingOffset(p) + slot * static_cast<std::size_t>(layout.tokenBytes(p)),
           (static_cast<std::size_t>(t) * static_cast<std::size_t>(layout.layers) +
            static_cast<std::size_t>(first)) *
               rowBytes,
           static_cast<std::size_t>(layers) * rowBytes);
    }
  }
}

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_TIERLAYOUT_H
