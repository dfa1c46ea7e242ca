//===- DraftRingTest.cpp - The generated draft-ring kernels on a GPU ------===//
//
// examples/draft_ring_step.mlir, compiled at build time: a block of new draft
// rows is appended to each request's window-bounded ring at its position
// (wrapping around the window), then the newest rows are read back. On a GPU
// the ring and the window must equal a CPU replay byte for byte, on fresh
// random rows and positions; without a GPU (or without the compiler) the
// test says so and checks what it can.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

#include "runtime/core/Error.h"
#include "runtime/core/Manifest.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <random>

using namespace dhs::runtime;

TEST_CASE("the generated draft-ring kernels append to and read the ring", "[cuda][gpu][ring]") {
  // A ring step: no attention; two ring_index and two copy_rows launches.
  using abi::LaunchKind;
  std::optional<Manifest> compiled =
      dhs::test::kernelStepOrSkip("draft_ring", {LaunchKind::RingIndex, LaunchKind::CopyRows,
                                                 LaunchKind::RingIndex, LaunchKind::CopyRows});
  if (!compiled)
    return;
  const Manifest &manifest = *compiled;
  CHECK(manifest.launches[1].direction == abi::CopyDirection::Scatter);
  CHECK(manifest.launches[3].direction == abi::CopyDirection::Gather);
  CHECK_FALSE(manifest.launches[0].direction.has_value());
  REQUIRE(manifest.arguments.size() == 5);

  if (!dhs::test::gpuOrSkip())
    return;
  DHS_SEEDED_RNG(rng, 900);

  // [4, 64, 1, 1152] ring, [4, 5, ...] new rows, positions, ends, window.
  const std::size_t B = 4, W = 64, N = 5, R = 32, row = 1152;
  std::vector<std::uint8_t> ring(B * W * row), fresh(B * N * row), window(B * R * row, 0xAB);
  for (auto &b : ring)
    b = static_cast<std::uint8_t>(rng());
  for (auto &b : fresh)
    b = static_cast<std::uint8_t>(rng());
  std::vector<std::int32_t> positions(B), ends(B);
  for (std::size_t b = 0; b < B; ++b) {
    // Positions that wrap the window, some far past it.
    positions[b] = static_cast<std::int32_t>(rng() % 1000);
    ends[b] = positions[b] + static_cast<std::int32_t>(N);
  }

  dhs::test::KernelRun run(manifest);
  const CUdeviceptr ringBuffer = run.argument(ring, "ring");
  run.argument(fresh, "new rows");
  run.argument(positions, "positions");
  run.argument(ends, "ends");
  const CUdeviceptr windowBuffer = run.argument(window, "window");
  run.buffers.arena = run.allocate(
      static_cast<std::size_t>(std::max<std::int64_t>(manifest.arenaBytes, 16)), "arena");
  run.launch("draft ring step");

  const std::vector<std::uint8_t> gotRing =
      run.download<std::uint8_t>(ringBuffer, ring.size(), "ring");
  const std::vector<std::uint8_t> gotWindow =
      run.download<std::uint8_t>(windowBuffer, window.size(), "window");
  const std::uint32_t word = run.status();
  CHECK(word == 0);

  // The CPU replay: append at (position + i) mod W, read (end - R + i) mod W.
  auto mod = [](std::int64_t x, std::int64_t m) { return ((x % m) + m) % m; };
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < N; ++i)
      std::memcpy(&ring[(b * W + static_cast<std::size_t>(
                                     mod(positions[b] + static_cast<std::int64_t>(i), W))) *
                        row],
                  &fresh[(b * N + i) * row], row);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < R; ++i)
      std::memcpy(
          &window[(b * R + i) * row],
          &ring[(b * W +
                 static_cast<std::size_t>(mod(
                     ends[b] - static_cast<std::int64_t>(R) + static_cast<std::int64_t>(i), W))) *
                row],
          row);
  CHECK(gotRing == ring);
  CHECK(gotWindow == window);
}
