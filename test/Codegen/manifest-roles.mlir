// The manifest gives step arguments the roles of the kernel parameters they
// are passed as (each launch's dhs.roles, from its kernel's signature), and
// rejects launches whose roles do not fit what they pass.
// RUN: dhs-compile %s --emit=manifest --step=rows | FileCheck %s
// RUN: not dhs-compile %s --emit=manifest --step=no_roles 2>&1 | FileCheck %s --check-prefix=NOROLES
// RUN: not dhs-compile %s --emit=manifest --step=unknown_role 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not dhs-compile %s --emit=manifest --step=local_role 2>&1 | FileCheck %s --check-prefix=LOCAL
// RUN: not dhs-compile %s --emit=manifest --step=two_roles 2>&1 | FileCheck %s --check-prefix=TWO

// Both uses of rows by a copy make a rows argument.
// CHECK: "arguments": [
// CHECK: "role": "rows"
// CHECK: "role": "rows"
// CHECK: "op": "copy_rows"

// NOROLES: error: 'gpu.launch_func' op needs dhs.roles, one role per kernel operand
// UNKNOWN: error: 'gpu.launch_func' op has an unknown kernel parameter role "keys" (known: queries, row_ids,
// LOCAL: error: 'gpu.launch_func' op operand #0 comes from source argument, which the kernel's staging parameter does not take
// TWO: error: 'gpu.launch_func' op step argument #0 is used both as row_ids and as slots

module attributes {gpu.container_module} {
  gpu.module @copy {
    gpu.func @copy(%a: memref<4x2x1x16xi8>, %b: memref<4x2x1x16xi8>) kernel {
      gpu.return
    }
  }
  gpu.module @one {
    gpu.func @one(%a: memref<4xi32>) kernel {
      gpu.return
    }
  }

  func.func @rows(%a: memref<4x2x1x16xi8>, %b: memref<4x2x1x16xi8>) {
    %c1 = arith.constant 1 : index
    gpu.launch_func @copy::@copy blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
        args(%a : memref<4x2x1x16xi8>, %b : memref<4x2x1x16xi8>)
        {dhs.op = "copy_rows", dhs.direction = "scatter",
         dhs.roles = ["copy_source", "copy_destination"]}
    return
  }

  func.func @no_roles(%a: memref<4xi32>) {
    %c1 = arith.constant 1 : index
    gpu.launch_func @one::@one blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
        args(%a : memref<4xi32>) {dhs.op = "topk"}
    return
  }

  func.func @unknown_role(%a: memref<4xi32>) {
    %c1 = arith.constant 1 : index
    gpu.launch_func @one::@one blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
        args(%a : memref<4xi32>) {dhs.op = "topk", dhs.roles = ["keys"]}
    return
  }

  func.func @local_role(%a: memref<4xi32>) {
    %c1 = arith.constant 1 : index
    gpu.launch_func @one::@one blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
        args(%a : memref<4xi32>) {dhs.op = "fetch", dhs.roles = ["staging"]}
    return
  }

  func.func @two_roles(%a: memref<4xi32>) {
    %c1 = arith.constant 1 : index
    gpu.launch_func @one::@one blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
        args(%a : memref<4xi32>) {dhs.op = "topk", dhs.roles = ["row_ids"]}
    gpu.launch_func @one::@one blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
        args(%a : memref<4xi32>) {dhs.op = "topk", dhs.roles = ["slots"]}
    return
  }
}
