//===- Model.cpp - dhs-decode's tiny sparse-attention transformer ---------===//

#include "examples/decode/Model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace dhs::decode {

namespace {

/// splitmix64: the weights' random numbers.
struct SplitMix {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [-1, 1).
  float uniform() { return static_cast<float>(next() >> 40) * (2.0f / 16777216.0f) - 1.0f; }
};

/// A rows x cols matrix with entries uniform in +-gain*sqrt(3/cols): unit
/// variance outputs for unit variance inputs, times gain.
std::vector<float> matrix(SplitMix &rng, int rows, int cols, float gain = 1.0f) {
  std::vector<float> m(static_cast<std::size_t>(rows) * cols);
  const float a = gain * std::sqrt(3.0f / static_cast<float>(cols));
  for (float &v : m)
    v = a * rng.uniform();
  return m;
}

/// a . b in a fixed order: 8 interleaved partial sums (which vectorize),
/// added pairwise at the end, then the remainder.
float dot(const float *a, const float *b, int n) {
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j)
      part[j] += a[i + j] * b[i + j];
  float sum =
      ((part[0] + part[4]) + (part[2] + part[6])) + ((part[1] + part[5]) + (part[3] + part[7]));
  for (; i < n; ++i)
    sum += a[i] * b[i];
  return sum;
}

/// y[rows] = m[rows][cols] x[cols].
void matvec(const std::vector<float> &m, const float *x, int rows, int cols, float *y,
            std::size_t offset = 0) {
  const float *row = m.data() + offset;
  for (int r = 0; r < rows; ++r, row += cols)
    y[r] = dot(row, x, cols);
}

/// The e4m3 value of a code (0x7f and 0xff are NaN; never produced here).
float e4m3Value(std::uint8_t code) {
  const int exponent = (code >> 3) & 15, mantissa = code & 7;
  const float magnitude = exponent == 0
                              ? std::ldexp(static_cast<float>(mantissa), -9)
                              : std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
  return (code & 0x80) ? -magnitude : magnitude;
}

/// The e4m3 code nearest `value` (|value| <= 448; ties to the even code).
std::uint8_t e4m3Code(float value) {
  const float magnitude = std::fabs(value);
  // Codes 0 .. 126 are the finite magnitudes in increasing order.
  int low = 0, high = 126;
  while (low < high) {
    const int mid = (low + high + 1) / 2;
    if (e4m3Value(static_cast<std::uint8_t>(mid)) <= magnitude)
      low = mid;
    else
      high = mid - 1;
  }
  int code = low;
  if (code < 126) {
    const float below = magnitude - e4m3Value(static_cast<std::uint8_t>(code));
    const float above = e4m3Value(static_cast<std::uint8_t>(code + 1)) - magnitude;
    if (above < below || (above == below && code % 2 == 1))
      ++code;
  }
  return static_cast<std::uint8_t>(code | (std::signbit(value) ? 0x80 : 0));
}

/// The power-of-two scale of a block whose largest magnitude is `amax`:
/// the smallest with amax / scale <= 448 (1 for an all-zero block).
float fp8Scale(float amax) {
  return amax > 0.0f ? std::ldexp(1.0f, static_cast<int>(std::ceil(std::log2(amax / 448.0f))))
                     : 1.0f;
}

/// Rounds the latent dims to e4m3 times their block's scale (mla_fp8).
void roundLatentToFp8(float *latent) {
  for (int first = 0; first < ModelConfig::kLatent; first += ModelConfig::kFp8Block) {
    float amax = 0.0f;
    for (int d = first; d < first + ModelConfig::kFp8Block; ++d)
      amax = std::max(amax, std::fabs(latent[d]));
    const float scale = fp8Scale(amax);
    for (int d = first; d < first + ModelConfig::kFp8Block; ++d)
      latent[d] = e4m3Value(e4m3Code(latent[d] / scale)) * scale;
  }
}

/// Rotates the 64 RoPE dims by `position` (pairs i, i+32).
void rope(float *x, std::int64_t position) {
  constexpr int half = ModelConfig::kRope / 2;
  for (int i = 0; i < half; ++i) {
    const double theta =
        static_cast<double>(position) * std::pow(10000.0, -static_cast<double>(i) / half);
    const float c = static_cast<float>(std::cos(theta)), s = static_cast<float>(std::sin(theta));
    const float a = x[i], b = x[i + half];
    x[i] = a * c - b * s;
    x[i + half] = a * s + b * c;
  }
}

void rmsNorm(const float *x, int n, float *y) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i)
    sum += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(sum / static_cast<float>(n) + 1e-6f);
  for (int i = 0; i < n; ++i)
    y[i] = x[i] * inv;
}

// Gains that keep activations O(1) and the stream varied but predictable
// enough to draft: scores with a std of about 1 after the softmax scale, an
// attention branch at half the embedding's scale (one selected row more or
// less still changes the stream within a few tokens), logits peaked enough to
// sample from. With them the drafter's greedy drafts are accepted about a
// third of the time (a mean accepted length of about 2.5 at gamma 4).
constexpr float kQueryGain = 1.0f;
constexpr float kAttentionGain = 0.5f;
constexpr float kLogitGain = 3.0f;

} // namespace

std::uint16_t toBf16(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

float fromBf16(std::uint16_t value) {
  const std::uint32_t bits = static_cast<std::uint32_t>(value) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

Model::Model(const ModelConfig &config) : config_(config) {
  SplitMix rng{config.seed};
  const int d = config.hidden, L = ModelConfig::kLatent, R = ModelConfig::kRope;
  const int H = config.heads, r = config.queryRank;
  embedding_.resize(static_cast<std::size_t>(config.vocab) * d);
  for (float &v : embedding_) // unit variance
    v = std::sqrt(3.0f) * rng.uniform();
  output_ = matrix(rng, config.vocab, d, kLogitGain);
  for (int l = 0; l < config.layers; ++l) {
    Layer layer;
    layer.wqa = matrix(rng, r, d);
    layer.wqb = matrix(rng, H * config.headDim, r);
    layer.wuk = matrix(rng, H * L, config.headDim, kQueryGain);
    layer.wqRope = matrix(rng, H * R, r, kQueryGain);
    layer.wkv = matrix(rng, L, d);
    layer.wkr = matrix(rng, R, d);
    layer.wuv = matrix(rng, H * config.headDim, L);
    layer.wo = matrix(rng, d, H * config.headDim, kAttentionGain);
    layer.w1 = matrix(rng, config.mlp, d);
    layer.w3 = matrix(rng, config.mlp, d);
    layer.w2 = matrix(rng, d, config.mlp);
    layers_.push_back(std::move(layer));
  }
  for (int g = 0; g < config.groups(); ++g) {
    Group group;
    group.wik = matrix(rng, config.indexDim, d);
    group.wiq = matrix(rng, config.indexHeads * config.indexDim, d);
    group.wiw = matrix(rng, config.indexHeads, d);
    groups_.push_back(std::move(group));
  }
}

void Model::embed(int token, float *h) const {
  std::memcpy(h, embedding_.data() + static_cast<std::size_t>(token) * config_.hidden,
              sizeof(float) * config_.hidden);
}

void Model::norm(const float *h, float *x) const { rmsNorm(h, config_.hidden, x); }

void Model::kvRow(int layer, const float *x, std::int64_t position, std::uint16_t *row) const {
  const Layer &w = layers_[layer];
  float latent[ModelConfig::kLatent], r[ModelConfig::kRope];
  matvec(w.wkv, x, ModelConfig::kLatent, config_.hidden, latent);
  rmsNorm(latent, ModelConfig::kLatent, latent);
  matvec(w.wkr, x, ModelConfig::kRope, config_.hidden, r);
  rope(r, position);
  if (config_.fp8)
    roundLatentToFp8(latent);
  for (int i = 0; i < ModelConfig::kLatent; ++i)
    row[i] = toBf16(latent[i]);
  for (int i = 0; i < ModelConfig::kRope; ++i)
    row[ModelConfig::kLatent + i] = toBf16(r[i]);
}

void Model::query(int layer, const float *x, std::int64_t position, std::uint16_t *queries) const {
  // Absorbed MLA: the per-head query q_h (headDim) up-projected into the
  // latent space by W_uk[h] (512 x headDim); the RoPE part from the shared
  // low-rank query.
  const Layer &w = layers_[layer];
  const int r = config_.queryRank, L = ModelConfig::kLatent, R = ModelConfig::kRope;
  const int hd = config_.headDim;
  std::vector<float> cq(r), qh(static_cast<std::size_t>(config_.heads) * hd), latent(L), rp(R);
  matvec(w.wqa, x, r, config_.hidden, cq.data());
  matvec(w.wqb, cq.data(), config_.heads * hd, r, qh.data());
  for (int h = 0; h < config_.heads; ++h) {
    matvec(w.wuk, &qh[static_cast<std::size_t>(h) * hd], L, hd, latent.data(),
           static_cast<std::size_t>(h) * L * hd);
    matvec(w.wqRope, cq.data(), R, r, rp.data(), static_cast<std::size_t>(h) * R * r);
    rope(rp.data(), position);
    std::uint16_t *q = queries + static_cast<std::size_t>(h) * ModelConfig::kQkDim;
    for (int i = 0; i < L; ++i)
      q[i] = toBf16(latent[i]);
    for (int i = 0; i < R; ++i)
      q[L + i] = toBf16(rp[i]);
  }
}

void Model::addAttention(int layer, const std::uint16_t *output, float *h) const {
  const Layer &w = layers_[layer];
  const int L = ModelConfig::kLatent, hd = config_.headDim;
  std::vector<float> o(L), v(static_cast<std::size_t>(config_.heads) * hd), y(config_.hidden);
  for (int head = 0; head < config_.heads; ++head) {
    for (int i = 0; i < L; ++i)
      o[i] = fromBf16(output[static_cast<std::size_t>(head) * L + i]);
    matvec(w.wuv, o.data(), hd, L, v.data() + static_cast<std::size_t>(head) * hd,
           static_cast<std::size_t>(head) * hd * L);
  }
  matvec(w.wo, v.data(), config_.hidden, config_.heads * hd, y.data());
  for (int i = 0; i < config_.hidden; ++i)
    h[i] += y[i];
}

void Model::addMlp(int layer, float *h) const {
  const Layer &w = layers_[layer];
  std::vector<float> x(config_.hidden), a(config_.mlp), b(config_.mlp), y(config_.hidden);
  norm(h, x.data());
  matvec(w.w1, x.data(), config_.mlp, config_.hidden, a.data());
  matvec(w.w3, x.data(), config_.mlp, config_.hidden, b.data());
  for (int i = 0; i < config_.mlp; ++i)
    a[i] = a[i] / (1.0f + std::exp(-a[i])) * b[i];
  matvec(w.w2, a.data(), config_.hidden, config_.mlp, y.data());
  for (int i = 0; i < config_.hidden; ++i)
    h[i] += y[i];
}

void Model::indexKey(int group, const float *x, float *key) const {
  matvec(groups_[group].wik, x, config_.indexDim, config_.hidden, key);
}

void Model::indexQuery(int group, const float *x, float *query, float *weights) const {
  matvec(groups_[group].wiq, x, config_.indexHeads * config_.indexDim, config_.hidden, query);
  matvec(groups_[group].wiw, x, config_.indexHeads, config_.hidden, weights);
}

float Model::indexScore(const float *query, const float *weights, const float *key) const {
  float score = 0.0f;
  for (int h = 0; h < config_.indexHeads; ++h) {
    const float d = dot(query + h * config_.indexDim, key, config_.indexDim);
    score += weights[h] * std::max(d, 0.0f);
  }
  return score;
}

void Model::logits(const float *h, float *out) const {
  std::vector<float> x(config_.hidden);
  norm(h, x.data());
  matvec(output_, x.data(), config_.vocab, config_.hidden, out);
}

void hostAttention(const std::uint16_t *queries, int heads, const std::uint16_t *const *rows,
                   int count, std::uint16_t *output) {
  constexpr int Q = ModelConfig::kQkDim, V = ModelConfig::kLatent;
  std::vector<float> keys(static_cast<std::size_t>(count) * Q), q(Q), scores(count), acc(V);
  for (int k = 0; k < count; ++k)
    for (int i = 0; i < Q; ++i)
      keys[static_cast<std::size_t>(k) * Q + i] = fromBf16(rows[k][i]);
  for (int h = 0; h < heads; ++h) {
    std::uint16_t *out = output + static_cast<std::size_t>(h) * V;
    if (count == 0) {
      std::fill(out, out + V, std::uint16_t{0});
      continue;
    }
    for (int i = 0; i < Q; ++i)
      q[i] = fromBf16(queries[static_cast<std::size_t>(h) * Q + i]);
    float best = -INFINITY;
    for (int k = 0; k < count; ++k) {
      scores[k] =
          dot(q.data(), &keys[static_cast<std::size_t>(k) * Q], Q) * ModelConfig::kSoftmaxScale;
      best = std::max(best, scores[k]);
    }
    float sum = 0.0f;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int k = 0; k < count; ++k) {
      const float p = std::exp(scores[k] - best);
      const float *row = &keys[static_cast<std::size_t>(k) * Q];
      sum += p;
      for (int i = 0; i < V; ++i)
        acc[i] += p * row[i];
    }
    for (int i = 0; i < V; ++i)
      out[i] = toBf16(acc[i] / sum);
  }
}

std::vector<std::uint8_t> packRows(const ModelConfig &c, const std::uint16_t *rows,
                                   std::size_t count) {
  constexpr int L = ModelConfig::kLatent, R = ModelConfig::kRope, QK = ModelConfig::kQkDim;
  const std::size_t bytes = static_cast<std::size_t>(c.rowBytes());
  std::vector<std::uint8_t> packed(count * bytes);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint16_t *row = rows + i * QK;
    std::uint8_t *out = packed.data() + i * bytes;
    if (!c.fp8) {
      std::memcpy(out, row, bytes);
      continue;
    }
    for (int block = 0; block < L / ModelConfig::kFp8Block; ++block) {
      const int first = block * ModelConfig::kFp8Block;
      float amax = 0.0f;
      for (int d = first; d < first + ModelConfig::kFp8Block; ++d)
        amax = std::max(amax, std::fabs(fromBf16(row[d])));
      const float scale = fp8Scale(amax);
      std::memcpy(out + L + 4 * block, &scale, sizeof scale);
      for (int d = first; d < first + ModelConfig::kFp8Block; ++d) {
        const float value = fromBf16(row[d]);
        out[d] = e4m3Code(value / scale);
        if (e4m3Value(out[d]) * scale != value)
          throw std::logic_error("packRows: latent value " + std::to_string(value) +
                                 " is not an e4m3 value times its block's scale");
      }
    }
    std::memcpy(out + L + 4 * (L / ModelConfig::kFp8Block), row + L, 2 * R);
  }
  return packed;
}

void unpackRows(const ModelConfig &c, const std::uint8_t *packed, std::size_t count,
                std::uint16_t *rows) {
  constexpr int L = ModelConfig::kLatent, R = ModelConfig::kRope, QK = ModelConfig::kQkDim;
  const std::size_t bytes = static_cast<std::size_t>(c.rowBytes());
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint8_t *in = packed + i * bytes;
    std::uint16_t *row = rows + i * QK;
    if (!c.fp8) {
      std::memcpy(row, in, bytes);
      continue;
    }
    for (int d = 0; d < L; ++d) {
      float scale;
      std::memcpy(&scale, in + L + 4 * (d / ModelConfig::kFp8Block), sizeof scale);
      row[d] = toBf16(e4m3Value(in[d]) * scale);
    }
    std::memcpy(row + L, in + L + 4 * (L / ModelConfig::kFp8Block), 2 * R);
  }
}

int argmax(const float *values, int count) {
  int best = 0;
  for (int i = 1; i < count; ++i)
    if (values[i] > values[best])
      best = i;
  return best;
}

} // namespace dhs::decode
