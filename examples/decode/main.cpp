//===- main.cpp - dhs-decode: a reference engine that decodes real tokens -===//
//
// dhs-decode [--backend cpu|cuda|auto] [--tokens N] [--gamma G]
//            [--residency all|part|none] [--no-spec] [--sampling] [--seed S]
//            [--requests R] [--prompt P] [--kv bf16|fp8] [--steps DIR]
//            [--check-invariants] [--check]
//
// Decodes tokens with dhs-decode's model (Model.h) through the dhs C API and
// prints tokens/s, the mean accepted length, host fetches as a share of the
// selected rows, and whether the stream matches decoding without
// speculation. --check decodes greedily without speculation and with it at
// residency all, part and none, and exits non-zero unless every stream is
// identical.
//
//===----------------------------------------------------------------------===//

#include "examples/decode/Decoder.h"
#include "examples/decode/Drafter.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

using namespace dhs::decode;

namespace {

const char *kUsage =
    "usage: dhs-decode [--backend cpu|cuda|auto] [--tokens N] [--gamma G]\n"
    "                  [--residency all|part|none] [--no-spec] [--sampling] [--seed S]\n"
    "                  [--requests R] [--prompt P] [--kv bf16|fp8] [--steps DIR]\n"
    "                  [--check-invariants] [--check]\n"
    "\n"
    "Decodes N tokens (default 32) for R requests (default 2, at most 4) after\n"
    "P-token prompts (default 256) with a tiny seeded sparse-attention model\n"
    "whose attention runs through the dhs runtime; speculative by default\n"
    "(a self-speculative drafter proposes G tokens, default 4, at most 8).\n"
    "--residency: all (HBM holds every row), part (about a quarter of the\n"
    "history), none (rows come from the host). --check: greedy streams without\n"
    "and with speculation at all three residencies must be identical.\n"
    "--kv: KV rows in mla_bf16 (1152 B, default) or mla_fp8 (656 B: e4m3 latent\n"
    "with a scale per 128 dims, bf16 RoPE).\n"
    "--steps: the compiled steps (default: dhs-decode-steps beside the binary).\n";

/// The directory of the running binary.
std::string binaryDirectory() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0)
    return ".";
  path[n] = '\0';
  std::string s(path);
  const std::size_t slash = s.rfind('/');
  return slash == std::string::npos ? "." : s.substr(0, slash);
}

int parseInt(const char *text, const char *name, int min, int max) {
  char *end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (!*text || *end || v < min || v > max)
    throw DecodeError(std::string(name) + " must be an integer in " + std::to_string(min) + ".." +
                      std::to_string(max) + ", not '" + text + "'");
  return static_cast<int>(v);
}

/// One session's line of numbers.
void report(const char *what, const DecodeOptions &o, const DecodeResult &r) {
  const std::uint64_t tokens = static_cast<std::uint64_t>(o.requests) * o.tokens;
  const double fetched = r.stats.total_selected
                             ? 100.0 * static_cast<double>(r.stats.total_fetched) /
                                   static_cast<double>(r.stats.total_selected)
                             : 0.0;
  std::printf("%-8s %-5s %9llu %8.1f %7llu %8.2f %10lld %10lld %7.2f%%\n", what,
              residencyName(o.residency), static_cast<unsigned long long>(tokens),
              r.seconds > 0 ? static_cast<double>(tokens) / r.seconds : 0.0,
              static_cast<unsigned long long>(r.steps), r.meanAcceptedLength,
              static_cast<long long>(r.stats.total_selected),
              static_cast<long long>(r.stats.total_fetched), fetched);
}

void header() {
  std::printf("%-8s %-5s %9s %8s %7s %8s %10s %10s %8s\n", "decode", "resid", "tokens", "tok/s",
              "steps", "accept", "selected", "from host", "host%");
}

/// The first position where two sets of streams differ, or -1.
long firstDifference(const DecodeResult &a, const DecodeResult &b, int tokens) {
  for (std::size_t r = 0; r < a.streams.size(); ++r)
    for (int i = 0; i < tokens; ++i)
      if (a.streams[r].at(i) != b.streams[r].at(i))
        return static_cast<long>(r) * tokens + i;
  return -1;
}

/// Distinct tokens of a result (a degenerate model repeats one token).
int distinctTokens(const DecodeResult &r, int vocab) {
  std::string seen(static_cast<std::size_t>(vocab), '\0');
  int distinct = 0;
  for (const auto &stream : r.streams)
    for (int t : stream)
      distinct += !seen[t]++;
  return distinct;
}

void describe(const Model &model, const DecodeOptions &o, const DecodeResult &r) {
  const ModelConfig &c = model.config();
  std::printf("dhs-decode: backend %s\n", r.backend.c_str());
  std::printf("model: %d layers in groups of %d, %d heads, %s rows (%d B), top-%d of a "
              "lightning indexer (dhs_topk), vocabulary %d, hidden %d; %d requests, prompts of %d "
              "tokens\n",
              c.layers, c.layersPerGroup, c.heads, c.rowFormat(), c.rowBytes(), c.topk, c.vocab,
              c.hidden, o.requests, o.prompt);
}

int runCheck(const Model &model, DecodeOptions o) {
  o.sampling = false;
  o.checkInvariants = true;
  const std::vector<Prefill> prefills = makePrefills(model, o);
  header();
  o.speculate = false;
  o.residency = Residency::All;
  const DecodeResult reference = decode(model, prefills, o);
  report("plain", o, reference);
  int failures = 0, streams = 1;
  auto compare = [&](const char *what, const DecodeResult &r) {
    ++streams;
    const long at = firstDifference(reference, r, o.tokens);
    if (at >= 0) {
      std::printf("check: %s at residency %s differs from plain decoding at request %ld, token "
                  "%ld\n",
                  what, residencyName(o.residency), at / o.tokens, at % o.tokens);
      ++failures;
    }
  };
  for (Residency residency : {Residency::Part, Residency::None}) {
    o.residency = residency;
    const DecodeResult r = decode(model, prefills, o);
    report("plain", o, r);
    compare("plain decoding", r);
  }
  o.speculate = true;
  int rejected = 0;
  for (Residency residency : {Residency::All, Residency::Part, Residency::None}) {
    o.residency = residency;
    o.rejectOne = residency == Residency::Part; // the stream must not notice
    const DecodeResult r = decode(model, prefills, o);
    report("spec", o, r);
    compare("speculative decoding", r);
    rejected += r.rejected;
  }
  const int distinct = distinctTokens(reference, model.config().vocab);
  if (distinct < 4) {
    std::printf("check: the model is degenerate: %d distinct tokens\n", distinct);
    ++failures;
  }
  if (failures) {
    std::printf("check: FAILED (%d of %d streams differ)\n", failures, streams - 1);
    return 1;
  }
  std::printf("check: a verify step selecting a row past its block was refused %d time(s) "
              "and changed nothing\n",
              rejected);
  std::printf("check: all %d greedy streams identical (%d requests x %d tokens = %d tokens each, "
              "%d distinct tokens, %s rows): plain and speculative (gamma %d), residency all, "
              "part, none\n",
              streams, o.requests, o.tokens, o.requests * o.tokens, distinct,
              model.config().rowFormat(), o.gamma);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  try {
    DecodeOptions o;
    o.steps = binaryDirectory() + "/dhs-decode-steps";
    bool check = false, fp8 = false;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> const char * {
        if (i + 1 >= argc)
          throw DecodeError(a + " needs a value");
        return argv[++i];
      };
      if (a == "--backend") {
        const std::string b = value();
        if (b != "cpu" && b != "cuda" && b != "auto")
          throw DecodeError("--backend must be cpu, cuda or auto, not '" + b + "'");
        o.backend = b == "cpu"    ? DHS_BACKEND_CPU
                    : b == "cuda" ? DHS_BACKEND_CUDA
                                  : DHS_BACKEND_AUTO;
      } else if (a == "--tokens") {
        o.tokens = parseInt(value(), "--tokens", 1, 100000);
      } else if (a == "--gamma") {
        o.gamma = parseInt(value(), "--gamma", 1, kMaxGamma);
      } else if (a == "--residency") {
        o.residency = parseResidency(value());
      } else if (a == "--no-spec") {
        o.speculate = false;
      } else if (a == "--sampling") {
        o.sampling = true;
      } else if (a == "--seed") {
        o.seed = std::strtoull(value(), nullptr, 10);
      } else if (a == "--requests") {
        o.requests = parseInt(value(), "--requests", 1, 4);
      } else if (a == "--prompt") {
        o.prompt = parseInt(value(), "--prompt", 2, 100000);
      } else if (a == "--kv") {
        const std::string kv = value();
        if (kv != "bf16" && kv != "fp8")
          throw DecodeError("--kv must be bf16 or fp8, not '" + kv + "'");
        fp8 = kv == "fp8";
      } else if (a == "--steps") {
        o.steps = value();
      } else if (a == "--check-invariants") {
        o.checkInvariants = true;
      } else if (a == "--check") {
        check = true;
      } else if (a == "--help" || a == "-h") {
        std::fputs(kUsage, stdout);
        return 0;
      } else {
        std::fprintf(stderr, "dhs-decode: unknown argument '%s'\n%s", a.c_str(), kUsage);
        return 2;
      }
    }
    ModelConfig config;
    config.seed = o.seed;
    config.fp8 = fp8;
    const Model model(config);
    if (check)
      return runCheck(model, o);
    const std::vector<Prefill> prefills = makePrefills(model, o);
    const DecodeResult r = decode(model, prefills, o);
    describe(model, o, r);
    header();
    report(o.speculate ? "spec" : "plain", o, r);
    if (o.speculate) {
      std::printf("speculation: gamma %d, %llu drafts verified, %llu accepted (%.1f%%), mean "
                  "accepted length %.2f; verify host rows read %llu (shared) vs %llu selected "
                  "missing\n",
                  o.gamma, static_cast<unsigned long long>(r.drafted),
                  static_cast<unsigned long long>(r.accepted),
                  r.drafted
                      ? 100.0 * static_cast<double>(r.accepted) / static_cast<double>(r.drafted)
                      : 0.0,
                  r.meanAcceptedLength, static_cast<unsigned long long>(r.hostRowsRead),
                  static_cast<unsigned long long>(r.hostRowsSelectedMissing));
      if (!o.sampling) {
        DecodeOptions plain = o;
        plain.speculate = false;
        const DecodeResult p = decode(model, prefills, plain);
        const long at = firstDifference(p, r, o.tokens);
        if (at >= 0)
          std::printf("stream vs decoding without speculation: DIFFERS at request %ld, token "
                      "%ld\n",
                      at / o.tokens, at % o.tokens);
        else
          std::printf("stream vs decoding without speculation: identical (%d tokens)\n",
                      o.requests * o.tokens);
        if (at >= 0)
          return 1;
      } else {
        std::printf("stream vs decoding without speculation: sampled (rejection sampling keeps "
                    "the target's distribution, not its draws)\n");
      }
    }
    for (std::size_t b = 0; b < r.streams.size(); ++b) {
      std::printf("request %zu:", b);
      for (std::size_t i = 0; i < r.streams[b].size() && i < 16; ++i)
        std::printf(" %d", r.streams[b][i]);
      std::printf("%s\n", r.streams[b].size() > 16 ? " ..." : "");
    }
    std::printf("%d distinct tokens in %d\n", distinctTokens(r, config.vocab),
                o.requests * o.tokens);
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "dhs-decode: error: %s\n", e.what());
    return 1;
  }
}
