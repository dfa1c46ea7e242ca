// Greedy acceptance of a verify step: 8 requests, gamma = 4 drafted tokens
// each, the target's distributions over a 32000-token vocabulary at the 5
// verified positions. Writes how many drafts each request accepts and the
// target's next token.
//
//   dhs-compile examples/accept_step.mlir -o /tmp/accept
func.func @step(%draft: memref<8x4xi32>, %target: memref<8x5x32000xf32>,
                %seeds: memref<8xi64>, %counter: memref<1xi64>,
                %accepted: memref<8xi32>, %next: memref<8xi32>) {
  dhs.accept greedy draft(%draft : memref<8x4xi32>)
      target(%target : memref<8x5x32000xf32>)
      seeds(%seeds : memref<8xi64>) step(%counter : memref<1xi64>)
      into(%accepted, %next : memref<8xi32>, memref<8xi32>)
  return
}
