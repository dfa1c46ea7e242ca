//===- SelectionTrace.cpp - Synthetic and recorded selection traces -------===//

#include "tools/dhs-sim/SelectionTrace.h"

#include "runtime/core/Error.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace dhs::tools::sim {

using runtime::Error;

void DrrParams::validate() const {
  auto fail = [](const std::string &what) { throw Error("DRR parameters: " + what); };
  if (topk <= 0)
    fail("topk must be positive");
  if (sinks < 0 || window < 0 || sinks + window > topk)
    fail("sinks " + std::to_string(sinks) + " + window " + std::to_string(window) +
         " must lie in [0, topk " + std::to_string(topk) + "]");
  auto probability = [&](const char *name, double value) {
    if (!(value >= 0.0 && value <= 1.0))
      fail(std::string(name) + " must lie in [0, 1]");
  };
  probability("f", f);
  probability("q", q);
  probability("r", r);
  if (!(gamma > 0.0 && std::isfinite(gamma)))
    fail("gamma must be positive");
  if (!(lambda > 0.0 && std::isfinite(lambda)))
    fail("lambda must be positive");
}

namespace {

/// Uniform double in [0, 1).
double uniform(std::mt19937_64 &rng) {
  return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
}

/// Uniform integer in [0, n), n > 0 (the tiny modulo bias is irrelevant here).
std::int64_t below(std::mt19937_64 &rng, std::int64_t n) {
  return static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(n));
}

} // namespace

DrrGenerator::DrrGenerator(const DrrParams &params, std::uint64_t seed)
    : params_((params.validate(), params)), rng_(seed) {
  ageCdf_.push_back(0.0);
}

void DrrGenerator::grow(std::int64_t contextLen) {
  if (contextLen > std::numeric_limits<std::int32_t>::max())
    throw Error("DRR: a context of " + std::to_string(contextLen) + " rows is too long");
  if (contextLen < contextLen_)
    throw Error("DRR: the context shrank from " + std::to_string(contextLen_) + " to " +
                std::to_string(contextLen) + " rows");
  inSet_.resize(static_cast<std::size_t>(contextLen), 0);
  lastUse_.resize(static_cast<std::size_t>(contextLen), -1);
  contextLen_ = contextLen;
}

void DrrGenerator::add(std::int32_t token) {
  inSet_[static_cast<std::size_t>(token)] = mark_;
  current_.push_back(token);
}

std::int64_t DrrGenerator::sampleAge(std::int64_t maxAge) {
  while (static_cast<std::int64_t>(ageCdf_.size()) <= maxAge) {
    const double a = static_cast<double>(ageCdf_.size());
    ageCdf_.push_back(ageCdf_.back() + std::pow(a, -params_.gamma));
  }
  const double u = uniform(rng_) * ageCdf_[static_cast<std::size_t>(maxAge)];
  // The first A in [1, maxAge] with cdf[A] > u.
  auto it = std::upper_bound(ageCdf_.begin() + 1, ageCdf_.begin() + maxAge + 1, u);
  return std::min<std::int64_t>(maxAge, std::max<std::int64_t>(1, it - ageCdf_.begin()));
}

bool DrrGenerator::tryGhost(std::int64_t contextLen) {
  const std::int64_t t = step_;
  if (t < 2)
    return false;
  for (int attempt = 0; attempt < 8; ++attempt) {
    // Ghosts were selected before but in neither this step nor the last
    // one: age A >= 1 means last selected at step t - 1 - A.
    const std::int64_t s = t - 1 - sampleAge(t - 1);
    std::vector<std::int32_t> &bucket = byStep_[static_cast<std::size_t>(s)];
    while (!bucket.empty()) {
      const std::size_t i =
          static_cast<std::size_t>(below(rng_, static_cast<std::int64_t>(bucket.size())));
      const std::int32_t token = bucket[i];
      bucket[i] = bucket.back();
      bucket.pop_back();
      // Stale entries (re-selected since, or selected now) are dropped.
      if (lastUse_[static_cast<std::size_t>(token)] == s &&
          inSet_[static_cast<std::size_t>(token)] != mark_ && token < contextLen) {
        add(token);
        return true;
      }
    }
  }
  return false;
}

void DrrGenerator::addFresh(std::int64_t contextLen) {
  const std::int64_t lo = std::min<std::int64_t>(params_.sinks, contextLen);
  const std::int64_t hi = std::max<std::int64_t>(lo, contextLen - params_.window);
  if (hi > lo) {
    for (int attempt = 0; attempt < 64; ++attempt) {
      std::int64_t pos;
      if (uniform(rng_) < params_.r) {
        const double distance = std::floor(-params_.lambda * std::log(1.0 - uniform(rng_)));
        pos = hi - 1 - static_cast<std::int64_t>(std::min(distance, 1e15));
        if (pos < lo)
          continue;
      } else {
        pos = lo + below(rng_, hi - lo);
      }
      if (inSet_[static_cast<std::size_t>(pos)] != mark_) {
        add(static_cast<std::int32_t>(pos));
        return;
      }
    }
  }
  // Nearly everything is selected: take the first free row after a random
  // start (one exists, since the set is smaller than the context).
  const std::int64_t start = below(rng_, contextLen);
  for (std::int64_t i = 0; i < contextLen; ++i) {
    const std::int64_t pos = (start + i) % contextLen;
    if (inSet_[static_cast<std::size_t>(pos)] != mark_) {
      add(static_cast<std::int32_t>(pos));
      return;
    }
  }
}

const std::vector<std::int32_t> &DrrGenerator::next(std::int64_t contextLen) {
  grow(contextLen);
  if (++mark_ == 0) {
    std::fill(inSet_.begin(), inSet_.end(), 0);
    mark_ = 1;
  }
  const std::int64_t t = step_;
  byStep_.emplace_back();
  previous_.swap(current_);
  current_.clear();
  const std::int64_t K = std::min<std::int64_t>(params_.topk, contextLen);

  // Anchors: the sinks and the newest window.
  for (std::int64_t i = 0; i < std::min<std::int64_t>(params_.sinks, contextLen); ++i)
    add(static_cast<std::int32_t>(i));
  for (std::int64_t i = std::max<std::int64_t>(params_.sinks, contextLen - params_.window);
       i < contextLen; ++i)
    add(static_cast<std::int32_t>(i));

  // Retention of the previous members; the dropped become ghosts of age 1.
  std::int64_t kept = 0;
  for (std::int32_t token : previous_) {
    if (inSet_[static_cast<std::size_t>(token)] == mark_) {
      ++kept; // an anchor again
      continue;
    }
    if (static_cast<std::int64_t>(current_.size()) < K && uniform(rng_) >= params_.f) {
      add(token);
      ++kept;
      continue;
    }
    lastUse_[static_cast<std::size_t>(token)] = static_cast<std::int32_t>(t - 1);
    byStep_[static_cast<std::size_t>(t - 1)].push_back(token);
  }

  // Refill.
  double fresh = 1.0 - params_.q;
  if (params_.contextScaling)
    fresh = std::min(1.0, fresh * std::sqrt(static_cast<double>(contextLen) / 32768.0));
  while (static_cast<std::int64_t>(current_.size()) < K) {
    if (uniform(rng_) >= fresh && tryGhost(contextLen))
      continue;
    addFresh(contextLen);
  }
  // Overlap |S_t & S_{t-1}| / |S_t|: the anchors and retained members (ghosts
  // never come from S_{t-1}; a fresh draw rarely does).
  std::int64_t both = 0;
  for (std::int32_t token : previous_)
    both += inSet_[static_cast<std::size_t>(token)] == mark_;
  (void)kept;
  overlap_ =
      current_.empty() ? 0.0 : static_cast<double>(both) / static_cast<double>(current_.size());
  ++step_;
  return current_;
}

//===----------------------------------------------------------------------===//
// Trace files
//===----------------------------------------------------------------------===//

TraceReader::TraceReader(std::istream &in, std::string name) : in_(in), name_(std::move(name)) {
  std::string header;
  ++line_;
  if (!std::getline(in_, header) || header.rfind("dhs-trace 1", 0) != 0)
    throw Error(name_ + ":1: not a dhs trace (the first line must be 'dhs-trace 1')");
}

bool TraceReader::next(TraceEvent &event) {
  std::string text;
  while (std::getline(in_, text)) {
    ++line_;
    std::istringstream words(text);
    std::string verb;
    if (!(words >> verb) || verb[0] == '#')
      continue;
    auto fail = [&](const std::string &what) {
      throw Error(name_ + ":" + std::to_string(line_) + ": " + what + " in '" + text + "'");
    };
    auto integer = [&](const char *what) {
      std::string word;
      if (!(words >> word))
        fail(std::string("missing ") + what);
      try {
        std::size_t used = 0;
        long long value = std::stoll(word, &used);
        if (used != word.size())
          fail(std::string("bad ") + what + " '" + word + "'");
        return static_cast<std::int64_t>(value);
      } catch (const std::logic_error &) {
        fail(std::string("bad ") + what + " '" + word + "'");
      }
      return std::int64_t(0);
    };
    auto id = [&]() {
      std::int64_t value = integer("request id");
      if (value < 0)
        fail("a negative request id");
      return static_cast<std::uint64_t>(value);
    };
    auto end = [&]() {
      std::string extra;
      if (words >> extra)
        fail("unexpected '" + extra + "'");
    };
    event = TraceEvent();
    if (verb == "admit") {
      event.kind = TraceEvent::Admit;
      event.id = id();
      event.a = integer("history length");
      event.b = integer("maximum context");
      if (event.a < 0 || event.b < std::max<std::int64_t>(1, event.a))
        fail("history length and maximum context must satisfy 0 <= length <= max, max >= 1");
      end();
    } else if (verb == "select") {
      event.kind = TraceEvent::Select;
      event.id = id();
      event.a = integer("group");
      event.b = integer("query");
      if (event.a < 0 || event.b < 0)
        fail("a negative group or query");
      std::string word;
      while (words >> word) {
        try {
          std::size_t used = 0;
          long long value = std::stoll(word, &used);
          if (used != word.size() || value < -1 || value > std::numeric_limits<std::int32_t>::max())
            fail("bad row id '" + word + "'");
          event.rows.push_back(static_cast<std::int32_t>(value));
        } catch (const std::logic_error &) {
          fail("bad row id '" + word + "'");
        }
      }
    } else if (verb == "step") {
      event.kind = TraceEvent::Step;
      end();
    } else if (verb == "append") {
      event.kind = TraceEvent::Append;
      event.id = id();
      std::string word;
      event.a = 1;
      if (words >> word) {
        try {
          event.a = std::stoll(word);
        } catch (const std::logic_error &) {
          fail("bad count '" + word + "'");
        }
        if (event.a < 1)
          fail("the count must be positive");
      }
      end();
    } else if (verb == "finish") {
      event.kind = TraceEvent::Finish;
      event.id = id();
      end();
    } else {
      fail("unknown event '" + verb + "'");
    }
    return true;
  }
  return false;
}

TraceWriter::TraceWriter(std::ostream &out) : out_(out) { out_ << "dhs-trace 1\n"; }

void TraceWriter::write(const TraceEvent &event) {
  switch (event.kind) {
  case TraceEvent::Admit:
    out_ << "admit " << event.id << ' ' << event.a << ' ' << event.b << '\n';
    break;
  case TraceEvent::Select:
    out_ << "select " << event.id << ' ' << event.a << ' ' << event.b;
    for (std::int32_t row : event.rows)
      out_ << ' ' << row;
    out_ << '\n';
    break;
  case TraceEvent::Step:
    out_ << "step\n";
    break;
  case TraceEvent::Append:
    out_ << "append " << event.id;
    if (event.a != 1)
      out_ << ' ' << event.a;
    out_ << '\n';
    break;
  case TraceEvent::Finish:
    out_ << "finish " << event.id << '\n';
    break;
  }
}

} // namespace dhs::tools::sim
