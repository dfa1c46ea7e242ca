//===- Decoder.h - dhs-decode's decode loops over the C API -----*- C++ -*-===//
//
// A decode session: a dhs runtime configured for a residency mode, the
// model's compiled steps loaded (one per layer index of a layer-group pool),
// requests admitted with their prompts' prefill KV, then greedy or sampled
// decoding, plain (one position per step: dhs_step_begin, dhs_step_select per
// group, dhs_step_attend per layer, dhs_step_end, dhs_request_append) or
// speculative (Speculative.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_EXAMPLES_DECODE_DECODER_H
#define DHS_EXAMPLES_DECODE_DECODER_H

#include "examples/decode/Forward.h"
#include "examples/decode/Model.h"
#include "runtime/capi/dhs_runtime.h"

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace dhs::decode {

/// A failed dhs call or a broken expectation.
class DecodeError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Throws DecodeError naming `what` unless `status` is DHS_OK.
void check(dhs_status status, const char *what);

/// How much of the history HBM can hold.
enum class Residency {
  All,  ///< HBM holds every row of every request
  Part, ///< HBM holds the protected sets and about a quarter of the history
  None  ///< minimal HBM: one newest token, no floor, no promotions
};

/// Parses "all", "part", "none"; throws DecodeError.
Residency parseResidency(const std::string &text);
/// The name of a residency mode.
const char *residencyName(Residency residency);

/// What to decode and how.
struct DecodeOptions {
  int backend = DHS_BACKEND_CPU; ///< dhs_backend
  int requests = 2;              ///< requests decoded together (<= the steps' B)
  int prompt = 256;              ///< prompt tokens per request
  int tokens = 32;               ///< tokens to generate per request
  int gamma = 4;                 ///< drafts per verify block
  int draftWindow = 32;          ///< the drafter's attention window (tokens)
  Residency residency = Residency::All;
  bool speculate = true; ///< draft and verify, else one position per step
  bool sampling = false; ///< sample (rejection sampling when speculating)
  std::uint64_t seed = 1;
  bool checkInvariants = false; ///< the runtime's invariant checker
  bool rejectOne = false;       ///< speculating: try a bad verify step once (it must fail
                                ///< and change nothing)
  std::string steps;            ///< directory of the compiled steps
};

/// One request's prompt and its prefill (the model run over the prompt on
/// the host): KV rows of positions 0 .. prompt-2 and the indexer keys (the
/// prompt's last token is the first decode step's input).
struct Prefill {
  std::vector<int> prompt;
  std::vector<std::uint16_t> rows;      ///< [layers][prompt-1][576]
  std::vector<std::vector<float>> keys; ///< [groups][(prompt-1) * indexDim]
  std::vector<std::uint16_t> draftRows; ///< the drafter's rows [n][layers][576]
  std::int64_t draftStart = 0;          ///< position of draftRows' first token
};

/// Prompts from `seed` and their prefills (host, the indexer's top-k
/// through a runtime of their own; done once per model and options, shared
/// by every session).
std::vector<Prefill> makePrefills(const Model &model, const DecodeOptions &options);

/// What a session decoded.
struct DecodeResult {
  std::vector<std::vector<int>> streams;     ///< generated tokens per request
  double seconds = 0.0;                      ///< wall time of the decode loop
  std::string backend;                       ///< the runtime's backend in words
  dhs_stats stats{};                         ///< the runtime's statistics
  std::uint64_t steps = 0;                   ///< decode or verify steps run
  std::uint64_t drafted = 0, accepted = 0;   ///< draft tokens verified, accepted
  std::uint64_t hostRowsRead = 0;            ///< verify: host rows read (shared)
  std::uint64_t hostRowsSelectedMissing = 0; ///< verify: sum of per-position misses
  double meanAcceptedLength = 1.0;           ///< tokens per verify block (1 without)
  int rejected = 0;                          ///< bad verify steps refused (rejectOne)
};

/// Decodes with `options` from the prefills. Throws DecodeError.
DecodeResult decode(const Model &model, const std::vector<Prefill> &prefills,
                    const DecodeOptions &options);

/// The runtime session of a decode: config, steps, admissions (and the
/// draft rings' step when speculating). Speculative.cpp and Decoder.cpp use
/// it.
struct Session {
  Session(const Model &model, const std::vector<Prefill> &prefills, const DecodeOptions &options,
          int Q);
  ~Session();
  Session(const Session &) = delete;
  Session &operator=(const Session &) = delete;

  dhs_runtime *rt = nullptr;
  dhs_step_shape shape{};
  std::unique_ptr<TopK> topk; ///< the indexer's top-k, in `rt`
  std::vector<std::uint64_t> ids;
  std::vector<std::vector<int>> tokens;              ///< prompt + generated
  std::vector<std::vector<std::vector<float>>> keys; ///< per request [groups][pos * D]
  std::vector<std::int64_t> history;                 ///< committed KV rows
};

/// A sampled token from logits with a seeded draw (softmax at temperature 1).
int sampleToken(const float *logits, int vocab, std::uint64_t seed, std::uint64_t request,
                std::int64_t position);
/// probs[vocab] = softmax(logits).
void softmax(const float *logits, int vocab, float *probs);

/// The speculative loop (Speculative.cpp).
DecodeResult decodeSpeculative(const Model &model, const std::vector<Prefill> &prefills,
                               const DecodeOptions &options);

} // namespace dhs::decode

#endif // DHS_EXAMPLES_DECODE_DECODER_H
