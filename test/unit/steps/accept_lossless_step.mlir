// The lossless-sampling check of the generated rejection-sampling kernel
// (AcceptTest, AcceptLossless.h): 100000 verify blocks a launch (one CTA
// each), gamma = 2, 6 tokens. Ten launches make the test's 10^6 blocks, one
// more its 10^5 blocks of no drafts.
func.func @step(%draft: memref<100000x2xi32>, %target: memref<100000x3x6xf32>,
                %draft_probs: memref<100000x2x6xf32>, %seeds: memref<100000xi64>,
                %counter: memref<1xi64>, %accepted: memref<100000xi32>,
                %next: memref<100000xi32>) {
  dhs.accept rejection_sampling draft(%draft : memref<100000x2xi32>)
      target(%target : memref<100000x3x6xf32>)
      draft_probs(%draft_probs : memref<100000x2x6xf32>)
      seeds(%seeds : memref<100000xi64>) step(%counter : memref<1xi64>)
      into(%accepted, %next : memref<100000xi32>, memref<100000xi32>)
  return
}
