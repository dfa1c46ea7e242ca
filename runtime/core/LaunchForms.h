//===- LaunchForms.h - Which of a step's launches run, by rows missing -*- C++ -*-===//
//
// A layer group's attention may be compiled in several forms, each fastest
// for some share of the group's selected rows missing from HBM: the fused
// FP8 tensor-core kernel's resident form (Launch::residentKernel) while
// almost every row is in HBM, the fused kernels that read their missing rows
// from the host themselves, and one fetch of whole tokens before the group's
// staged attentions when many rows are missing (launches with a band,
// Launch::missingAbove / missingUpTo). Each step, a backend takes its
// group's share, holds it in the form the group ran last while it is just
// past a line (a switch recaptures a step's CUDA graph), and runs the
// launches whose band holds it. The CPU and CUDA backends choose alike.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_LAUNCHFORMS_H
#define DHS_RUNTIME_CORE_LAUNCHFORMS_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dhs::runtime {

struct Launch;
struct Manifest;

/// The share of a group's selected rows missing from HBM up to which its
/// attention launches run their resident kernel: on the H200 the fused FP8
/// kernel's is 8-11% faster with 0-2% of the rows missing, even at 3% and
/// 13-25% slower at 5-14% (bench/NOTES.md, 2026-12-04, twenty-fourth
/// session).
inline constexpr double kResidentFormMissing = 0.02;
/// How far past a line's upper side a group that ran the form below it
/// keeps that form: where the resident and fused kernels cross (3%), so
/// that a load near a line does not switch forms every step.
inline constexpr double kFormMargin = 0.01;
/// The share a step whose reads were not counted is taken to have (before a
/// group's first logged step): some rows missing, few.
inline constexpr double kUncountedMissing = 0.05;

/// The lines where launches [first, end) of `manifest` change form,
/// ascending and distinct: kResidentFormMissing where one has a resident
/// kernel, and the launches' band limits.
std::vector<double> formLines(const Manifest &manifest, std::size_t first, std::size_t end);

/// The share of a group's `selected` rows of which `missing` are read from
/// the host; kUncountedMissing where a count is below 0 or none was selected.
double missingShare(std::int64_t missing, std::int64_t selected);

/// The share of its selected rows a group whose selections were not counted
/// (resolved on the device) is taken to miss: its last step's, from the
/// device's counts (`decidedShare`; negative: no decision step) where the
/// device decided that step or the host booked none yet, else from the log
/// the host booked it by (`loggedShare`; negative: none); kUncountedMissing
/// before either.
double lastStepShare(double loggedShare, bool decidedSinceLog, double decidedShare);

/// The form share a step whose group misses `share` of its selected rows
/// runs at: the least of `lines` at or above `share`, or 1 (every share in
/// one form gives the same value, which backends key graphs on).
/// `previous` is the form share the group ran at last (negative: none): a
/// group keeps it where `share` is above it by at most kFormMargin.
double formShare(const std::vector<double> &lines, double share, double previous = -1.0);

/// The form of form share `share` among `lines` in words: "rows missing up
/// to 2%", "rows missing in (2%, 8%]", "rows missing above 8%".
std::string describeForm(const std::vector<double> &lines, double share);

/// Whether `launch` runs in a step at form share `share` (formShare).
bool runsAt(const Launch &launch, double share);

/// Whether `launch` runs its resident kernel at form share `share`.
bool runsResidentAt(const Launch &launch, double share);

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_LAUNCHFORMS_H
