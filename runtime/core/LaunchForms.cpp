//===- LaunchForms.cpp - Which of a step's launches run, by rows missing ---===//

#include "runtime/core/LaunchForms.h"

#include "runtime/core/Manifest.h"

#include <algorithm>
#include <cstdio>

namespace dhs::runtime {

std::vector<double> formLines(const Manifest &manifest, std::size_t first, std::size_t end) {
  std::vector<double> lines;
  for (std::size_t i = first; i < end && i < manifest.launches.size(); ++i) {
    const Launch &launch = manifest.launches[i];
    if (!launch.residentKernel.empty())
      lines.push_back(kResidentFormMissing);
    if (launch.missingAbove >= 0.0)
      lines.push_back(launch.missingAbove);
    if (launch.missingUpTo < 1.0)
      lines.push_back(launch.missingUpTo);
  }
  std::sort(lines.begin(), lines.end());
  lines.erase(std::unique(lines.begin(), lines.end()), lines.end());
  return lines;
}

double missingShare(std::int64_t missing, std::int64_t selected) {
  return missing >= 0 && selected > 0 ? static_cast<double>(missing) / static_cast<double>(selected)
                                      : kUncountedMissing;
}

double lastStepShare(double loggedShare, bool decidedSinceLog, double decidedShare) {
  if (decidedShare >= 0.0 && (decidedSinceLog || loggedShare < 0.0))
    return decidedShare;
  return loggedShare >= 0.0 ? loggedShare : kUncountedMissing;
}

double formShare(const std::vector<double> &lines, double share, double previous) {
  auto above = std::lower_bound(lines.begin(), lines.end(), share);
  const double chosen = above == lines.end() ? 1.0 : *above;
  // A group moves down to a lower form at once, up only past the margin.
  if (previous >= 0.0 && previous < chosen && share <= previous + kFormMargin &&
      std::binary_search(lines.begin(), lines.end(), previous))
    return previous;
  return chosen;
}

std::string describeForm(const std::vector<double> &lines, double share) {
  auto percent = [](double s) {
    char text[32];
    std::snprintf(text, sizeof(text), "%g%%", s * 100.0);
    return std::string(text);
  };
  auto at = std::lower_bound(lines.begin(), lines.end(), share);
  const bool hasBelow = at != lines.begin();
  const bool hasAbove = at != lines.end();
  if (hasBelow && hasAbove)
    return "rows missing in (" + percent(*(at - 1)) + ", " + percent(*at) + "]";
  if (hasAbove)
    return "rows missing up to " + percent(*at);
  if (hasBelow)
    return "rows missing above " + percent(*(at - 1));
  return "every share of rows missing";
}

bool runsAt(const Launch &launch, double share) {
  return share > launch.missingAbove && share <= launch.missingUpTo;
}

bool runsResidentAt(const Launch &launch, double share) {
  return !launch.residentKernel.empty() && share <= kResidentFormMissing;
}

} // namespace dhs::runtime
