//===- DraftRingStep.cpp - What a compiled draft-ring step is -------------===//

#include "runtime/core/DraftRingStep.h"

#include "runtime/core/Error.h"
#include "runtime/core/Manifest.h"

#include <string>
#include <vector>

namespace dhs::runtime {

DraftStepInfo draftStepInfo(const Manifest &m) {
  auto fail = [&](const std::string &what) {
    throw Error("the step " + m.directory + " is not a draft-ring step (" + what +
                "); compile one like examples/draft_ring_step.mlir: ring_append then ring_read "
                "in a dhs.draft region");
  };
  if (m.launches.size() != 4)
    fail(std::to_string(m.launches.size()) + " launches, expected 4");
  const abi::LaunchKind kinds[] = {abi::LaunchKind::RingIndex, abi::LaunchKind::CopyRows,
                                   abi::LaunchKind::RingIndex, abi::LaunchKind::CopyRows};
  for (std::size_t i = 0; i < 4; ++i) {
    if (m.launches[i].kind != kinds[i])
      fail("launch " + std::to_string(i) + " is " + abi::name(m.launches[i].kind) + ", expected " +
           abi::name(kinds[i]));
    const std::size_t params = i % 2 == 0 ? 2 : 4;
    if (m.launches[i].params.size() != params)
      fail("launch " + std::to_string(i) + " has " + std::to_string(m.launches[i].params.size()) +
           " parameters");
  }
  auto argumentOf = [&](std::size_t launch, std::size_t param) {
    const LaunchParam &p = m.launches[launch].params[param];
    if (p.source != ParamSource::Argument || p.argumentIndex < 0 ||
        p.argumentIndex >= static_cast<int>(m.arguments.size()))
      fail("parameter " + std::to_string(param) + " of launch " + std::to_string(launch) +
           " is not an argument");
    return p.argumentIndex;
  };
  DraftStepInfo info;
  info.positionsArgument = argumentOf(0, 0);
  info.rowsArgument = argumentOf(1, 0);
  info.ringArgument = argumentOf(1, 1);
  info.endsArgument = argumentOf(2, 0);
  info.windowArgument = argumentOf(3, 1);
  if (argumentOf(3, 0) != info.ringArgument)
    fail("the read does not gather from the ring the append scatters into");
  auto rows = [&](int index, const char *name) {
    const Argument &a = m.arguments[static_cast<std::size_t>(index)];
    if (a.isPool || a.dtype != DType::I8 || a.shape.size() != 4)
      fail(std::string("the ") + name + " are not an i8 memref [B, rows, a, b]");
    return a.shape;
  };
  auto lanes = [&](int index, const char *name) {
    const Argument &a = m.arguments[static_cast<std::size_t>(index)];
    if (a.isPool || a.dtype != DType::I32 || a.shape.size() != 1)
      fail(std::string("the ") + name + " are not an i32 memref [B]");
    return a.shape[0];
  };
  const std::vector<std::int64_t> ring = rows(info.ringArgument, "ring"),
                                  fresh = rows(info.rowsArgument, "appended rows"),
                                  window = rows(info.windowArgument, "rows read");
  info.lanes = ring[0];
  info.window = ring[1];
  info.block = fresh[1];
  info.readRows = window[1];
  info.tokenBytes = ring[2] * ring[3];
  for (const auto &shape : {fresh, window})
    if (shape[0] != info.lanes || shape[2] * shape[3] != info.tokenBytes)
      fail("the rings, appended rows and rows read disagree in batch or row bytes");
  if (lanes(info.positionsArgument, "positions") != info.lanes ||
      lanes(info.endsArgument, "ends") != info.lanes)
    fail("the positions or ends are not one per ring");
  if (info.lanes < 1 || info.window < 1 || info.block < 1 || info.readRows < 1)
    fail("an empty dimension");
  return info;
}

} // namespace dhs::runtime
