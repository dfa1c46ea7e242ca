//===- Model.h - dhs-decode's tiny sparse-attention transformer -*- C++ -*-===//
//
// The target model of dhs-decode: a small decoder-only transformer with
// absorbed-MLA attention over KV rows in the #dhs.mla_bf16 format (576 bf16
// values: a 512-dim latent, RMS-normalized, then 64 RoPE dims), a
// DeepSeek-style lightning indexer per layer group (IndexShare: the layers of
// a group share one top-k selection), SwiGLU MLPs and untied output logits.
// Weights come from a seed (splitmix64), scaled so that activations stay
// O(1). Everything here is plain host code computed per position (never
// batched), so a position's numbers do not depend on what else is in a
// block: the speculative and the plain decode loops see the same bits.
//
// A token attends to the KV rows of the tokens before it, not to its own:
// its rows are computed layer by layer during its forward pass and become
// history afterwards.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_EXAMPLES_DECODE_MODEL_H
#define DHS_EXAMPLES_DECODE_MODEL_H

#include <cstdint>
#include <vector>

namespace dhs::decode {

/// Shapes of the model. The attention shapes are fixed by the row format
/// (qk_dim 576 = 512 latent + 64 RoPE, v_dim 512).
struct ModelConfig {
  int vocab = 2048;                   ///< tokens
  int hidden = 256;                   ///< residual stream width
  int layers = 4;                     ///< L
  int layersPerGroup = 2;             ///< G: layers sharing one indexer selection
  int heads = 16;                     ///< query heads (absorbed MLA)
  int queryRank = 64;                 ///< low-rank query projection
  int headDim = 16;                   ///< per-head query and value dims outside the latent space
  int mlp = 512;                      ///< SwiGLU width
  int indexHeads = 4;                 ///< indexer heads
  int indexDim = 32;                  ///< indexer key / query dims
  int topk = 64;                      ///< K: rows each position attends per group
  int localWindow = 32;               ///< of those, the newest (always selected)
  bool fp8 = false;                   ///< KV rows in mla_fp8 (656 B), else mla_bf16 (1152 B)
  std::uint64_t seed = 1;             ///< weights come from this seed
  static constexpr int kLatent = 512; ///< latent dims (the value)
  static constexpr int kRope = 64;    ///< RoPE dims
  static constexpr int kQkDim = kLatent + kRope;        ///< 576
  static constexpr int kRowBytes = kQkDim * 2;          ///< 1152 (bf16)
  static constexpr int kFp8RowBytes = 656;              ///< 512 e4m3 + 4 fp32 scales + 64 bf16
  static constexpr int kFp8Block = 128;                 ///< latent dims per fp32 scale
  static constexpr float kSoftmaxScale = 0.0416666679f; ///< 1/sqrt(576), the step's scale

  /// Layer groups.
  int groups() const { return (layers + layersPerGroup - 1) / layersPerGroup; }
  /// Bytes of a KV row as the runtime stores it.
  int rowBytes() const { return fp8 ? kFp8RowBytes : kRowBytes; }
  /// The runtime's name of the row format.
  const char *rowFormat() const { return fp8 ? "mla_fp8" : "mla_bf16"; }
};

/// bf16 <-> float (round to nearest even; inputs here are finite).
std::uint16_t toBf16(float value);
/// bf16 bits to float (exact).
float fromBf16(std::uint16_t value);

/// The model's weights and its per-position pieces.
class Model {
public:
  /// Weights generated from config.seed.
  explicit Model(const ModelConfig &config);

  const ModelConfig &config() const { return config_; }

  /// h[hidden] = the embedding of `token`.
  void embed(int token, float *h) const;
  /// x[hidden] = RMSNorm(h) (unit gain).
  void norm(const float *h, float *x) const;
  /// Layer `layer`'s KV row of a position from its normalized input x:
  /// RMSNorm(W_kv x) (512 bf16) then RoPE(W_kr x, position) (64 bf16).
  void kvRow(int layer, const float *x, std::int64_t position, std::uint16_t *row) const;
  /// Layer `layer`'s queries [heads][576] bf16 from x (absorbed form: latent
  /// part then RoPE part, pre-scaled so that scores spread).
  void query(int layer, const float *x, std::int64_t position, std::uint16_t *queries) const;
  /// h += the attention branch of `layer` from its output [heads][512] bf16.
  void addAttention(int layer, const std::uint16_t *output, float *h) const;
  /// h += the MLP branch of `layer` (with its own pre-norm).
  void addMlp(int layer, float *h) const;
  /// Group `group`'s indexer key [indexDim] of a position from x.
  void indexKey(int group, const float *x, float *key) const;
  /// Group `group`'s indexer query [indexHeads][indexDim] and head weights
  /// [indexHeads] of a position from x.
  void indexQuery(int group, const float *x, float *query, float *weights) const;
  /// The indexer's score of a key for a query: sum_h w_h relu(q_h . key).
  float indexScore(const float *query, const float *weights, const float *key) const;
  /// logits[vocab] from the final hidden state.
  void logits(const float *h, float *out) const;

private:
  struct Layer {
    std::vector<float> wqa, wqb, wuk, wqRope, wkv, wkr, wuv, wo, w1, w3, w2;
  };
  struct Group {
    std::vector<float> wik, wiq, wiw;
  };
  ModelConfig config_;
  std::vector<float> embedding_, output_;
  std::vector<Layer> layers_;
  std::vector<Group> groups_;
};

/// Sparse attention of one position on the host, as the runtime defines it:
/// for each head, softmax(scale * q . row) over `rows` (count rows of 576
/// bf16), output the weighted sum of their first 512 values, rounded to bf16
/// (float accumulation). Zero output without rows. The drafter and the
/// prefill use it.
void hostAttention(const std::uint16_t *queries, int heads, const std::uint16_t *const *rows,
                   int count, std::uint16_t *output);

/// KV rows cross the C API in the runtime's format. The model keeps every
/// row as 576 bf16 values; with fp8 its latent dims are values of e4m3
/// times a power-of-two scale per 128 dims (Model::kvRow makes them so),
/// which bf16 holds exactly, so the two forms carry the same numbers and
/// the host's attention (prefill, drafter) reads what the runtime's reads.

/// `count` rows [count][576] in the runtime's format [count][rowBytes()]:
/// mla_bf16 as they are; mla_fp8 as e4m3 with per-128 power-of-two scales
/// and bf16 RoPE dims. Throws std::logic_error for an fp8 row that kvRow
/// did not make (a value e4m3 cannot hold).
std::vector<std::uint8_t> packRows(const ModelConfig &c, const std::uint16_t *rows,
                                   std::size_t count);
/// The inverse of packRows: rows [count][rowBytes()] into [count][576].
void unpackRows(const ModelConfig &c, const std::uint8_t *packed, std::size_t count,
                std::uint16_t *rows);

/// Index of the largest value (the lowest index on ties).
int argmax(const float *values, int count);

} // namespace dhs::decode

#endif // DHS_EXAMPLES_DECODE_MODEL_H
