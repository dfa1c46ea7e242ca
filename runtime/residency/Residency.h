//===- Residency.h - The residency controller of the KV hierarchy -*- C++ -*-===//
//
// Decides, every step, which KV rows of the admitted requests are in HBM:
// per request and layer group a protected working set (the newest W tokens,
// a floor of F hot rows) and optional hot rows, under the adaptive or the
// fixed policy, with CLOCK, LRU or LRU-2 replacement. Every placement comes
// back as a RowCopy for the tiers to carry out. docs/runtime.md
// ("Residency") describes the policies, the replacement state and a step.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_RESIDENCY_RESIDENCY_H
#define DHS_RUNTIME_RESIDENCY_RESIDENCY_H

#include "runtime/abi/Contract.h"
#include "runtime/residency/Allocators.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dhs::runtime {

/// The compiler-runtime contract (runtime/abi/Contract.h).
namespace abi = ::dhs_abi;

/// How spare HBM is used, and which hot row gives up its slot (the names
/// of the contract, runtime/abi/Contract.h).
using abi::Replacement;
using abi::ResidencyPolicy;

/// Configuration of a residency controller.
struct ResidencyConfig {
  std::int32_t groups = 1;        ///< layer groups (one selection, one slot space each)
  std::int32_t hbmSlots = 0;      ///< slots per group
  std::int64_t hostRows = 0;      ///< host-store rows (shared by all groups)
  std::int32_t maxRequests = 64;  ///< requests admitted at once, at most
  std::int32_t newestWindow = 64; ///< W: newest tokens always resident
  std::int32_t draftWindow = 0;   ///< W_draft: ring slots per request and group (the
                                  ///< Runtime's verify steps: Q pending rows)
  std::int32_t hotFloor = 0;      ///< F: guaranteed hot slots per request and group
                                  ///< (Fixed: the hot buffer size)
  ResidencyPolicy policy = ResidencyPolicy::Adaptive; ///< spare-memory policy
  Replacement replacement = Replacement::Clock;       ///< victim choice
  /// Most rows promoted per request and group in one step (-1: no limit).
  std::int32_t maxPromotionsPerStep = -1;

  /// Slots one admitted request reserves in each group: W + W_draft + F.
  std::int64_t reservedSlots() const {
    return static_cast<std::int64_t>(newestWindow) + draftWindow + hotFloor;
  }

  /// Adaptive residency with CLOCK replacement.
  static ResidencyConfig adaptive(std::int32_t groups, std::int32_t hbmSlots, std::int64_t hostRows,
                                  std::int32_t newestWindow, std::int32_t draftWindow,
                                  std::int32_t hotFloor);
  /// A fixed hot buffer of `bufferSlots` per request and group, LRU.
  static ResidencyConfig fixedBudget(std::int32_t groups, std::int32_t hbmSlots,
                                     std::int64_t hostRows, std::int32_t newestWindow,
                                     std::int32_t draftWindow, std::int32_t bufferSlots);

  /// Throws Error naming the first invalid field.
  void validate() const;

  /// Requests that can be admitted at once: maxRequests, or fewer when the
  /// protected working sets (reservedSlots() each) or the host store (a row
  /// each, at least) run out first.
  std::int64_t maxLiveRequests() const;
};

/// Kinds of slot.
enum class SlotKind : std::uint8_t {
  Free = 0,   ///< unused
  Newest = 1, ///< one of a request's newest W tokens (protected)
  Ring = 2,   ///< a draft-ring slot (protected, no history row)
  Hot = 3,    ///< a promoted or aged-out row (floor or optional)
};

/// A row to copy from the host store into a slot, in every layer of a group;
/// in a release log (setReleaseLog) slot is -1: the row left HBM.
struct RowCopy {
  std::int32_t group = 0;   ///< layer group
  std::int32_t slot = 0;    ///< destination HBM slot (-1: released)
  std::int64_t hostRow = 0; ///< source host-store row
  bool operator==(const RowCopy &other) const {
    return group == other.group && slot == other.slot && hostRow == other.hostRow;
  }
};

/// Counts of one step (or, summed, of many).
struct ResidencyStepStats {
  std::int64_t entries = 0;     ///< valid selection entries (row id != -1)
  std::int64_t selected = 0;    ///< distinct (request, group, row) selected
  std::int64_t resident = 0;    ///< of those, resident when resolved
  std::int64_t fetched = 0;     ///< of those, read from the host store
  std::int64_t promoted = 0;    ///< fetched rows given a slot after the step
  std::int64_t notPromoted = 0; ///< fetched rows left on the host (no slot)
  std::int64_t evicted = 0;     ///< hot rows that lost their slot

  /// Adds another step's counts.
  ResidencyStepStats &operator+=(const ResidencyStepStats &other);
};

/// Memory state of one group.
struct GroupOccupancy {
  std::int32_t slots = 0;          ///< slot space
  std::int32_t used = 0;           ///< slots not free
  std::int32_t newest = 0;         ///< Newest slots
  std::int32_t ring = 0;           ///< Ring slots
  std::int32_t hot = 0;            ///< Hot slots
  std::int64_t optionalBudget = 0; ///< slots optional rows may use
  std::int64_t optionalUsed = 0;   ///< hot rows beyond their request's floor
};

/// One group's residency state as the device holds it when the decisions of
/// a step (dhs.plan_promotions) and of the appends between steps
/// (dhs.age_rows) are made there (docs: notes/device-residency-design.md
/// section 2). The residency map and the newest and ring slots stay where
/// they are (the map on the device, the others on the host).
struct DeviceGroupState {
  std::vector<std::int64_t> hotRows;   ///< [slots] host row of a hot slot, -1
  std::vector<std::int32_t> cleared;   ///< [slots] use the hand cleared; -1: referenced
  std::vector<std::int32_t> freeStack; ///< [slots] free slots, the next at freeCount - 1
  std::vector<std::int32_t> recency;   ///< [slots x 2] last and previous use
  std::int32_t hand = 0;               ///< CLOCK hand
  std::int32_t freeCount = 0;          ///< valid entries of freeStack
  std::int64_t excess = 0;             ///< hot rows beyond their floor (optionalUsed)
  std::uint32_t noVictimStep = 0;      ///< the step a non-forced victim search failed in
  std::uint32_t step = 0;              ///< the step number (the step log's word 0)
  bool operator==(const DeviceGroupState &other) const {
    return hotRows == other.hotRows && cleared == other.cleared && freeStack == other.freeStack &&
           recency == other.recency && hand == other.hand && freeCount == other.freeCount &&
           excess == other.excess && noVictimStep == other.noVictimStep && step == other.step;
  }
};

/// What the device counted in a group's step (the step log's header and the
/// plan's control words), all the host needs to keep its counts.
struct DeviceStepCounts {
  std::int64_t entries = 0;  ///< valid selection entries
  std::int64_t hits = 0;     ///< distinct resident rows selected
  std::int64_t listed = 0;   ///< distinct fetched rows (before a per-lane cap)
  std::int64_t promoted = 0; ///< rows given a slot
  std::int64_t released = 0; ///< hot rows evicted for them
};

/// One append to a device-owned group, in call order, as dhs.age_rows takes
/// it (AgeRowsLayout): the host row leaving the newest window (-1: none),
/// the new row, and its request's host range [ownerBegin, ownerEnd).
struct DeviceAppend {
  std::int64_t aged = -1;
  std::int64_t fresh = 0;
  std::int64_t ownerBegin = 0;
  std::int64_t ownerEnd = 0;
  bool operator==(const DeviceAppend &other) const {
    return aged == other.aged && fresh == other.fresh && ownerBegin == other.ownerBegin &&
           ownerEnd == other.ownerEnd;
  }
};

// A recorded list is the aging step's list as it is: copied, not converted.
static_assert(sizeof(DeviceAppend) == abi::AgeRowsLayout::kEntryWords * 8 &&
                  offsetof(DeviceAppend, aged) == abi::AgeRowsLayout::kAged * 8 &&
                  offsetof(DeviceAppend, fresh) == abi::AgeRowsLayout::kFresh * 8 &&
                  offsetof(DeviceAppend, ownerBegin) == abi::AgeRowsLayout::kOwnerBegin * 8 &&
                  offsetof(DeviceAppend, ownerEnd) == abi::AgeRowsLayout::kOwnerEnd * 8,
              "DeviceAppend must be an AgeRowsLayout entry");

/// A list of appends that someone else holds (a controller's record,
/// deviceAppends, or a vector): valid while its holder is unchanged.
struct DeviceAppendList {
  const DeviceAppend *entries = nullptr;
  std::size_t count = 0;

  DeviceAppendList() = default;
  DeviceAppendList(const DeviceAppend *entries, std::size_t count)
      : entries(entries), count(count) {}
  /// The entries of `appends` (implicit: a vector is a list).
  DeviceAppendList(const std::vector<DeviceAppend> &appends)
      : entries(appends.data()), count(appends.size()) {}

  std::size_t size() const { return count; }
  bool empty() const { return count == 0; }
  const DeviceAppend *begin() const { return entries; }
  const DeviceAppend *end() const { return entries + count; }
  const DeviceAppend &operator[](std::size_t i) const { return entries[i]; }
  /// A copy of the entries.
  std::vector<DeviceAppend> toVector() const { return {begin(), end()}; }
};

/// The residency controller. Requests are small integer indices in
/// [0, maxRequests) handed out by admit (the lowest free one). Each call
/// that changes its tables happens whole or not at all: it makes room for
/// everything it adds before its first change (runtime/core/Reserve.h),
/// so that an allocation that fails (std::bad_alloc) changes nothing.
class ResidencyController {
public:
  /// A controller with every slot free. Throws Error for a bad config.
  explicit ResidencyController(const ResidencyConfig &config);
  ~ResidencyController();
  /// Copies and moves carry the whole state.
  ResidencyController(const ResidencyController &);
  ResidencyController &operator=(const ResidencyController &);
  ResidencyController(ResidencyController &&) noexcept;
  ResidencyController &operator=(ResidencyController &&) noexcept;

  /// The configuration.
  const ResidencyConfig &config() const { return config_; }

  /// Host memory a controller of `config` takes at most: its per-slot and
  /// per-host-row tables and the entries of as many requests as can be
  /// admitted at once (maxLiveRequests; the request table grows as
  /// requests are admitted, so max_requests alone costs nothing).
  static std::uint64_t hostBytes(const ResidencyConfig &config);

  //===--------------------------------------------------------------------===//
  // Requests
  //===--------------------------------------------------------------------===//

  /// Why a request with room for `maxContext` rows could not be admitted now,
  /// or "" when it can.
  std::string admissionRefusal(std::int64_t maxContext) const;

  /// Admits a request whose history of `historyLen` rows (the prefill,
  /// already or about to be written by the caller) may grow to `maxContext`
  /// rows: reserves host rows [start, start + maxContext), releases optional
  /// rows until every admitted request's reservation fits, reserves the
  /// draft ring and places the newest min(W, historyLen) rows (appending a
  /// RowCopy per group and row to `copies`). Returns the request's index.
  /// Throws CapacityError (admission refused, nothing changed), StateError
  /// during a step, Error for historyLen < 0 or maxContext < max(1,
  /// historyLen), std::bad_alloc (nothing changed).
  std::int32_t admit(std::int64_t historyLen, std::int64_t maxContext,
                     std::vector<RowCopy> &copies);
  /// The index the next admission takes, which admit returns (the lowest
  /// free one), so that the caller can allocate what the request needs
  /// before anything changes.
  std::int32_t nextIndex() const;

  /// Appends one token to a request: its row (host row start + old length,
  /// written by the caller) becomes the newest, placed in a slot of every
  /// group (a RowCopy each); the token leaving the newest window becomes a
  /// hot row or is dropped if no budget is left. Throws CapacityError at
  /// the request's maximum context, UnknownRequestError, StateError during
  /// a step, std::bad_alloc; nothing changes then.
  void append(std::int32_t request, std::vector<RowCopy> &copies);
  /// Appends one token to each of `requests` [count] in order (a request
  /// given k times gets k tokens): the same as append for each, but all of
  /// them or none (every request is checked and the room for all is made
  /// first). Throws as append.
  void append(const std::int32_t *requests, std::size_t count, std::vector<RowCopy> &copies);
  /// Checks that each of `requests` [count] can take its tokens (as
  /// append(requests, count, copies)) and makes room for all the appends
  /// add, `copies` included: until those appends are made, append of any of
  /// them allocates nothing, and so cannot fail for want of memory. During
  /// a step the room covers what its end adds first (a Runtime's verify
  /// step makes room for its commit before the step ends). Throws
  /// CapacityError, UnknownRequestError, std::bad_alloc.
  void reserveAppends(const std::int32_t *requests, std::size_t count,
                      std::vector<RowCopy> &copies);
  /// The most changes (copies and releases) one appended token adds to
  /// `copies`: reserveAppends of one token needs no more room than this.
  std::size_t changesPerAppend() const;

  /// Frees every slot and the host range of a request. Throws
  /// UnknownRequestError, StateError during a step, std::bad_alloc (a
  /// release log that cannot grow: nothing changed).
  void finish(std::int32_t request);

  /// True if `request` is admitted.
  bool live(std::int32_t request) const;
  /// Admitted requests.
  std::int32_t liveCount() const { return liveCount_; }
  /// First host row of a request's range. Throws UnknownRequestError.
  std::int64_t historyStart(std::int32_t request) const;
  /// History length of a request. Throws UnknownRequestError.
  std::int64_t historyLen(std::int32_t request) const;
  /// Maximum context of a request. Throws UnknownRequestError.
  std::int64_t maxContext(std::int32_t request) const;

  //===--------------------------------------------------------------------===//
  // Steps
  //===--------------------------------------------------------------------===//

  /// Starts a step. Throws StateError if one is in progress.
  void beginStep();

  /// Resolves group `group`'s selections for a batch: `requests` [batch]
  /// (request index, or -1 for an unused lane whose row ids must all be -1),
  /// `rowIds` [batch, queries, topk] (-1 = none), writes `slots` [batch,
  /// queries, topk] (slot, or -1 = read from the host store). Records hits
  /// and the distinct rows to fetch. Validates everything before changing
  /// anything: throws InputError for a row id outside its request's history
  /// or a request twice in a batch, UnknownRequestError, StateError outside
  /// a step or for a group resolved twice, std::bad_alloc.
  void resolve(std::int32_t group, const std::int32_t *requests, std::int64_t batch,
               const std::int32_t *rowIds, std::int64_t queries, std::int64_t topk,
               std::int32_t *slots);

  /// Books group `group`'s selections from what a resolve kernel logged on
  /// the device (dhs.pool_log), with the same effect as resolve on the
  /// selections themselves, which the host then never reads: `hitSlots`
  /// [hits] the distinct slots hit (any order), `misses` [missCount x 2]
  /// (lane, row id) pairs of the selections that missed (any order,
  /// repeats allowed), `entries` the valid selections. Validates everything
  /// before changing anything: throws InputError for a log that contradicts
  /// the state (a slot listed twice, free, or not of a batch request; a
  /// miss of a resident row or of an empty lane), OutOfRangeError for a row
  /// id outside its request's history, StateError and std::bad_alloc as
  /// resolve.
  void book(std::int32_t group, const std::int32_t *requests, std::int64_t batch,
            const std::int32_t *hitSlots, std::int64_t hits, const std::int32_t *misses,
            std::int64_t missCount, std::int64_t entries);

  /// Ends the step after its reads: promotes the fetched rows, each
  /// request's in ascending row order (RowCopy per row into `copies`).
  /// Throws StateError outside a step, std::bad_alloc (nothing changed: the
  /// step is still in progress).
  void endStep(std::vector<RowCopy> &copies);

  /// Ends a step without promoting anything (after a failure between
  /// resolve and the reads): the step leaves no trace (the slots' uses are
  /// as before it, lastStep() is the last completed step's, and the
  /// evictions since it are reported with the next). Throws StateError
  /// outside a step.
  void abortStep();

  /// True between beginStep and endStep.
  bool inStep() const { return inStep_; }
  /// Steps begun so far.
  std::uint32_t stepCount() const { return step_; }

  //===--------------------------------------------------------------------===//
  // State
  //===--------------------------------------------------------------------===//

  /// The slot of a request's row in a group, or -1.
  std::int32_t slotOf(std::int32_t group, std::int32_t request, std::int64_t row) const;
  /// A group's slot of every host row (-1: on the host only), the table a
  /// device residency map mirrors.
  const std::vector<std::int32_t> &residencyTable(std::int32_t group) const;
  /// Records, from now on, every history row that leaves HBM (evicted, or
  /// its request finished) into `log` as RowCopy{group, -1, host row}
  /// (nullptr: stop). Copies are reported by the calls that make them; the
  /// log may be the list they are given (releases and copies then in the
  /// order they were made).
  void setReleaseLog(std::vector<RowCopy> *log) { releaseLog_ = log; }
  /// Kind of a slot.
  SlotKind slotKind(std::int32_t group, std::int32_t slot) const;
  /// Replacement state of a slot: {step of its last use, of the use before
  /// (0: none)}, a use being a selection or the placement; the table a
  /// device replacement state (dhs.pool_recency) mirrors for slots that
  /// hold history rows.
  std::pair<std::uint32_t, std::uint32_t> slotRecency(std::int32_t group, std::int32_t slot) const;
  /// CLOCK: whether a slot is referenced (used since the hand last passed
  /// it), and where the group's hand is (Adaptive).
  bool slotReferenced(std::int32_t group, std::int32_t slot) const;
  std::int32_t clockHand(std::int32_t group) const;
  /// A group's free slots in the order they are handed out, the next last.
  const std::vector<std::int32_t> &freeSlots(std::int32_t group) const;
  /// Owner of a slot (-1 when free).
  std::int32_t slotOwner(std::int32_t group, std::int32_t slot) const;
  /// History row held by a slot (-1 when free or a ring slot).
  std::int32_t slotRow(std::int32_t group, std::int32_t slot) const;
  /// A request's ring slots in a group (W_draft of them, reserved at
  /// admission: the Runtime stages a verify step's pending rows there).
  /// Throws UnknownRequestError.
  const std::vector<std::int32_t> &ringSlots(std::int32_t group, std::int32_t request) const;
  /// Hot rows of a request in a group.
  std::int32_t hotCount(std::int32_t group, std::int32_t request) const;
  /// Memory state of a group.
  GroupOccupancy occupancy(std::int32_t group) const;
  /// Optional budget (slots per group): Adaptive hbmSlots - admitted *
  /// (W + W_draft + F), Fixed 0.
  std::int64_t optionalBudget() const;
  /// Counts of the last completed step (or the one in progress); its
  /// evictions include those made between the previous step and it (by
  /// appends and admissions).
  const ResidencyStepStats &lastStep() const { return last_; }
  /// Evictions since construction, wherever they happened.
  std::int64_t evictionCount() const { return evictions_; }
  /// Counts since construction.
  const ResidencyStepStats &totals() const { return totals_; }
  /// Host allocator (for inspection).
  const HostRowAllocator &hostAllocator() const { return host_; }

  //===--------------------------------------------------------------------===//
  // Decisions on the device (Adaptive + CLOCK + hot floor 0)
  //===--------------------------------------------------------------------===//

  /// Group `group`'s state as the device holds it (what packPromotionPlan
  /// packs): hot rows, references (-1: referenced), the free stack, recency,
  /// hand, free count, excess, the victim-search memo and the step. Throws
  /// StateError while the group is device-owned (the host tables are stale).
  DeviceGroupState exportDeviceState(std::int32_t group) const;
  /// The same, into `state` (its vectors keep their capacity: no
  /// allocation once they hold a state of this pool).
  void exportDeviceState(std::int32_t group, DeviceGroupState &state) const;
  /// exportDeviceState of each of `groups` (distinct) into
  /// `states[group]` (resized to the group count if shorter), the groups on
  /// parallel threads (parallelFor). Throws as exportDeviceState, before
  /// exporting any.
  void exportDeviceStates(const std::vector<std::int32_t> &groups,
                          std::vector<DeviceGroupState> &states) const;

  /// From now on the device decides for group `group` (after its state was
  /// uploaded, exportDeviceState): steps are booked by applyDeviceCounts,
  /// appends are recorded for dhs.age_rows, and the host's per-slot tables
  /// (kinds, owners, rows, the resolve table, recency, references) stay as
  /// they are now, stale (the accessors that read them throw StateError)
  /// until adoptDeviceState rebuilds them. Needs the adaptive policy, CLOCK
  /// and hot floor 0 (throws Error otherwise) and no step in progress or one
  /// that has not resolved the group (StateError).
  void markDeviceOwned(std::int32_t group);
  /// markDeviceOwned of each of `groups`: all of them or none (it throws
  /// as markDeviceOwned, or std::bad_alloc, before marking any). (O(requests)
  /// a group: the requests' history lengths are noted, for the appends'
  /// slots.)
  void markDeviceOwned(const std::vector<std::int32_t> &groups);
  /// True while group `group` is device-owned.
  bool deviceOwned(std::int32_t group) const;

  /// Books a device-owned group's step from the device's counts: the step's
  /// statistics, the hot and optional counts, and the free stack (the
  /// promoted - released slots the plan took from its top). Throws
  /// StateError outside a step, for a group that is not device-owned or
  /// was already booked in the step, InputError for counts that do not fit
  /// (negative, more released than promoted, or more slots taken than free).
  void applyDeviceCounts(std::int32_t group, const DeviceStepCounts &counts);

  /// Appends recorded for a device-owned group (by append) and not applied
  /// yet, in call order, for dhs.age_rows; empty for a group the host owns.
  /// The groups handed over together share one record: their lists are the
  /// same entries. Valid until the next append, applyDeviceAppends,
  /// markDeviceOwned or adoptDeviceState.
  DeviceAppendList deviceAppends(std::int32_t group) const;

  /// Takes what dhs.age_rows decided for the recorded appends: `slots[i]`
  /// is append i's new row's slot (-1: it left HBM again in the same list),
  /// and clears the group's record. The host keeps only each request's
  /// newest slots (a ring of W a request): its per-slot tables stay as at
  /// the handover, and adoptDeviceState rebuilds them. O(appends): the list
  /// and the slots read in order, each slot written to its request's ring
  /// (requests that append together side by side); a free flag read for a
  /// slot placed over the budget only while the free stack holds slots
  /// (those of requests shorter than W), a ring-slot bit only where there
  /// are ring slots. Throws InputError for a count that differs from the
  /// record, a slot outside the pool or one that the host does not expect
  /// (another slot than the free stack's top it took, a free slot the stack
  /// still holds, a ring slot); nothing changes then.
  void applyDeviceAppends(std::int32_t group, const std::vector<std::int32_t> &slots);
  /// applyDeviceAppends(group, slots[group]) for each of `groups`
  /// (distinct), one after another (a group's work is microseconds, less
  /// than waking threads). Throws OutOfRangeError for a group that does not
  /// exist or has no slots, before applying any; otherwise the first error a
  /// group's call throws: the groups before it were applied, it and the
  /// groups after it keep their records (deviceAppends).
  void applyDeviceAppends(const std::vector<std::int32_t> &groups,
                          const std::vector<std::vector<std::int32_t>> &slots);

  /// Rebuilds a device-owned group's host tables from the device's state
  /// and the newest slots the applied appends gave (newest slots: owner and
  /// row; hot slots: owner by the live request ranges, row, kind, hot lists
  /// in slot order; the resolve table; every slot's recency and reference;
  /// the free stack, hand, excess and memo) and ends device ownership.
  /// Throws InputError for a state that does not fit the host's (wrong
  /// sizes, a hot row outside every live request's history, a hot or free
  /// slot that the host knows as a newest or ring slot, a newest row
  /// without a slot or two in one, counts that differ from the host's),
  /// StateError for appends not applied yet.
  void adoptDeviceState(std::int32_t group, const DeviceGroupState &state);
  /// adoptDeviceState(group, states[group]) for each of `groups` (distinct),
  /// the groups on parallel threads (parallelFor): the same tables as the
  /// calls one by one. Throws OutOfRangeError for a group that does not
  /// exist or has no state, before adopting any; otherwise the first error
  /// a group's adoption throws, once the groups begun were done: the groups
  /// not begun then, and a rejected one (its tables untouched), stay
  /// device-owned.
  void adoptDeviceStates(const std::vector<std::int32_t> &groups,
                         const std::vector<DeviceGroupState> &states);

  /// Checks every invariant of the bookkeeping (slot owners and kinds, the
  /// ring-slot bits, the resolve table, hot lists, the protected sets,
  /// budgets, free counts, host ranges) of the groups the host owns. Throws
  /// Error describing the first violation. O(slots + live history rows).
  void checkConsistency() const;

  /// Testing: CLOCK searches sweep every slot (the reference the candidate
  /// bits must agree with) instead of skipping those that cannot be victims.
  void setLinearClockForTesting(bool on) { linearClock_ = on; }

private:
  struct Group;
  struct Request;

  Request &liveRequest(std::int32_t request, const char *what);
  const Request &liveRequest(std::int32_t request, const char *what) const;
  std::int32_t hotSlotFor(Group &g, std::int32_t gi, std::int32_t request, bool force);
  std::int32_t findVictim(Group &g, std::int32_t gi, std::int32_t owner, bool force);
  std::int32_t clockVictim(Group &g, std::int32_t owner, bool force);
  void buildCandidates(Group &g);
  std::int32_t lruVictim(Group &g, std::int32_t gi, std::int32_t owner, bool force);
  bool isVictimCandidate(const Group &g, std::int32_t slot, std::int32_t owner, bool force) const;
  void place(Group &g, std::int32_t gi, std::int32_t slot, std::int32_t request, std::int32_t row,
             SlotKind kind, std::vector<RowCopy> *copies);
  void makeHot(Group &g, std::int32_t slot, bool mayBeOld);
  void evict(Group &g, std::int32_t slot);
  void promote(std::int32_t gi, std::vector<RowCopy> &copies);
  /// append's changes, its room made (reserveAppends).
  void appendReserved(std::int32_t request, std::vector<RowCopy> &copies);
  /// Makes room for `copyCount` copies in `copies` and `releaseCount`
  /// releases in the release log (which may be `copies` itself).
  void reserveChanges(std::vector<RowCopy> &copies, std::size_t copyCount,
                      std::size_t releaseCount);
  /// Makes room for the orders victim searches build: each group's LRU
  /// order (every slot).
  void reserveVictimSearches();
  /// The rows the end of the step in progress promotes at most for request
  /// `r` in group `gi` (0 outside a step).
  std::size_t promotionsDue(const Request &r, std::size_t gi) const;
  /// Makes room for `rows` more hot rows of request `r` in group `gi` (its
  /// hot list and, under the fixed policy, its own LRU order).
  void reserveHotRows(Request &r, std::size_t gi, std::size_t rows);
  void beginResolve(std::int32_t gi, std::int64_t batch, std::int64_t queries, std::int64_t topk);
  void touchSlot(Group &g, std::int32_t slot);
  Group &hostGroup(std::int32_t group, const char *what);
  const Group &hostGroup(std::int32_t group, const char *what) const;
  std::int64_t appendOnDevice(Group &g, bool aged, std::int64_t budget, std::size_t entry);
  /// The checks of applyDeviceAppends(group, slots) (throws), then the
  /// newest slots it takes; the shared record is trimmed by the caller.
  void takeAgedSlots(std::int32_t group, const std::vector<std::int32_t> &slots);
  /// Empties the shared record once no device-owned group has entries left
  /// in it.
  void trimAppendLog();
  /// markDeviceOwned's checks (throws), the room it makes (may throw
  /// std::bad_alloc, changes nothing the host reads), and what it does once
  /// both are done (allocates nothing).
  void checkDeviceOwnable(std::int32_t group) const;
  void makeHandOverRoom(std::int32_t group);
  void handOver(std::int32_t group);

  /// CLOCK: whether a slot was used since the hand last passed it.
  static bool referenced(const Group &g, std::int32_t slot);
  /// CLOCK: the hand passes a referenced slot (its second chance).
  static void clearReference(Group &g, std::int32_t slot);

  ResidencyConfig config_;
  HostRowAllocator host_;
  std::vector<Group> groups_;
  std::vector<Request> requests_;
  std::int32_t liveCount_ = 0;
  std::uint32_t step_ = 0;
  bool linearClock_ = false; // setLinearClockForTesting
  bool inStep_ = false;
  std::vector<std::uint8_t> resolved_; // per group, this step
  std::uint32_t markSerial_ = 0;       // resolve calls (duplicate requests)
  std::uint32_t seenSerial_ = 0;       // resolved lanes (distinct rows)
  ResidencyStepStats last_, totals_;
  ResidencyStepStats lastCompleted_;           // last_ before the step in progress
  std::int64_t evictions_ = 0;                 // all evictions
  std::vector<RowCopy> *releaseLog_ = nullptr; // see setReleaseLog
  std::int64_t pendingEvictions_ = 0;          // evictions since the last step ended
  std::vector<std::int64_t> bookScratch_;      // book(): the distinct misses
  // The appends recorded for device-owned groups, each once for all of them
  // (deviceAppends: group g's list is the entries from its appendsFrom on),
  // and where each entry's slot goes in a group's newestRing.
  std::vector<DeviceAppend> appendLog_;
  std::vector<std::size_t> appendLogRingAt_;
  // While a group is device-owned: each request's history length when the
  // first of them was handed over (the rings count rows from there).
  std::vector<std::int64_t> ringBase_;
};

} // namespace dhs::runtime

#endif // DHS_RUNTIME_RESIDENCY_RESIDENCY_H
