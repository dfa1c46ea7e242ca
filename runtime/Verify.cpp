//===- Verify.cpp - Verify steps: pending KV, acceptance, commit ----------===//
//
// The Runtime's speculative decoding (Runtime.h: verifyBegin, verifyAccept;
// docs/runtime.md, "Speculative decoding"). A verify step is a step whose Q
// positions per request are its last accepted token and its drafts. Their
// KV is pending: staged in the request's ring slots (Q per request and
// group, reserved at admission), selectable as row ids history_len + j in
// this step only, and appended to the history only for the positions that
// acceptance keeps. Everything else (the host store, the residency table,
// the replacement state) sees only history rows.
//
//===----------------------------------------------------------------------===//

#include "runtime/Runtime.h"

#include "runtime/core/Error.h"
#include "runtime/core/LaunchForms.h"
#include "runtime/core/Reserve.h"

#include <algorithm>
#include <cstring>

namespace dhs::runtime {

namespace {

/// "request 7" for messages (engine ids).
std::string requestName(std::uint64_t id) { return "request " + std::to_string(id); }

/// Distinct values of v (sorted in place).
std::int64_t distinctCount(std::vector<std::int32_t> &v) {
  std::sort(v.begin(), v.end());
  return std::unique(v.begin(), v.end()) - v.begin();
}

} // namespace

SpecStats &SpecStats::operator+=(const SpecStats &other) {
  verifySteps += other.verifySteps;
  blocks += other.blocks;
  drafted += other.drafted;
  accepted += other.accepted;
  emitted += other.emitted;
  for (std::size_t i = 0; i < kPositions; ++i) {
    draftedAt[i] += other.draftedAt[i];
    acceptedAt[i] += other.acceptedAt[i];
  }
  hostRowsRead += other.hostRowsRead;
  hostRowsSelectedMissing += other.hostRowsSelectedMissing;
  return *this;
}

SpecStats Runtime::specStats(std::uint64_t id) const {
  indexOf(id, "speculation statistics");
  auto it = specByRequest_.find(id);
  return it == specByRequest_.end() ? SpecStats{} : it->second;
}

//===----------------------------------------------------------------------===//
// Begin: the pending rows
//===----------------------------------------------------------------------===//

void Runtime::verifyBegin(const std::uint64_t *ids, std::int64_t batch,
                          const std::int32_t *draftLens, const std::int32_t *draftTokens,
                          const void *rows) {
  requireStep("verify");
  if (inStep_)
    throw StateError("verify: a step is already in progress");
  const std::int64_t Q = shape_.queries;
  if (Q < 2)
    throw StateError("verify: the loaded step has 1 query position per request; a verify step "
                     "needs a step compiled for Q = gamma + 1 >= 2 positions");
  if (batch < 0 || batch > shape_.batch)
    throw InputError("verify: a batch of " + std::to_string(batch) +
                     " requests: the step takes 0 to " + std::to_string(shape_.batch));
  if (batch > 0 && (!ids || !draftLens))
    throw InputError("verify: null request ids or draft lengths for a batch of " +
                     std::to_string(batch));
  bool anyDrafts = false;
  for (std::int64_t b = 0; b < batch; ++b) {
    if (draftLens[b] < 0 || draftLens[b] > Q - 1)
      throw InputError("verify: " + requestName(ids[b]) + "'s block has " +
                       std::to_string(draftLens[b]) + " drafts; a block holds 0 to " +
                       std::to_string(Q - 1) + " (the step verifies Q = " + std::to_string(Q) +
                       " positions: the last accepted token and gamma drafts)");
    anyDrafts = anyDrafts || draftLens[b] > 0;
  }
  if (anyDrafts && !draftTokens)
    throw InputError("verify: null draft tokens");
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int32_t index = indexOf(ids[b], "verify");
    const std::int64_t length = controller_->historyLen(index);
    if (length + draftLens[b] + 1 > controller_->maxContext(index))
      throw CapacityError("verify: " + requestName(ids[b]) + "'s block of " +
                          std::to_string(draftLens[b] + 1) + " positions after its " +
                          std::to_string(length) + " rows would pass its maximum context of " +
                          std::to_string(controller_->maxContext(index)) + " rows");
  }
  verifyStarting_ = true;
  try {
    beginStep(ids, batch);
  } catch (...) {
    verifyStarting_ = false;
    throw;
  }
  verifyStarting_ = false;
  try {
    const std::size_t gamma = static_cast<std::size_t>(Q - 1);
    const std::size_t position = static_cast<std::size_t>(layout_.layers * layout_.rowBytes);
    verify_.draftLens.assign(draftLens, draftLens + batch);
    verify_.drafts.assign(static_cast<std::size_t>(batch) * gamma, -1);
    for (std::int64_t b = 0; b < batch; ++b)
      if (draftLens[b] > 0) // (draftTokens may be null when no block has drafts)
        std::copy_n(draftTokens + b * static_cast<std::int64_t>(gamma), draftLens[b],
                    verify_.drafts.begin() + b * static_cast<std::int64_t>(gamma));
    const auto *bytes = static_cast<const std::uint8_t *>(rows);
    if (bytes)
      verify_.rows.assign(bytes, bytes + static_cast<std::size_t>(batch * Q) * position);
    else
      verify_.rows.assign(static_cast<std::size_t>(batch * Q) * position, 0);
    verify_.written.assign(static_cast<std::size_t>(layout_.layers), 0);
    verify_.historyLen = historyLen_;
    for (std::int64_t b = 0; b < batch; ++b)
      verify_.historyLen[static_cast<std::size_t>(b)] += draftLens[b] + 1;
    const std::size_t lanes = static_cast<std::size_t>(shape_.batch);
    verify_.unionMissing.assign(static_cast<std::size_t>(layout_.groups()) * lanes, 0);
    verify_.positionMissing.assign(verify_.unionMissing.size(), 0);
    verify_.laneRead.assign(lanes, 0);
    verify_.laneMissing.assign(lanes, 0);
    verify_.active = true;
    if (bytes)
      for (std::int32_t l = 0; l < layout_.layers; ++l)
        writePendingLayer(l);
  } catch (...) {
    abortStep();
    throw;
  }
}

void Runtime::writePendingLayer(std::int32_t layer) {
  // Into the lanes' ring slots of the layer's group.
  const std::int64_t Q = shape_.queries;
  const std::int32_t group = layer / layout_.layersPerGroup;
  const std::size_t rowBytes = static_cast<std::size_t>(layout_.rowBytes);
  for (std::int64_t b = 0; b < batch_; ++b) {
    const std::vector<std::int32_t> &ring =
        controller_->ringSlots(group, lanes_[static_cast<std::size_t>(b)]);
    for (std::int32_t j = 0; j <= verify_.draftLens[static_cast<std::size_t>(b)]; ++j)
      tiers_.storage->writeSlot(layer, ring[static_cast<std::size_t>(j)],
                                verify_.rows.data() +
                                    static_cast<std::size_t>((b * Q + j) * layout_.layers + layer) *
                                        rowBytes);
  }
  verify_.written[static_cast<std::size_t>(layer)] = 1;
}

void Runtime::verifyWriteRows(std::int32_t layer, const void *rows) {
  requireStep("verify write rows");
  if (!verify_.active)
    throw StateError("verify write rows: no verify step is in progress");
  try {
    if (layer < 0 || layer >= layout_.layers)
      throw OutOfRangeError("verify write rows: layer " + std::to_string(layer) +
                            " does not exist (" + std::to_string(layout_.layers) + " layers)");
    if (batch_ > 0 && !rows)
      throw InputError("verify write rows: null rows for layer " + std::to_string(layer));
    if (verify_.written[static_cast<std::size_t>(layer)] ||
        attended_[static_cast<std::size_t>(layer)])
      throw StateError("verify write rows: layer " + std::to_string(layer) +
                       "'s pending rows are in place already");
    const std::int64_t Q = shape_.queries;
    const std::size_t rowBytes = static_cast<std::size_t>(layout_.rowBytes);
    const auto *source = static_cast<const std::uint8_t *>(rows);
    for (std::int64_t p = 0; p < batch_ * Q; ++p)
      std::memcpy(verify_.rows.data() +
                      static_cast<std::size_t>(p * layout_.layers + layer) * rowBytes,
                  source + static_cast<std::size_t>(p) * rowBytes, rowBytes);
    writePendingLayer(layer);
  } catch (...) {
    abortStep();
    throw;
  }
}

//===----------------------------------------------------------------------===//
// Selections and reads
//===----------------------------------------------------------------------===//

void Runtime::selectVerifyGroup(std::int32_t group, const std::int32_t *rowIds) {
  const std::size_t g = static_cast<std::size_t>(group);
  const std::int64_t Q = shape_.queries, K = shape_.topk, perLane = Q * K;
  std::vector<std::int32_t> &padded = rowIds_[g];
  std::fill(padded.begin(), padded.end(), -1);
  // Positions past a block select nothing.
  for (std::int64_t b = 0; b < batch_; ++b)
    std::copy_n(rowIds + b * perLane, (verify_.draftLens[static_cast<std::size_t>(b)] + 1) * K,
                padded.begin() + b * perLane);
  // Position q selects its history and the pending positions 0 .. q.
  for (std::int64_t b = 0; b < batch_; ++b)
    for (std::int64_t i = 0; i < perLane; ++i) {
      const std::int32_t id = padded[static_cast<std::size_t>(b * perLane + i)];
      const std::int64_t q = i / K, bound = historyLen_[static_cast<std::size_t>(b)] + q + 1;
      if (id == -1 || (id >= 0 && id < bound))
        continue;
      std::string where = "row id " + std::to_string(id) + " at [lane " + std::to_string(b) +
                          ", query " + std::to_string(q) + ", k " + std::to_string(i % K) +
                          "] of layer group " + std::to_string(group) + " (verify step)";
      if (id < -1)
        throw InputError(where + " is invalid (only -1 marks an unused selection)");
      throw OutOfRangeError(
          where + " is outside " + requestName(batchIds_[static_cast<std::size_t>(b)]) +
          "'s history (length " + std::to_string(historyLen_[static_cast<std::size_t>(b)]) +
          ") and the verify positions up to its own (row ids below " + std::to_string(bound) + ")");
    }
  // The controller resolves the history rows; pending ones read ring slots.
  std::vector<std::int32_t> history = padded;
  for (std::int64_t b = 0; b < batch_; ++b)
    for (std::int64_t i = 0; i < perLane; ++i) {
      std::int32_t &id = history[static_cast<std::size_t>(b * perLane + i)];
      if (id >= historyLen_[static_cast<std::size_t>(b)])
        id = -1;
    }
  std::vector<std::int32_t> &slots = slots_[g];
  controller_->resolve(group, lanes_.data(), shape_.batch, history.data(), Q, K, slots.data());
  std::vector<std::int32_t> missing, positionMissing;
  const std::size_t lanes = static_cast<std::size_t>(shape_.batch);
  for (std::int64_t b = 0; b < batch_; ++b) {
    const std::int32_t length = historyLen_[static_cast<std::size_t>(b)];
    const std::vector<std::int32_t> &ring =
        controller_->ringSlots(group, lanes_[static_cast<std::size_t>(b)]);
    missing.clear();
    std::int64_t perPosition = 0;
    for (std::int64_t q = 0; q < Q; ++q) {
      positionMissing.clear();
      for (std::int64_t k = 0; k < K; ++k) {
        const std::size_t e = static_cast<std::size_t>(b * perLane + q * K + k);
        if (padded[e] >= length)
          slots[e] = ring[static_cast<std::size_t>(padded[e] - length)];
        else if (padded[e] >= 0 && slots[e] < 0)
          positionMissing.push_back(padded[e]);
      }
      missing.insert(missing.end(), positionMissing.begin(), positionMissing.end());
      perPosition += distinctCount(positionMissing);
    }
    verify_.unionMissing[g * lanes + static_cast<std::size_t>(b)] = distinctCount(missing);
    verify_.positionMissing[g * lanes + static_cast<std::size_t>(b)] = perPosition;
  }
  countHostReads(group);
  selected_[g] = 1;
}

bool Runtime::fetchedRowsInStep(std::int32_t layer) const {
  const std::int32_t group = layer / layout_.layersPerGroup;
  const StepLayerPlan &first =
      plan_.layers[plan_.wholeModel() ? static_cast<std::size_t>(layout_.firstLayer(group)) : 0];
  const double share = tiers_.runner->formShare(layer); // (the group's form)
  for (std::size_t i = first.firstLaunch; i < first.endLaunch; ++i)
    if (manifest_->launches[i].kind == abi::LaunchKind::Fetch &&
        runsAt(manifest_->launches[i], share))
      return true;
  return false;
}

void Runtime::countVerifyReads(std::int32_t layer) {
  const std::int32_t group = layer / layout_.layersPerGroup;
  const std::size_t g = static_cast<std::size_t>(group);
  const std::size_t lanes = static_cast<std::size_t>(shape_.batch);
  std::int64_t unionRows = 0;
  for (std::size_t b = 0; b < lanes; ++b)
    unionRows += verify_.unionMissing[g * lanes + b];
  // What the layer reads from the host store: where the group's form
  // fetched its rows, a whole-model step did so in the group's first layer
  // only (the others read its staging); fused attention reads in every
  // layer. A shared retrieval (a union fetch, or the CPU's fused attention,
  // which reads each missing row of a request once) reads the union, a
  // fetch of every selection or CUDA's fused attention each position's
  // rows. The CPU counts its reads (-1: not counted, CUDA).
  const std::int64_t read = tiers_.runner->hostRowsRead(layer);
  const bool fetched = sharedRetrieval_[g] || fetchedRowsInStep(layer);
  const bool reads = !fetched || !plan_.wholeModel() || layer == layout_.firstLayer(group);
  const bool shared = sharedRetrieval_[g] || (!fetched && read >= 0);
  if (read >= 0 && shared && read != (reads ? unionRows : 0))
    throw InvariantError(
        "invariant violated: layer " + std::to_string(layer) + " of a verify step read " +
        std::to_string(read) + " host rows; the union of its group's missing rows has " +
        std::to_string(unionRows) + (reads ? "" : ", which the group's first layer read"));
  for (std::size_t b = 0; b < lanes; ++b) {
    if (reads)
      verify_.laneRead[b] += static_cast<std::uint64_t>(
          shared ? verify_.unionMissing[g * lanes + b] : verify_.positionMissing[g * lanes + b]);
    verify_.laneMissing[b] += static_cast<std::uint64_t>(verify_.positionMissing[g * lanes + b]);
  }
}

const std::int32_t *Runtime::checkPendingReads(std::int32_t layer) {
  const std::size_t g = static_cast<std::size_t>(layer / layout_.layersPerGroup);
  const std::int64_t Q = shape_.queries, perLane = Q * shape_.topk;
  const std::uint8_t *pool = tiers_.storage->hbmSnapshot(layer);
  const std::size_t rowBytes = static_cast<std::size_t>(layout_.rowBytes);
  verify_.masked = rowIds_[g];
  for (std::int64_t b = 0; b < batch_; ++b)
    for (std::int64_t i = 0; i < perLane; ++i) {
      const std::size_t e = static_cast<std::size_t>(b * perLane + i);
      const std::int32_t id = verify_.masked[e];
      const std::int32_t length = historyLen_[static_cast<std::size_t>(b)];
      if (id < length)
        continue;
      verify_.masked[e] = -1; // not a history row
      const std::uint8_t *given =
          verify_.rows.data() +
          (static_cast<std::size_t>((b * Q + id - length) * layout_.layers + layer)) * rowBytes;
      if (std::memcmp(pool + layout_.rowOffset(layer, slots_[g][e]), given, rowBytes) != 0)
        throw InvariantError("invariant violated: layer " + std::to_string(layer) +
                             " read verify position " + std::to_string(id - length) + " of lane " +
                             std::to_string(b) + " from ring slot " + std::to_string(slots_[g][e]) +
                             ", which differs from its rows");
    }
  return verify_.masked.data();
}

//===----------------------------------------------------------------------===//
// Accept: acceptance, the step's end, the commit
//===----------------------------------------------------------------------===//

void Runtime::runAcceptance(AcceptRule rule, std::int32_t vocab, const float *target,
                            const float *draftProbs, std::uint64_t seed, std::int32_t *accepted,
                            std::int32_t *next) {
  if (rule != AcceptRule::Greedy && rule != AcceptRule::RejectionSampling)
    throw InputError("verify accept: rule " + std::to_string(static_cast<int>(rule)) +
                     " is not an acceptance rule (0 greedy, 1 rejection sampling)");
  if (vocab < 1)
    throw InputError("verify accept: a vocabulary of " + std::to_string(vocab) + " tokens");
  const bool sampling = rule == AcceptRule::RejectionSampling;
  if (batch_ > 0 && (!target || (sampling && !draftProbs)))
    throw InputError(sampling ? "verify accept: null target or draft probabilities (rejection "
                                "sampling needs both)"
                              : "verify accept: null target");
  const std::int64_t Q = shape_.queries, gamma = Q - 1, V = vocab;
  for (std::int64_t b = 0; b < batch_; ++b) {
    const std::string lane = "lane " + std::to_string(b) + " (" +
                             requestName(batchIds_[static_cast<std::size_t>(b)]) + ")";
    const std::int32_t length = verify_.draftLens[static_cast<std::size_t>(b)];
    for (std::int32_t i = 0; i < length; ++i) {
      const std::int32_t x = verify_.drafts[static_cast<std::size_t>(b * gamma + i)];
      if (x < 0 || x >= vocab)
        throw InputError("verify accept: draft token " + std::to_string(x) + " at position " +
                         std::to_string(i) + " of " + lane + " is outside the vocabulary [0, " +
                         std::to_string(vocab) + ")");
    }
    for (std::int32_t j = 0; j <= length; ++j) {
      const std::string wrong = checkAcceptRow(target + (b * Q + j) * V, V, sampling);
      if (!wrong.empty())
        throw InputError("verify accept: the target's " +
                         std::string(sampling ? "probabilities" : "scores") + " at position " +
                         std::to_string(j) + " of " + lane + ": " + wrong);
      if (sampling && j < length) {
        const std::string q = checkAcceptRow(draftProbs + (b * gamma + j) * V, V, true);
        if (!q.empty())
          throw InputError("verify accept: the draft probabilities at position " +
                           std::to_string(j) + " of " + lane + ": " + q);
      }
    }
  }
  std::vector<std::uint64_t> seeds(static_cast<std::size_t>(batch_));
  for (std::int64_t b = 0; b < batch_; ++b)
    seeds[static_cast<std::size_t>(b)] = acceptSeed(seed, batchIds_[static_cast<std::size_t>(b)],
                                                    historyLen_[static_cast<std::size_t>(b)]);
  AcceptProblem problem;
  problem.rule = rule;
  problem.batch = batch_;
  problem.gamma = gamma;
  problem.vocab = V;
  problem.drafts = verify_.drafts.data();
  problem.target = target;
  problem.draftProbs = sampling ? draftProbs : nullptr;
  problem.seeds = seeds.data();
  if (batch_ > 0 && !tiers_.runner->accept(problem, accepted, next))
    acceptOnHost(problem, accepted, next);
  for (std::int64_t b = 0; b < batch_; ++b)
    if (accepted[b] < 0 || accepted[b] > verify_.draftLens[static_cast<std::size_t>(b)] ||
        next[b] < 0 || next[b] >= vocab)
      throw DeviceError("verify accept: acceptance gave lane " + std::to_string(b) + " " +
                        std::to_string(accepted[b]) + " accepted drafts of " +
                        std::to_string(verify_.draftLens[static_cast<std::size_t>(b)]) +
                        " and next token " + std::to_string(next[b]));
}

void Runtime::verifyAccept(AcceptRule rule, std::int32_t vocab, const float *target,
                           const float *draftProbs, std::uint64_t seed, std::int32_t *accepted,
                           std::int32_t *tokens) {
  requireStep("verify accept");
  if (!verify_.active)
    throw StateError("verify accept: no verify step is in progress (begin one with verify begin)");
  const std::int64_t Q = shape_.queries, gamma = Q - 1;
  std::vector<std::int32_t> acceptedDrafts, next;
  // The commit's tokens (each request's last accepted token and its
  // accepted drafts: their requests, lane by lane), and the writes of one.
  std::vector<std::int32_t> committed;
  std::vector<RowWrite> writes;
  // What failed in the checks after the step ended (whole), reported once
  // the commit is whole too.
  std::exception_ptr checkFailure;
  try {
    acceptedDrafts.resize(static_cast<std::size_t>(batch_));
    next.resize(static_cast<std::size_t>(batch_));
    if (batch_ > 0 && (!accepted || !tokens))
      throw InputError("verify accept: null accepted counts or tokens");
    runAcceptance(rule, vocab, target, draftProbs, seed, acceptedDrafts.data(), next.data());
    // Room for all the commit needs, before the step ends: the step's end
    // and the commit then happen whole, or (no memory) the verify step is
    // abandoned.
    for (std::int64_t b = 0; b < batch_; ++b)
      committed.insert(committed.end(),
                       static_cast<std::size_t>(acceptedDrafts[static_cast<std::size_t>(b)]) + 1,
                       lanes_[static_cast<std::size_t>(b)]);
    controller_->reserveAppends(committed.data(), committed.size(), changes_);
    reserveRoom(pendingCopies_, committed.size() + 1);
    // A list for changes_ after each batch whose copy fails (the step's end
    // and each token), each with room for a token's changes.
    const std::size_t perToken = controller_->changesPerAppend();
    // (A list goes in with its room made: one whose room failed is never
    // kept, where a later, shorter commit would not reserve it.)
    reserveRoom(spareChanges_, committed.size() + 1);
    for (std::vector<RowCopy> &spare : spareChanges_)
      spare.reserve(perToken);
    while (spareChanges_.size() < committed.size() + 1) {
      std::vector<RowCopy> spare;
      spare.reserve(perToken);
      spareChanges_.push_back(std::move(spare));
    }
    writes.reserve(static_cast<std::size_t>(layout_.layers));
    for (std::int64_t b = 0; b < batch_; ++b)
      specByRequest_.try_emplace(batchIds_[static_cast<std::size_t>(b)]); // (zeros: as none)
    // The commit writes host rows: the work in flight ends, or its error
    // abandons the verify step, before the step ends (the work the step's
    // end submits reads no row the commit writes).
    tiers_.storage->waitForSubmittedWork();
    acceptingVerify_ = true;
    const std::uint64_t stepsBefore = steps_;
    try {
      endStep();
    } catch (...) {
      if (steps_ == stepsBefore)
        throw;
      checkFailure = std::current_exception(); // (the step ended whole: a check failed)
    }
    acceptingVerify_ = false;
  } catch (...) {
    acceptingVerify_ = false;
    if (inStep_)
      abortStep();
    verify_.active = false;
    throw;
  }
  verify_.active = false;
  // The commit, token by token (a request's tokens one after the other: a
  // row one places may leave HBM with the next, so each has its own
  // placement). It allocates nothing, also when copies into HBM fail (a
  // failed batch's list is kept for a retry, changes_ takes a spare). Were
  // it to stop half-way, the runtime could not vouch for its tables.
  const std::size_t position = static_cast<std::size_t>(layout_.layers * layout_.rowBytes);
  try {
    for (std::int64_t b = 0; b < batch_; ++b)
      for (std::int32_t j = 0; j <= acceptedDrafts[static_cast<std::size_t>(b)]; ++j) {
        const std::int32_t index = lanes_[static_cast<std::size_t>(b)];
        controller_->append(index, changes_);
        writes.clear();
        addNewestRowWrites(
            index, verify_.rows.data() + static_cast<std::size_t>(b * Q + j) * position, writes);
        writeRows(writes, static_cast<std::size_t>(layout_.rowBytes));
        recordNewestRowHashes(index);
        try {
          applyCopies();
        } catch (...) {
          if (!checkFailure)
            checkFailure = std::current_exception(); // (the token is whole)
        }
      }
  } catch (...) {
    markBroken("verify accept's commit");
    throw;
  }
  SpecStats step;
  step.verifySteps = 1;
  for (std::int64_t b = 0; b < batch_; ++b) {
    const std::size_t lane = static_cast<std::size_t>(b);
    const std::int32_t n = acceptedDrafts[lane], length = verify_.draftLens[lane];
    accepted[b] = n;
    for (std::int64_t i = 0; i < Q; ++i)
      tokens[b * Q + i] = i < n ? verify_.drafts[static_cast<std::size_t>(b * gamma + i)]
                                : (i == n ? next[lane] : -1);
    SpecStats block;
    block.verifySteps = 1;
    block.blocks = 1;
    block.drafted = static_cast<std::uint64_t>(length);
    block.accepted = static_cast<std::uint64_t>(n);
    block.emitted = static_cast<std::uint64_t>(n) + 1;
    for (std::int32_t i = 0; i < length && i < static_cast<std::int32_t>(SpecStats::kPositions);
         ++i) {
      ++block.draftedAt[static_cast<std::size_t>(i)];
      block.acceptedAt[static_cast<std::size_t>(i)] += i < n;
    }
    block.hostRowsRead = verify_.laneRead[lane];
    block.hostRowsSelectedMissing = verify_.laneMissing[lane];
    specByRequest_[batchIds_[lane]] += block; // (its entry is there: no allocation)
    block.verifySteps = 0;
    step += block;
  }
  specTotals_ += step;
  if (checkFailure)
    std::rethrow_exception(checkFailure);
}

//===----------------------------------------------------------------------===//
// The accept step
//===----------------------------------------------------------------------===//

void Runtime::loadAcceptStep(const std::string &stepDirectory) {
  loadAcceptStep(loadAuxiliaryStep(stepDirectory, "load accept step"));
}

void Runtime::loadAcceptStep(const Manifest &manifest) {
  requireStep("load accept step");
  if (manifest.launches.size() != 1 || manifest.launches[0].kind != abi::LaunchKind::Accept)
    throw Error("the step " + manifest.directory +
                " is not an accept step (one dhs.accept launch)");
  const bool sampling =
      std::any_of(manifest.arguments.begin(), manifest.arguments.end(),
                  [](const Argument &a) { return a.role == ArgumentRole::DraftProbs; });
  const AcceptRule rule = sampling ? AcceptRule::RejectionSampling : AcceptRule::Greedy;
  const std::size_t r = static_cast<std::size_t>(rule);
  requireAuxiliaryLoad("load accept step",
                       sampling ? "rejection-sampling accept step" : "greedy accept step",
                       acceptLoaded_[r]);
  const Argument &draft = manifest.argument(ArgumentRole::DraftTokens);
  if (draft.shape.size() != 2 || draft.shape[0] != shape_.batch ||
      draft.shape[1] != shape_.queries - 1)
    throw Error("the accept step " + manifest.directory + " verifies " +
                std::to_string(draft.shape.empty() ? 0 : draft.shape[0]) + " requests x " +
                std::to_string(draft.shape.size() < 2 ? 0 : draft.shape[1]) +
                " drafts; this session's verify steps take " + std::to_string(shape_.batch) +
                " requests x " + std::to_string(shape_.queries - 1) +
                " drafts (the attention step's B and Q - 1): compile it with draft memref<" +
                std::to_string(shape_.batch) + "x" + std::to_string(shape_.queries - 1) + "xi32>");
  tiers_.runner->setAcceptStep(manifest, rule);
  acceptLoaded_[r] = true;
}

} // namespace dhs::runtime
