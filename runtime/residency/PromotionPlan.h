//===- PromotionPlan.h - A step's promotion decisions as one plan -*- C++ -*-===//
//
// The decisions of a dhs.plan_promotions launch (CLOCK; the op's description
// gives the rule) over one group's device residency state, made on the host:
// the reference the generated kernel is tested against and the packing of
// the kernel's inputs from a residency controller. Nothing here runs in the
// executor yet: the controller still makes the decisions at a step's end.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_RESIDENCY_PROMOTIONPLAN_H
#define DHS_RUNTIME_RESIDENCY_PROMOTIONPLAN_H

#include "runtime/abi/Contract.h"
#include "runtime/residency/Residency.h"

#include <array>
#include <cstdint>
#include <vector>

namespace dhs::runtime {

class ResidencyController;

/// One group's residency state and a step's fetched rows, as the buffers of
/// a plan_promotions launch hold them (roles fetched_rows, history_start,
/// hot_rows, clock_cleared, free_stack, promotion_control, and the pool's
/// replacement state and step number).
struct PromotionPlanState {
  std::int64_t lanes = 0, listed = 0;     ///< B requests, N fetched rows each at most
  std::int64_t perLane = -1;              ///< the op's `promotions` (-1: none)
  std::vector<std::int32_t> fetched;      ///< [B x N] row ids ascending, -1 ends a lane
  std::vector<std::int64_t> historyStart; ///< [B]
  std::vector<std::int64_t> hotRows;      ///< [slots] host row of a hot slot, -1
  std::vector<std::int32_t> cleared;      ///< [slots] last use the hand cleared
  std::vector<std::int32_t> freeStack;    ///< [slots] the next slot to hand out last
  std::vector<std::int32_t> recency;      ///< [slots x 2] last and previous use
  std::array<std::int32_t, dhs_abi::PromotionPlanLayout::kWords> control{}; ///< in and out
  std::uint32_t step = 0;   ///< the step log's word 0
  std::uint32_t status = 0; ///< the step's status word at the launch (non-zero: plan nothing)
};

/// A plan's list ([2 x B x N] entries, PromotionPlanLayout): what a
/// place_rows launch carries out.
struct PromotionPlanList {
  std::vector<std::int64_t> rows;
  std::vector<std::int32_t> slots;
};

/// Makes the plan as the generated kernel does: returns the list, updates
/// `state` (hot rows, cleared stamps, control words) and returns the status
/// bits the kernel would set (kStatusBadSlot for bad control words or a
/// free-stack slot outside the table). With `state.status` non-zero it
/// plans nothing (the counts 0, the list all -1, the state unchanged).
std::uint32_t planPromotions(PromotionPlanState &state, PromotionPlanList &list);

/// Packs group `group` of `controller` in a step (after its selections were
/// resolved or booked) with the fetched rows `fetched[b]` of lane b's
/// request `requests[b]` (-1: an empty lane) into the launch's inputs, N =
/// `listed` rows a lane (each lane's rows sorted; throws InputError when a
/// lane has more). Referenced slots get cleared = ~0 (no use equals it).
/// The control words in: the hand, the free count, the budget (optional
/// budget - excess), the excess and the group's noVictimStep memo
/// (exportDeviceState's; while a step runs it cannot hold the step: only
/// non-forced searches set it, and none runs between beginStep and the
/// step's promotions).
PromotionPlanState packPromotionPlan(const ResidencyController &controller, std::int32_t group,
                                     const std::vector<std::int32_t> &requests,
                                     const std::vector<std::vector<std::int32_t>> &fetched,
                                     std::int64_t listed);

//===----------------------------------------------------------------------===//
// Appends between steps (dhs.age_rows)
//===----------------------------------------------------------------------===//

/// What a dhs.age_rows launch reads and updates: one group's device state,
/// its residency map and the optional budget.
struct AgeRowsState {
  DeviceGroupState group;        ///< hot rows, references, free stack, recency, words
  std::vector<std::int32_t> map; ///< [host rows] slot of each host row, -1
  std::int64_t budget = 0;       ///< optional budget (excess may reach it)
};

/// Replays the appends recorded for a device-owned group, in call order, as
/// the controller's append does them (adaptive, CLOCK, hot floor 0), over
/// `state`: per append, the aged row's slot becomes hot (the victim-search
/// memo is reset when its request held no hot row); over the budget
/// (excess > budget) a non-forced CLOCK search from the hand (candidates:
/// hot, last use < the step; none at all while the memo holds the step,
/// which a failed search sets) picks a victim, or else the aged row itself
/// leaves; then the new row takes the free stack's top (the released slot,
/// when one was released), is mapped, referenced and stamped [step, 0].
/// Writes `list` ([2 x N] for N appends) for dhs.place_rows: entry i is
/// (append i's new row, its slot after the list) or (-1, -1) when it left
/// HBM again; entry N + i is (the row append i released, -1) or (-1, -1).
/// Returns kStatusBadSlot for bad words (hand, free count), an aged row
/// without a newest slot or an empty free stack (that append is skipped),
/// kStatusBadHostRow for a row outside the map.
std::uint32_t planAgeRows(AgeRowsState &state, DeviceAppendList appends, PromotionPlanList &list);

} // namespace dhs::runtime

#endif // DHS_RUNTIME_RESIDENCY_PROMOTIONPLAN_H
