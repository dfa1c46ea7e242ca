// Lossless rejection-sampling acceptance of a verify step: 8 requests,
// gamma = 4, the drafter's and the target's distributions over 4096 tokens.
// Draft i is accepted with probability min(1, p(x) / q(x)); at the first
// rejection the next token is drawn from norm(max(0, p - q)), after gamma
// acceptances from the target's last distribution. Random numbers come from
// a counter-based generator keyed by (seed, step, position): reproducible.
//
//   dhs-compile examples/accept_sampling_step.mlir -o /tmp/accept_sampling
func.func @step(%draft: memref<8x4xi32>, %target: memref<8x5x4096xf32>,
                %draft_probs: memref<8x4x4096xf32>, %seeds: memref<8xi64>,
                %counter: memref<1xi64>, %accepted: memref<8xi32>,
                %next: memref<8xi32>) {
  dhs.accept rejection_sampling draft(%draft : memref<8x4xi32>)
      target(%target : memref<8x5x4096xf32>)
      draft_probs(%draft_probs : memref<8x4x4096xf32>)
      seeds(%seeds : memref<8xi64>) step(%counter : memref<1xi64>)
      into(%accepted, %next : memref<8xi32>, memref<8xi32>)
  return
}
