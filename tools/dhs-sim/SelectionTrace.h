//===- SelectionTrace.h - Synthetic and recorded selection traces -*- C++ -*-===//
//
// Selection traces drive dhs-sim and the residency tests without a model:
// the drop-and-re-reference generator (DrrGenerator) and trace files
// (TraceReader, TraceWriter). docs/runtime.md ("dhs-sim") describes the model,
// its calibration and the file format.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_TOOLS_DHSSIM_SELECTIONTRACE_H
#define DHS_TOOLS_DHSSIM_SELECTIONTRACE_H

#include <cstdint>
#include <istream>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <vector>

namespace dhs::tools::sim {

/// Parameters of the DRR generator.
struct DrrParams {
  std::int32_t topk = 2048;    ///< K: selected rows per step
  std::int32_t sinks = 16;     ///< s: positions 0..s-1 always selected
  std::int32_t window = 64;    ///< w: the newest w tokens always selected
  double f = 0.57;             ///< drop probability of a non-anchor member
  double q = 0.96;             ///< probability that a refill is a ghost
  double gamma = 1.8;          ///< ghost age exponent, P(A) ~ A^-gamma
                               ///< (1.8: 14% misses at B = 4096, see above)
  double r = 0.5;              ///< probability that a fresh refill is recent
  double lambda = 2048;        ///< mean distance of recent fresh refills
  bool contextScaling = false; ///< (1 - q) grows as sqrt(L / 32K)

  /// Throws Error naming the first invalid parameter.
  void validate() const;
};

/// One (request, group) stream of DRR selections.
class DrrGenerator {
public:
  /// A stream with its own random sequence.
  DrrGenerator(const DrrParams &params, std::uint64_t seed);

  /// The next step's selection over a context of `contextLen` rows (never
  /// shorter than the previous call's): min(K, contextLen) distinct rows in
  /// [0, contextLen). The reference stays valid until the next call.
  const std::vector<std::int32_t> &next(std::int64_t contextLen);

  /// Fraction of the last selection that was also in the one before.
  double lastOverlap() const { return overlap_; }
  /// Steps generated.
  std::int64_t steps() const { return step_; }

private:
  std::int64_t sampleAge(std::int64_t maxAge);
  bool tryGhost(std::int64_t contextLen);
  void addFresh(std::int64_t contextLen);
  void add(std::int32_t token);
  void grow(std::int64_t contextLen);

  DrrParams params_;
  std::mt19937_64 rng_;
  std::int64_t step_ = 0;
  std::int64_t contextLen_ = 0;
  std::vector<std::int32_t> current_;  // S_t
  std::vector<std::int32_t> previous_; // S_{t-1}
  std::vector<std::uint32_t> inSet_;   // [token] == mark: in S_t being built
  std::uint32_t mark_ = 0;
  std::vector<std::int32_t> lastUse_;             // [token] step last selected, -1 never
  std::vector<std::vector<std::int32_t>> byStep_; // [step] tokens last selected then
  std::vector<double> ageCdf_;                    // [A] sum_{a<=A} a^-gamma
  double overlap_ = 0.0;
};

/// One event of a trace.
struct TraceEvent {
  enum Kind { Admit, Select, Step, Append, Finish } kind = Step; ///< what
  std::uint64_t id = 0;                                          ///< request
  std::int64_t a = 0;             ///< admit: history length; append: count;
                                  ///< select: group
  std::int64_t b = 0;             ///< admit: max context; select: query
  std::vector<std::int32_t> rows; ///< select: row ids
};

/// Reads a trace file one event at a time.
class TraceReader {
public:
  /// Reads from `in`; `name` is used in messages. Throws Error if the first
  /// line is not "dhs-trace 1".
  TraceReader(std::istream &in, std::string name);
  /// The next event, or false at the end. Throws Error naming the line for
  /// anything malformed.
  bool next(TraceEvent &event);
  /// Line number of the last event read.
  std::int64_t line() const { return line_; }

private:
  std::istream &in_;
  std::string name_;
  std::int64_t line_ = 0;
};

/// Writes a trace file.
class TraceWriter {
public:
  /// Writes the header to `out`.
  explicit TraceWriter(std::ostream &out);
  /// Writes one event.
  void write(const TraceEvent &event);

private:
  std::ostream &out_;
};

} // namespace dhs::tools::sim

#endif // DHS_TOOLS_DHSSIM_SELECTIONTRACE_H
