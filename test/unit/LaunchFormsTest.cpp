//===- LaunchFormsTest.cpp - Which of a step's launches run, by rows missing ===//
//
// A layer group's forms (runtime/core/LaunchForms.h): the share a step runs
// at from the rows it misses and the form its group ran last, the launches
// that run at it, and the plan of a step whose layers have several forms
// (the group step compiled with --overlap-retrieval: fused attentions up to
// 8% missing, one fetch and staged attentions above).
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "runtime/core/Error.h"
#include "runtime/core/LaunchForms.h"
#include "runtime/core/Manifest.h"
#include "runtime/core/StepPlan.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

using namespace dhs::runtime;
using nlohmann::json;

TEST_CASE("a step's form share: the least line at or above its rows missing, held just past "
          "the line above the form its group ran",
          "[forms]") {
  // The FP8 tensor-core step: its resident kernel up to 2%.
  const std::vector<double> resident = {kResidentFormMissing};
  CHECK(formShare(resident, missingShare(0, 2048)) == 0.02);
  CHECK(formShare(resident, missingShare(40, 2048)) == 0.02);
  CHECK(formShare(resident, missingShare(41, 2048)) == 1.0);
  // Not counted, or nothing selected: some rows missing, few.
  CHECK(missingShare(-1, 2048) == kUncountedMissing);
  CHECK(missingShare(0, 0) == kUncountedMissing);
  CHECK(formShare(resident, missingShare(-1, 2048)) == 1.0);
  // A group that ran the resident form keeps it up to 3%, where the forms
  // cross; one that did not takes it at 2% again.
  CHECK(formShare(resident, missingShare(61, 2048), 0.02) == 0.02);
  CHECK(formShare(resident, missingShare(62, 2048), 0.02) == 1.0);
  CHECK(formShare(resident, missingShare(41, 2048), 1.0) == 1.0);
  CHECK(formShare(resident, missingShare(40, 2048), 1.0) == 0.02);

  // A layer group's three forms: resident, fused up to 8%, staged above.
  const std::vector<double> group = {0.02, 0.08};
  CHECK(formShare(group, 0.05) == 0.08);
  CHECK(formShare(group, 0.08) == 0.08);
  CHECK(formShare(group, 0.0801) == 1.0);
  CHECK(formShare(group, 0.085, 0.08) == 0.08); // held by the margin
  CHECK(formShare(group, 0.091, 0.08) == 1.0);
  CHECK(formShare(group, 0.079, 1.0) == 0.08); // down at once
  CHECK(formShare(group, 0.01, 1.0) == 0.02);
  CHECK(formShare(group, 0.5, 0.02) == 1.0); // far past: no holding
  // A step of one form: always 1.
  CHECK(formShare({}, 0.0) == 1.0);
  CHECK(formShare({}, 0.5, 0.02) == 1.0);

  CHECK(describeForm(group, 0.02) == "rows missing up to 2%");
  CHECK(describeForm(group, 0.08) == "rows missing in (2%, 8%]");
  CHECK(describeForm(group, 1.0) == "rows missing above 8%");
  CHECK(describeForm({}, 1.0) == "every share of rows missing");
}

TEST_CASE("selections resolved on the device: a step is taken to miss what its group's last "
          "step missed",
          "[forms]") {
  // Nothing booked or decided yet: some rows missing, few.
  CHECK(lastStepShare(-1.0, false, -1.0) == kUncountedMissing);
  // Booked by the host from the group's log (no decision step).
  CHECK(lastStepShare(0.4, false, -1.0) == 0.4);
  // A decision step: its counts until the host books a log, and where the
  // device decided since the host's last booking.
  CHECK(lastStepShare(-1.0, false, 0.3) == 0.3);
  CHECK(lastStepShare(0.4, true, 0.3) == 0.3);
  CHECK(lastStepShare(0.4, false, 0.3) == 0.4);
  // The first step: all rows missed, so the next takes the staged form.
  const std::vector<double> group = {0.02, 0.14};
  CHECK(formShare(group, lastStepShare(-1.0, false, -1.0)) == 0.14);
  CHECK(formShare(group, lastStepShare(missingShare(270, 512), false, -1.0), 0.14) == 1.0);
}

TEST_CASE("a launch runs in its band of rows missing, its resident kernel up to 2%", "[forms]") {
  Launch fused, staged, always;
  fused.missingUpTo = 0.14;
  fused.residentKernel = "attention_resident";
  staged.missingAbove = 0.14;
  for (double share : {0.02, 0.14}) {
    CHECK(runsAt(fused, share));
    CHECK_FALSE(runsAt(staged, share));
    CHECK(runsAt(always, share));
  }
  CHECK_FALSE(runsAt(fused, 1.0));
  CHECK(runsAt(staged, 1.0));
  CHECK(runsAt(always, 1.0));
  CHECK(runsResidentAt(fused, 0.02));
  CHECK_FALSE(runsResidentAt(fused, 0.14));
  CHECK_FALSE(runsResidentAt(always, 0.02)); // no resident kernel
}

namespace {

/// The manifest JSON of the unit tests' group step compiled with
/// --overlap-retrieval, or null after saying that the test is skipped.
json groupStepJson() {
  const std::string path =
      dhs::test::compiledStepsDir() + "/tensor_core_group_overlapped/manifest.json";
  std::ifstream file(path);
  if (!file) {
    WARN("SKIPPED: " << path << " was not compiled (built without the compiler)");
    return nullptr;
  }
  std::stringstream text;
  text << file.rdbuf();
  return json::parse(text.str());
}

/// The plan of manifest JSON `j`, or the error planning it gives.
std::string planError(const json &j) {
  try {
    planStep(Manifest::parse(j.dump(), dhs::test::compiledStepsDir(), "manifest.json",
                             {/*requirePtx=*/false}));
  } catch (const Error &error) {
    return error.what();
  }
  return "";
}

} // namespace

TEST_CASE("a layer whose attention has forms is one layer, defined by its last form", "[forms]") {
  const json j = groupStepJson();
  if (j.is_null())
    return;
  const Manifest manifest = Manifest::parse(j.dump(), dhs::test::compiledStepsDir(),
                                            "manifest.json", {/*requirePtx=*/false});
  // Per layer: (the fetch of whole tokens, for the group's first layer), the
  // fused attention and its combine up to 8%, the staged attention and its
  // combine above.
  const StepPlan plan = planStep(manifest);
  REQUIRE(plan.layers.size() == 2);
  REQUIRE(plan.groups.size() == 1);
  const std::vector<Launch> &launches = manifest.launches;
  for (const StepLayerPlan &layer : plan.layers) {
    const Launch &defining = launches[layer.attentionLaunch];
    CHECK(defining.kind == abi::LaunchKind::Attention);
    CHECK(defining.missingAbove == 0.08);
    int fused = 0, staged = 0;
    for (std::size_t i = layer.firstLaunch; i < layer.endLaunch; ++i) {
      fused += launches[i].kind == abi::LaunchKind::SparseAttention && runsAt(launches[i], 0.08);
      staged += launches[i].isAttention() && runsAt(launches[i], 1.0);
    }
    CHECK(fused == 1);
    CHECK(staged == 1);
  }
  CHECK(launches[plan.layers[0].firstLaunch].kind == abi::LaunchKind::Fetch);
  CHECK(plan.layers[1].firstLaunch == plan.layers[0].endLaunch);
  CHECK(plan.layers[1].endLaunch == launches.size());
  CHECK(formLines(manifest, plan.layers[1].firstLaunch, plan.layers[1].endLaunch) ==
        std::vector<double>{0.02, 0.08});

  // Forms that leave a share without an attention, or that are not one
  // layer's, are refused.
  auto indexOf = [&](abi::LaunchKind kind, int layer) {
    for (std::size_t i = 0; i < launches.size(); ++i)
      if (launches[i].kind == kind && launches[i].layer == layer)
        return i;
    FAIL("no such launch");
    return std::size_t(0);
  };
  const std::size_t staged1 = indexOf(abi::LaunchKind::Attention, 1);
  const std::size_t fused1 = indexOf(abi::LaunchKind::SparseAttention, 1);
  json cut = j;
  cut["launches"].erase(cut["launches"].begin() + static_cast<std::ptrdiff_t>(staged1),
                        cut["launches"].end());
  CHECK_THAT(planError(cut), Catch::Contains("launches[" + std::to_string(fused1) +
                                             "] (sparse_attention) runs for rows missing up to "
                                             "8%") &&
                                 Catch::Contains("without a form of its layer above"));
  json gap = j;
  gap["launches"][staged1]["missing_above"] = 0.2;
  CHECK_THAT(planError(gap), Catch::Contains("is not its layer's form for the rows above"));
  json below = j;
  below["launches"][fused1].erase("missing_up_to");
  CHECK_THAT(planError(below), Catch::Contains("without a form of its layer below"));
  // Layer 0's staged attention writing layer 1's output.
  json otherOutput = j;
  const std::size_t staged0 = indexOf(abi::LaunchKind::Attention, 0);
  for (json &param : otherOutput["launches"][staged0]["params"])
    if (param["role"] == "output")
      param["index"] = plan.layers[1].output;
  CHECK_THAT(planError(otherOutput), Catch::Contains("is not its layer's form"));
}
