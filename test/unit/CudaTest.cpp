//===- CudaTest.cpp - The CUDA driver and a loaded step -------------------===//
//
// These tests pass on machines with and without a GPU: without one they
// check that the driver reports itself unavailable cleanly; with one they
// run the naive test step end to end.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "runtime/core/Error.h"
#include "runtime/core/Manifest.h"
#include "runtime/cpu/CpuAttention.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CudaQueue.h"
#include "runtime/cuda/CudaStep.h"
#include "runtime/cuda/JitLink.h"
#include "runtime/testing/ProblemGenerator.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <random>

using namespace dhs::runtime;

TEST_CASE("the CUDA driver loads or says why not", "[cuda]") {
  const CudaDriver &driver = CudaDriver::instance();
  CHECK(&driver == &CudaDriver::instance());
  if (!driver.available()) {
    INFO("reason: " << driver.unavailableReason());
    CHECK_FALSE(driver.unavailableReason().empty());
    CHECK(driver.deviceCount() == 0);
    CHECK_THROWS_WITH(driver.requireAvailable(), Catch::Contains(driver.unavailableReason()));
    // A step cannot be loaded, and says why.
    Manifest manifest = Manifest::load(dhs::test::stepsDir() + "/naive");
    CHECK_THROWS_WITH(CudaStep(manifest), Catch::Contains("CUDA is unavailable"));
    WARN("no usable CUDA driver here: " << driver.unavailableReason());
    return;
  }
  CHECK(driver.unavailableReason().empty());
  CHECK(driver.deviceCount() > 0);
  CHECK(driver.driverVersion() >= 12000);
  CHECK_NOTHROW(driver.requireAvailable());
  // Error formatting names the error.
  CHECK_THAT(driver.errorText(CUDA_ERROR_OUT_OF_MEMORY),
             Catch::Contains("CUDA_ERROR_OUT_OF_MEMORY"));
  CHECK_THROWS_WITH(driver.check(CUDA_ERROR_INVALID_VALUE, "cuFoo"),
                    Catch::StartsWith("cuFoo: CUDA_ERROR_INVALID_VALUE"));
}

TEST_CASE("device architectures", "[cuda]") {
  CHECK(archForDevice(9, 0) == "sm_90a");
  CHECK(archForDevice(8, 0) == "sm_80");
  CHECK(archForDevice(10, 0) == "sm_100");
  CHECK(archForDevice(12, 0) == "sm_120");
}

TEST_CASE("the naive step runs on the GPU and matches fp64", "[cuda][gpu]") {
  if (!CudaDriver::instance().available()) {
    WARN("SKIPPED: " << CudaDriver::instance().unavailableReason());
    return;
  }
  Manifest manifest = Manifest::load(dhs::test::stepsDir() + "/naive");
  CudaStep cudaStep(manifest);
  INFO("device " << cudaStep.device().name << " " << cudaStep.device().arch);
  REQUIRE(cudaStep.kernels().size() == 1);
  CHECK(cudaStep.kernels()[0].registers > 0);

  GeneratorOptions options;
  options.seed = dhs::test::freshSeed() + 21;
  INFO("DHS_TEST_SEED=" << dhs::test::freshSeed());
  options.unusedFraction = 0.1;
  SparseAttentionProblem problem = generateProblem(problemShapeFromManifest(manifest), options);
  std::vector<double> reference = CpuAttention(CpuPrecision::Double).runUnrounded(problem);
  CudaRunOptions runOptions;
  runOptions.repeat = 3;
  std::vector<bf16_t> first;
  for (double f : {0.0, 0.5, 1.0}) {
    INFO("residency " << f);
    applyResidency(problem, f, 21);
    CudaRunResult result = cudaStep.run(problem, runOptions);
    CHECK(compareOutputs(result.output, reference).relativeError < 1e-2);
    CHECK(result.repeatsIdentical);
    CHECK(result.timesMs.size() == 3);
    CHECK(result.medianMs > 0.0);
    if (first.empty())
      first = result.output;
    else
      CHECK(countBitDifferences(result.output, first) == 0);
  }

  // The kernel's own status checks, with host validation off.
  CudaRunOptions unchecked;
  unchecked.repeat = 0;
  unchecked.validateInputs = false;
  SparseAttentionProblem bad = problem;
  bad.rowIds[bad.selectionIndex(2, 0, 3)] = bad.historyLen[2];
  CHECK_THROWS_WITH(cudaStep.run(bad, unchecked),
                    Catch::Contains("status 0x1: row id outside its request's history"));
  // With validation on, the host rejects it first.
  CHECK_THROWS_AS(cudaStep.run(bad, runOptions), InputError);
  bad = problem;
  std::int64_t k = 0;
  while (bad.rowIds[bad.selectionIndex(1, 0, k)] == -1)
    ++k;
  bad.slots[bad.selectionIndex(1, 0, k)] = static_cast<std::int32_t>(bad.shape.hbmSlots);
  CHECK_THROWS_WITH(cudaStep.run(bad, unchecked), Catch::Contains("status 0x2"));

  // A problem of another shape is refused.
  SparseAttentionProblem other = generateProblem(dhs::test::smallShape(), options);
  CHECK_THROWS_WITH(cudaStep.run(other, runOptions), Catch::Contains("the problem's batch B is 2"));
}

/// Checks a run's output against the fp64 `reference`, its timed repeats
/// against it, and its bits against `first` (the first output checked,
/// kept there).
static void checkRun(const CudaRunResult &result, const std::vector<double> &reference,
                     std::vector<bf16_t> &first) {
  CHECK(compareOutputs(result.output, reference).relativeError < 1e-2);
  CHECK(result.repeatsIdentical);
  if (first.empty())
    first = result.output;
  else
    CHECK(countBitDifferences(result.output, first) == 0);
}

TEST_CASE("the fused FP8 step's two forms compute the same bits, chosen by the rows missing",
          "[cuda][gpu]") {
  // test/unit/steps/tensor_core_step.mlir: fused FP8 attention on the
  // tensor cores, whose attention launch has a resident form (its producer loads the
  // selections further ahead). Residency 1 and 0.996 (8 of 2048 rows
  // missing) run it, 0.9 and 0 the form that classifies rows ahead; every
  // output matches fp64 and all are the same bits.
  std::optional<Manifest> manifest = dhs::test::compiledStepOrSkip("tensor_core");
  if (!manifest)
    return;
  // (Split in two along the rows: a combine kernel, which has one form, merges them.)
  REQUIRE(manifest->launches.size() == 2);
  CHECK(manifest->launches[0].residentKernel == manifest->launches[0].kernel + "_resident");
  CHECK(manifest->launches[1].residentKernel.empty());
  if (!CudaDriver::instance().available()) {
    WARN("SKIPPED: " << CudaDriver::instance().unavailableReason());
    return;
  }
  CudaStep cudaStep(*manifest);
  // A resident kernel its PTX lacks is refused when the step loads.
  Manifest broken = *manifest;
  broken.launches[0].residentKernel = "no_such_kernel";
  CHECK_THROWS_WITH(CudaStep(broken),
                    Catch::Contains("resident kernel 'no_such_kernel' of launches[0] is not in"));
  GeneratorOptions options;
  options.seed = dhs::test::freshSeed();
  INFO("seed " << options.seed);
  options.unusedFraction = 0.05;
  SparseAttentionProblem problem = generateProblem(problemShapeFromManifest(*manifest), options);
  std::vector<double> reference = CpuAttention(CpuPrecision::Double).runUnrounded(problem);
  CudaRunOptions runOptions;
  runOptions.repeat = 2;
  std::vector<bf16_t> first;
  for (auto [fraction, resident] : {std::pair{1.0, true}, std::pair{0.9, false},
                                    std::pair{0.996, true}, std::pair{0.0, false}}) {
    INFO("residency " << fraction);
    applyResidency(problem, fraction, options.seed);
    CudaRunResult result = cudaStep.run(problem, runOptions);
    CHECK(result.residentForm == resident);
    checkRun(result, reference, first);
  }
  // An e4m3 NaN in a selected row makes the output NaN in either form, which
  // the step reports (a decode that maps 0x7f / 0xff to a finite value would
  // return garbage): bytes 0x7f and 0xff at the start, in the middle and at
  // the end of the row's 512.
  std::int64_t k = 0;
  while (problem.rowIds[problem.selectionIndex(1, 0, k)] == -1)
    ++k;
  auto *rowBytes = reinterpret_cast<std::uint8_t *>(
      problem.hostStore.data() +
      (problem.historyStart[1] + problem.rowIds[problem.selectionIndex(1, 0, k)]) *
          problem.shape.rowElems);
  for (auto [offset, nan] : {std::pair{0, 0x7f}, std::pair{301, 0xff}, std::pair{511, 0x7f}}) {
    std::uint8_t kept = rowBytes[offset];
    rowBytes[offset] = static_cast<std::uint8_t>(nan);
    for (double fraction : {1.0, 0.9}) { // the resident form, the other
      INFO("NaN at byte " << offset << ", residency " << fraction);
      applyResidency(problem, fraction, options.seed);
      CHECK_THROWS_WITH(cudaStep.run(problem, runOptions),
                        Catch::Contains("NaN or infinite output elements"));
    }
    rowBytes[offset] = kept;
  }
}

TEST_CASE("a layer group's kernels run alone: every layer matches fp64, fused and overlapped "
          "alike, in each form",
          "[cuda][gpu][overlap]") {
  // test/unit/steps/tensor_core_group_step.mlir (two FP8 layers over one
  // selection) as written and with --overlap-retrieval, run by CudaStep::run
  // on generated inputs: every layer attends the same queries, and the layer
  // the problem reads is checked, at residency 1, 0.5 and 0. The overlapped
  // step runs each of its forms at each residency (LaunchForms.h): the
  // resident and fused attentions, and the fetch of whole tokens beside both
  // staged attentions; and the form the problem's rows missing choose.
  std::optional<Manifest> fused = dhs::test::compiledStepOrSkip("tensor_core_group");
  std::optional<Manifest> overlapped =
      dhs::test::compiledStepOrSkip("tensor_core_group_overlapped");
  if (!fused || !overlapped)
    return;
  if (!CudaDriver::instance().available()) {
    WARN("SKIPPED: " << CudaDriver::instance().unavailableReason());
    return;
  }
  CudaStep fusedStep(*fused), overlappedStep(*overlapped);
  GeneratorOptions options;
  options.seed = dhs::test::freshSeed();
  INFO("seed " << options.seed);
  options.unusedFraction = 0.05;
  CudaRunOptions runOptions;
  runOptions.repeat = 3;
  for (std::int64_t layer : {0, 1}) {
    INFO("layer " << layer);
    ProblemShape shape = problemShapeFromManifest(*fused);
    shape.layer = layer;
    SparseAttentionProblem problem = generateProblem(shape, options);
    std::vector<double> reference = CpuAttention(CpuPrecision::Double).runUnrounded(problem);
    std::vector<bf16_t> first;
    for (double fraction : {1.0, 0.5, 0.0}) {
      INFO("residency " << fraction);
      applyResidency(problem, fraction, options.seed);
      checkRun(fusedStep.run(problem, runOptions), reference, first);
      for (double share : {0.02, 0.08, 1.0, -1.0}) {
        INFO("form share " << share);
        runOptions.missingShare = share;
        const CudaRunResult result = overlappedStep.run(problem, runOptions);
        checkRun(result, reference, first);
        if (share >= 0.0)
          CHECK(result.formShare == share);
        CHECK(result.residentForm == (result.formShare == 0.02));
        CHECK((result.fetchedRows >= 0) == (result.formShare == 1.0)); // the fetch ran
      }
      runOptions.missingShare = -1.0;
    }
  }
}

TEST_CASE("the host exchange moves each area in one copy and keeps parts across moves",
          "[cuda][gpu][exchange]") {
  if (!dhs::test::gpuOrSkip())
    return;
  using cuda_detail::HostExchange;
  using Direction = HostExchange::Direction;
  const CudaDriver &cuda = CudaDriver::instance();
  DeviceInfo device;
  cuda_detail::CudaQueue queue(device);
  HostExchange &x = queue.exchange();
  DHS_SEEDED_RNG(rng, 0);
  auto randomWords = [&](std::size_t n) {
    std::vector<std::uint32_t> words(n);
    for (std::uint32_t &w : words)
      w = static_cast<std::uint32_t>(rng());
    return words;
  };
  auto readMirror = [&](HostExchange::Part part, std::size_t n) {
    std::vector<std::uint32_t> words(n);
    cuda.check(cuda.memcpyDtoH(words.data(), x.mirror(part), n * 4), "reading a mirror");
    return words;
  };
  auto hostWords = [&](HostExchange::Part part, std::size_t n) {
    const auto *p = static_cast<const std::uint32_t *>(x.host(part));
    return std::vector<std::uint32_t>(p, p + n);
  };
  // Parts of odd sizes both ways; every new part is zero on both sides.
  const HostExchange::Part a = x.add(Direction::ToDevice, 20, "a");
  const HostExchange::Part b = x.add(Direction::ToHost, 36, "b");
  const HostExchange::Part c = x.add(Direction::ToDevice, 1000, "c");
  CHECK(hostWords(c, 250) == std::vector<std::uint32_t>(250, 0));
  CHECK(readMirror(b, 9) == std::vector<std::uint32_t>(9, 0));
  const std::vector<std::uint32_t> aWords = randomWords(5), cWords = randomWords(250),
                                   bWords = randomWords(9);
  std::memcpy(x.host(a), aWords.data(), 20);
  std::memcpy(x.host(c), cWords.data(), 1000);
  // To the device: both parts of the area in the one copy.
  x.enqueueToDevice(queue.stream());
  queue.synchronize("the copy to the device");
  CHECK(readMirror(a, 5) == aWords);
  CHECK(readMirror(c, 250) == cWords);
  // To the host: what the work wrote into the mirror.
  cuda.check(cuda.memcpyHtoD(x.mirror(b), bWords.data(), 36), "writing a mirror");
  x.enqueueToHost(queue.stream());
  queue.synchronize("the copy to the host");
  CHECK(hostWords(b, 9) == bWords);
  // Growing a part moves its area (a new generation) and keeps what every
  // part held, on the host and in the mirror; the new bytes are zero.
  const std::uint64_t generation = x.generation();
  x.resize(a, 4000);
  CHECK(x.generation() != generation);
  CHECK(x.bytes(a) == 4000);
  CHECK(hostWords(a, 5) == aWords);
  CHECK(hostWords(a, 1000) == [&] {
    std::vector<std::uint32_t> expected(1000, 0);
    std::copy(aWords.begin(), aWords.end(), expected.begin());
    return expected;
  }());
  CHECK(hostWords(c, 250) == cWords);
  CHECK(readMirror(c, 250) == cWords);
  CHECK(readMirror(a, 5) == aWords);
  CHECK(hostWords(b, 9) == bWords); // the other area is where it was
  // A host rewrite of a part copied back reaches the mirror only by
  // refreshMirror; otherwise the next copy back brings the old bytes.
  std::memset(x.host(b), 0, 36);
  x.enqueueToHost(queue.stream());
  queue.synchronize("the copy to the host");
  CHECK(hostWords(b, 9) == bWords);
  std::memset(x.host(b), 0, 36);
  x.refreshMirror(b);
  x.enqueueToHost(queue.stream());
  queue.synchronize("the copy to the host");
  CHECK(hostWords(b, 9) == std::vector<std::uint32_t>(9, 0));
  // A released part's bytes go at the next move; the others stay.
  x.release(c);
  const HostExchange::Part d = x.add(Direction::ToDevice, 8, "d");
  CHECK(x.bytes(c) == 0);
  CHECK(hostWords(a, 5) == aWords);
  CHECK(hostWords(d, 2) == std::vector<std::uint32_t>(2, 0));
}
