# -*- Python -*-
# The dhs lit suite: dialect (round-trip, errors), codegen (kernel IR, PTX,
# ptxas and nvJitLink on every emitted PTX) and tool behaviour.

import os

import lit.formats
from lit.llvm import llvm_config

config.name = "dhs"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "unit"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.dhs_obj_root, "test")

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.add_tool_substitutions(
    ["dhs-opt", "dhs-compile", "dhs-run", "dhs-decode"], [config.dhs_tools_dir]
)
config.substitutions.append(("%dhs_src", config.dhs_src_root))

# ptxas assembles every emitted kernel; it needs no GPU.
if config.ptxas and os.path.exists(config.ptxas):
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", config.ptxas))

# nvcc (beside ptxas) compiles the hand-written benchmark baselines.
nvcc = os.path.join(os.path.dirname(config.ptxas), "nvcc") if config.ptxas else ""
if nvcc and os.path.exists(nvcc):
    config.available_features.add("nvcc")
    config.substitutions.append(("%nvcc", nvcc))

# A machine with a usable NVIDIA driver runs the GPU paths instead of the
# no-GPU error paths.
if any(os.path.exists(os.path.join(d, "libcuda.so.1"))
       for d in ["/usr/lib/x86_64-linux-gnu", "/usr/local/nvidia/lib64",
                 "/usr/lib64", "/usr/local/cuda/compat"]):
    config.available_features.add("cuda-device")
