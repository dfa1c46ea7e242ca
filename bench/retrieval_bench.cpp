//===- retrieval_bench.cpp - Times the fetch of missing rows from the host store -===//
//
// Usage: dhs-retrieval-bench <fetch step dir>... [tokens per request]
//                            [--missing=F,F,...]
// The step (bench/steps/fetch_fp8_group.mlir): one layer group's dhs.fetch,
// B requests x K selections over FP8 rows stored in groups of 4 layers, so a
// missing token is one 2624-byte unit of the host store (or, with
// bench/steps/fetch_fp8_layer.mlir, one 656-byte row). The benchmark maps
// a pinned host store of B x T tokens (default T = 65536: 22 GB for 128
// requests, the store of issue 10's retrieval target), and for 5, 10, 14
// and 20% (or the --missing fractions) of each request's K distinct random
// selections missing (slot -1;
// the others resident, which the fetch skips; first in each list or at
// random places in it) times the compiled fetch kernel (median of 7) and
// prints the useful bytes it moved per second (missing tokens x token
// bytes) beside a contiguous 1 GiB pinned host-to-device copy timed in the
// same run. Both are timed by the device (CUDA events around the launch,
// the rule of the attention table) and by the wall clock (from the launch
// to the end of the stream, which adds the host's launch and wake-up, ~10
// us a fetch: bench/NOTES.md 2026-12-03, nineteenth session).
// Several step directories (the same shape, e.g. a baseline kernel and a
// new one) are timed on the same store and selections, one line each.
// Sampled staged tokens are compared with the host store.
//
//===----------------------------------------------------------------------===//

#include "bench/BenchSetup.h"
#include "bench/BenchTiming.h"
#include "runtime/core/Manifest.h"
#include "runtime/core/Parallel.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CudaResources.h"
#include "runtime/cuda/CudaStep.h"
#include "tools/CommandLine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

using namespace dhs::runtime;
using namespace dhs::runtime::cuda_detail;
using dhs::bench::medianEventMs;
using dhs::bench::medianMs;

namespace {

/// splitmix64: the host store's bytes, cheap enough for 22 GB.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

} // namespace

int main(int argc, char **argv) {
  try {
    std::vector<std::string> stepDirs;
    std::vector<double> fractions{0.05, 0.10, 0.14, 0.20};
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg.rfind("--missing=", 0) != 0) {
        stepDirs.push_back(arg);
        continue;
      }
      fractions.clear();
      for (std::size_t at = 10; at <= arg.size();) {
        const std::size_t comma = std::min(arg.find(',', at), arg.size());
        const double fraction = dhs::tools::parseDouble(arg.substr(at, comma - at), "--missing");
        if (!(fraction > 0 && fraction <= 1)) {
          std::fprintf(stderr, "dhs-retrieval-bench: %s: fractions in (0, 1]\n", arg.c_str());
          return 2;
        }
        fractions.push_back(fraction);
        at = comma + 1;
      }
    }
    std::size_t T = 65536;
    if (!stepDirs.empty() && !stepDirs.back().empty() &&
        std::all_of(stepDirs.back().begin(), stepDirs.back().end(),
                    [](char c) { return c >= '0' && c <= '9'; })) {
      T = std::stoul(stepDirs.back());
      stepDirs.pop_back();
    }
    if (stepDirs.empty() || dhs::bench::wantsHelp(argc, argv)) {
      const bool help = dhs::bench::wantsHelp(argc, argv);
      std::fprintf(help ? stdout : stderr,
                   "usage: dhs-retrieval-bench <fetch step dir>... [tokens per request] "
                   "[--missing=F,F,...]\n");
      return help ? 0 : 2;
    }
    const Manifest manifest = dhs::bench::loadSingleLaunchStep(stepDirs[0], abi::LaunchKind::Fetch);
    const KvPoolInfo &pool = manifest.argument(ArgumentRole::KvPool).pool;
    const std::size_t tokenBytes = static_cast<std::size_t>(pool.layers * pool.rowBytes);
    const std::vector<std::int64_t> &selectionShape =
        manifest.argument(ArgumentRole::RowIds).shape; // [B, Q, K]
    const std::size_t B = static_cast<std::size_t>(selectionShape[0]);
    const std::size_t K = static_cast<std::size_t>(selectionShape[1] * selectionShape[2]);
    if (T < K)
      throw Error("each request needs at least " + std::to_string(K) + " tokens");
    const CudaDriver &cuda = dhs::bench::requireGpu();
    // The steps to time, each checked to have the first one's arguments.
    std::vector<std::unique_ptr<CudaStep>> steps;
    for (const std::string &dir : stepDirs) {
      const Manifest other = dhs::bench::loadSingleLaunchStep(dir, abi::LaunchKind::Fetch);
      if (other.argument(ArgumentRole::RowIds).shape != selectionShape ||
          other.argument(ArgumentRole::KvPool).pool.rowBytes != pool.rowBytes ||
          other.argument(ArgumentRole::KvPool).pool.layers != pool.layers ||
          other.arenaBytes != manifest.arenaBytes)
        throw Error(dir + ": not the shape of " + stepDirs[0]);
      steps.push_back(std::make_unique<CudaStep>(other, 0));
    }
    steps[0]->makeCurrent();
    const std::size_t hostTokens = B * T, storeBytes = hostTokens * tokenBytes;
    std::printf("host store: %zu requests x %zu tokens x %zu bytes = %.1f GB pinned; filling\n", B,
                T, tokenBytes, static_cast<double>(storeBytes) / 1e9);
    std::fflush(stdout);
    MappedHostBuffer host(storeBytes, "the host store");
    auto *bytes = static_cast<std::uint8_t *>(host.host());
    // Filled on every core (22 GB on one core is most of the benchmark's time);
    // each 8-byte word depends on its offset only.
    parallelFor(static_cast<std::int64_t>(storeBytes / 8), std::int64_t(1) << 20, 0,
                [&](std::int64_t begin, std::int64_t end) {
                  for (std::int64_t w = begin; w < end; ++w) {
                    const std::uint64_t x = mix(static_cast<std::uint64_t>(w) * 8);
                    std::memcpy(bytes + w * 8, &x, 8);
                  }
                });
    DeviceBuffer arena(static_cast<std::size_t>(manifest.arenaBytes), "the staging arena");
    DeviceBuffer rows(B * K * 4, "selections"), slots(B * K * 4, "slots");
    DeviceBuffer starts(B * 8, "history starts"), lengths(B * 4, "history lengths");
    DeviceBuffer status(4, "the status word");
    std::vector<std::int64_t> start(B);
    std::vector<std::int32_t> length(B, static_cast<std::int32_t>(T));
    for (std::size_t b = 0; b < B; ++b)
      start[b] = static_cast<std::int64_t>(b * T);
    cuda.check(cuda.memcpyHtoD(starts.get(), start.data(), B * 8), "history starts");
    cuda.check(cuda.memcpyHtoD(lengths.get(), length.data(), B * 4), "history lengths");
    cuda.check(cuda.memsetD32(status.get(), 0, 1), "the status word");
    CudaStepBuffers buffers;
    buffers.arguments.assign(manifest.arguments.size(), 0);
    auto bind = [&](ArgumentRole role, CUdeviceptr pointer) {
      buffers.arguments[static_cast<std::size_t>(manifest.argument(role).index)] = pointer;
    };
    bind(ArgumentRole::RowIds, rows.get());
    bind(ArgumentRole::Slots, slots.get());
    bind(ArgumentRole::HistoryStart, starts.get());
    bind(ArgumentRole::HistoryLen, lengths.get());
    buffers.host = host.device();
    buffers.hostRows = static_cast<std::int64_t>(hostTokens);
    buffers.arena = arena.get();
    buffers.status = status.get();
    Stream stream;

    // The floor: one contiguous 1 GiB copy from the pinned store.
    const std::size_t floorBytes = std::min<std::size_t>(std::size_t(1) << 30, storeBytes);
    const std::size_t floorCopy =
        std::min(floorBytes, static_cast<std::size_t>(manifest.arenaBytes));
    auto contiguousCopy = [&] {
      cuda.check(cuda.memcpyHtoDAsync(arena.get(), bytes, floorCopy, stream.get()),
                 "the contiguous copy");
    };
    const double floorMs = medianEventMs(stream.get(), 7, contiguousCopy);
    const double floorWallMs = medianMs(stream.get(), 7, contiguousCopy);
    const double copyRate = static_cast<double>(floorCopy) / floorMs / 1e6;
    const double copyWallRate = static_cast<double>(floorCopy) / floorWallMs / 1e6;
    std::printf("pinned host-to-device copy: %.1f GB/s (%zu MB contiguous; wall clock %.1f GB/s)\n",
                copyRate, floorCopy >> 20, copyWallRate);
    std::printf("%8s %10s %10s %10s %10s %9s %10s %10s %9s  %s\n", "missing", "tokens", "MB", "ms",
                "GB/s", "of copy", "wall ms", "wall GB/s", "of copy", "misses in the list, step");

    std::mt19937_64 rng(11);
    std::vector<std::int32_t> ids(B * K), slot(B * K);
    std::vector<std::size_t> positions(K), missing;
    std::vector<char> taken(T);
    // Missing rows first in each request's list (the layout of the runs
    // before 2026-12-01), or at random places in it (a top-k list in score
    // order: a row's residency does not follow its rank).
    for (const bool scattered : {false, true})
      for (double fraction : fractions) {
        const std::size_t missingPerRequest = static_cast<std::size_t>(fraction * K + 0.5);
        missing.clear();
        for (std::size_t b = 0; b < B; ++b) {
          // K distinct rows of the request's history in random order, of
          // which `missingPerRequest` are missing.
          std::fill(taken.begin(), taken.end(), 0);
          for (std::size_t i = 0; i < K; ++i) {
            std::size_t row;
            do
              row = static_cast<std::size_t>(rng() % T);
            while (taken[row]);
            taken[row] = 1;
            ids[b * K + i] = static_cast<std::int32_t>(row);
            slot[b * K + i] = 0;
          }
          std::iota(positions.begin(), positions.end(), std::size_t(0));
          if (scattered)
            std::shuffle(positions.begin(), positions.end(), rng);
          for (std::size_t j = 0; j < missingPerRequest; ++j) {
            slot[b * K + positions[j]] = -1;
            missing.push_back(positions[j]);
          }
        }
        cuda.check(cuda.memcpyHtoD(rows.get(), ids.data(), B * K * 4), "selections");
        cuda.check(cuda.memcpyHtoD(slots.get(), slot.data(), B * K * 4), "slots");
        for (std::size_t k = 0; k < steps.size(); ++k) {
          CudaStep &step = *steps[k];
          cuda.check(cuda.memsetD32(arena.get(), 0, manifest.arenaBytes / 4), "the staging arena");
          auto fetch = [&] { step.launchAsync(buffers, stream.get()); };
          const double ms = medianEventMs(stream.get(), 7, fetch);
          const double wallMs = medianMs(stream.get(), 7, fetch);
          std::uint32_t word = 0;
          cuda.check(cuda.memcpyDtoH(&word, status.get(), 4), "the status word");
          if (word != 0)
            throw Error(stepDirs[k] + ": the fetch kernel reported status " + describeStatus(word));
          // Sampled missing tokens reached their staging rows [b, i].
          std::vector<std::uint8_t> staged(tokenBytes);
          for (std::size_t b = 0; b < B; b += std::max<std::size_t>(1, B / 16))
            for (std::size_t j = 0; j < missingPerRequest;
                 j += std::max<std::size_t>(1, missingPerRequest / 4)) {
              const std::size_t i = missing[b * missingPerRequest + j];
              cuda.check(cuda.memcpyDtoH(staged.data(), arena.get() + (b * K + i) * tokenBytes,
                                         tokenBytes),
                         "a staged token");
              const std::uint8_t *source = bytes + (static_cast<std::size_t>(start[b]) +
                                                    static_cast<std::size_t>(ids[b * K + i])) *
                                                       tokenBytes;
              if (std::memcmp(staged.data(), source, tokenBytes) != 0)
                throw Error(stepDirs[k] + ": staging row " + std::to_string(i) + " of request " +
                            std::to_string(b) + " does not hold its token");
            }
          const std::size_t tokens = B * missingPerRequest;
          const double useful = static_cast<double>(tokens * tokenBytes);
          std::printf("%7.1f%% %10zu %10.1f %10.3f %10.1f %8.0f%% %10.3f %10.1f %8.0f%%  %s, %s\n",
                      fraction * 100, tokens, useful / 1e6, ms, useful / ms / 1e6,
                      100 * useful / ms / 1e6 / copyRate, wallMs, useful / wallMs / 1e6,
                      100 * useful / wallMs / 1e6 / copyWallRate, scattered ? "scattered" : "first",
                      stepDirs[k].c_str());
          std::fflush(stdout);
        }
      }
    return 0;
  } catch (const dhs::tools::UsageError &e) {
    std::fprintf(stderr, "dhs-retrieval-bench: %s\n", e.what());
    return 2;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "dhs-retrieval-bench: %s\n", e.what());
    return 1;
  }
}
