//===- ManifestFuzzer.cpp - libFuzzer: a step directory into the runtime ---===//
//
// The input is a step directory's manifest.json, optionally followed by a
// line "--ptx--" and the text of its PTX file (step.ptx; other names the
// manifest gives do not exist). It is loaded as the runtime loads steps
// (bounded file reads, strict validation); a step that loads goes into a CPU
// runtime (with the host memory it may use limited to 512 MiB, as a
// container would), which admits a request and, when its inputs are small
// enough to build here, runs a step with the invariant checker on. Loading
// may fail with dhs::runtime::Error; nothing else may escape, crash, leak,
// trip a sanitizer or hang.
//
//===----------------------------------------------------------------------===//

#include "runtime/Runtime.h"
#include "runtime/core/Error.h"
#include "runtime/core/FaultInjection.h"
#include "runtime/core/Manifest.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

using namespace dhs::runtime;

namespace {

/// A directory of this process's own under /dev/shm (or the temp dir).
const std::string &stepDirectory() {
  // Never destroyed: the exit handler below still needs the name.
  static const std::string &dir = *new std::string([] {
    std::string base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string path = base + "/dhs-fuzz-manifest-" + std::to_string(getpid());
    std::filesystem::create_directories(path);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(stepDirectory(), ec);
    });
    return path;
  }());
  return dir;
}

void writeFile(const std::string &path, const std::string &text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

/// Runs what a CPU runtime does with a loaded attention step.
void exercise(const Manifest &manifest) {
  const KvPoolInfo &pool = manifest.argument(ArgumentRole::KvPool).pool;
  RuntimeConfig config;
  config.layers = static_cast<std::int32_t>(pool.layers) + 1;
  config.layersPerGroup = static_cast<std::int32_t>(pool.layers);
  config.hbmSlots = pool.hbmSlots >= 0 ? -1 : 64;
  config.hostRows = pool.hostRows >= 0 ? pool.hostRows : 256;
  config.maxRequests = 4;
  config.newestWindow = 2;
  config.hotFloor = 2;
  config.checkInvariants = true;
  config.fullCheckInterval = 1;
  Runtime rt(config);
  rt.loadStep(manifest);
  const ProblemShape &s = rt.shape();
  const std::int64_t len = std::min<std::int64_t>(8, config.hostRows / 2);
  std::vector<std::uint8_t> prefill(static_cast<std::size_t>(config.layers * len * rt.rowBytes()),
                                    0x3c);
  rt.admit(7, len, len + 2, prefill.data());
  const std::int64_t queryElems = s.queries * s.heads * s.qkDim * config.layers;
  const std::int64_t outputElems = s.queries * s.heads * s.vDim * config.layers;
  const std::int64_t selections = s.queries * s.topk * rt.groups();
  // A step only where the CPU computes it in well under a second here (the
  // load, admission and checks ran whatever the size).
  const std::int64_t work =
      config.layers * s.queries * s.heads * (s.topk + s.windowSize) * (s.qkDim + s.vDim);
  if (queryElems > (1 << 22) || outputElems > (1 << 22) || selections > (1 << 22) ||
      work > (std::int64_t(1) << 26))
    return;
  std::vector<bf16_t> queries(static_cast<std::size_t>(queryElems), 0x3f80),
      output(static_cast<std::size_t>(outputElems));
  std::vector<std::int32_t> rows(static_cast<std::size_t>(selections), -1);
  for (std::size_t i = 0; i < rows.size(); i += 2)
    rows[i] = static_cast<std::int32_t>(i % static_cast<std::size_t>(len > 0 ? len : 1));
  if (len == 0)
    std::fill(rows.begin(), rows.end(), -1);
  if (s.windowSize > 0) {
    std::vector<std::uint8_t> tokens(static_cast<std::size_t>(config.layers * rt.rowBytes()));
    rt.writeWindow(7, 0, 1, tokens.data());
  }
  const std::uint64_t id = 7;
  rt.step(&id, 1, rows.data(), queries.data(), output.data());
  rt.checkInvariants();
  rt.finish(7);
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  // What a container would allow: loads that need more are refused.
  faults::setHostMemoryLimit(std::uint64_t(512) << 20);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  const std::string input(reinterpret_cast<const char *>(data), size);
  static const std::string separator = "\n--ptx--\n";
  const std::size_t cut = input.find(separator);
  const std::string &dir = stepDirectory();
  writeFile(dir + "/manifest.json", input.substr(0, cut));
  std::error_code ec;
  std::filesystem::remove(dir + "/step.ptx", ec);
  if (cut != std::string::npos)
    writeFile(dir + "/step.ptx", input.substr(cut + separator.size()));
  try {
    ManifestLoadOptions options;
    options.requirePtx = false;
    Manifest manifest = Manifest::load(dir, options);
    for (const std::string &path : manifest.ptxPaths())
      if (std::filesystem::exists(path))
        (void)readPtxFile(path);
    if (manifest.hasAttention())
      exercise(manifest);
  } catch (const Error &) {
    // Refused with a message: what hostile input must get.
  }
  return 0;
}
