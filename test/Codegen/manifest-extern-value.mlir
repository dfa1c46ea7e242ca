// An unlinked function that returns a value is declared in PTX with its
// return parameter before its name; the error still names the function.
// RUN: not dhs-compile %s --emit=manifest 2>&1 | FileCheck %s
module attributes {gpu.container_module} {
  gpu.binary @kernel [#gpu.object<#nvvm.target, assembly = ".version 8.1\0A.extern .func  (.param .b32 func_retval0) __nv_expf(\0A.param .b32 __nv_expf_param_0\0A);\0A">]
  func.func @step() {
    %c1 = arith.constant 1 : index
    // CHECK: manifest-extern-value.mlir:[[# @LINE + 1]]:5: error: 'gpu.launch_func' op kernel module @kernel calls a function that was not linked: __nv_expf{{$}}
    gpu.launch_func @kernel::@kernel blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
        {dhs.op = "topk", dhs.roles = []}
    return
  }
}
