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

#include "TestUtil.h"

#include "runtime/core/Error.h"
#include "runtime/core/Manifest.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CudaResources.h"
#include "runtime/cuda/CudaStep.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <random>

using namespace dhs::runtime;
using namespace dhs::runtime::cuda_detail;

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
  const CudaDriver &cuda = CudaDriver::instance();
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

  CudaStep cudaStep(manifest, 0);
  cudaStep.makeCurrent();
  auto upload = [&](const void *data, std::size_t bytes, const char *name) {
    auto buffer = std::make_unique<DeviceBuffer>(bytes, name);
    cuda.check(cuda.memcpyHtoD(buffer->get(), data, bytes), name);
    return buffer;
  };
  std::vector<std::unique_ptr<DeviceBuffer>> owned;
  owned.push_back(upload(ring.data(), ring.size(), "ring"));
  owned.push_back(upload(fresh.data(), fresh.size(), "new rows"));
  owned.push_back(upload(positions.data(), B * 4, "positions"));
  owned.push_back(upload(ends.data(), B * 4, "ends"));
  owned.push_back(upload(window.data(), window.size(), "window"));
  DeviceBuffer arena(static_cast<std::size_t>(std::max<std::int64_t>(manifest.arenaBytes, 16)),
                     "arena");
  DeviceBuffer status(4, "status");
  cuda.check(cuda.memsetD32(status.get(), 0, 1), "status");
  CudaStepBuffers buffers;
  for (auto &buffer : owned)
    buffers.arguments.push_back(buffer->get());
  buffers.arena = arena.get();
  buffers.status = status.get();
  Stream stream;
  cudaStep.launchAsync(buffers, stream.get());
  cuda.check(cuda.streamSynchronize(stream.get()), "draft ring step");

  std::vector<std::uint8_t> gotRing(ring.size()), gotWindow(window.size());
  std::uint32_t word = 1;
  cuda.check(cuda.memcpyDtoH(gotRing.data(), owned[0]->get(), gotRing.size()), "ring");
  cuda.check(cuda.memcpyDtoH(gotWindow.data(), owned[4]->get(), gotWindow.size()), "window");
  cuda.check(cuda.memcpyDtoH(&word, status.get(), 4), "status");
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
