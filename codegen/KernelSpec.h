//===- KernelSpec.h - what a kernel builder declares ------------*- C++ -*-===//
//
// What a kernel builder declares (kind, parameters by role, geometry, body
// emitter) and dhs-lower-to-gpu generates and launches (docs/compiler.md).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_CODEGEN_KERNELSPEC_H
#define DHS_CODEGEN_KERNELSPEC_H

#include "dialects/DhsDialect.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/ADT/StringExtras.h"

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <utility>

namespace mlir::dhs {

/// What follows a kernel op's "needs static shapes" error: where static
/// shapes come from.
inline constexpr const char *kStaticShapesHint =
    " (fold a serving configuration into a step written for any shape: dhs-compile "
    "--requests, --positions, --heads, --topk and --hbm-slots, or dhs-specialize)";

/// A kernel to launch: its grid, block and dynamic shared memory.
struct KernelGeometry {
  std::array<int64_t, 3> grid{1, 1, 1};
  std::array<int64_t, 3> block{1, 1, 1};
  int64_t dynamicSharedBytes = 0;
};

/// One kernel parameter: what it is (runtime/abi/Roles.def) and its type.
struct KernelParam {
  abi::ParamRole role;
  Type type;
};

/// A kernel's parameters in order, each role at most once.
class KernelSignature {
public:
  /// Declares the next parameter.
  void add(abi::ParamRole role, Type type) {
    assert(!find(role) && "a kernel takes each role once");
    params.push_back({role, type});
  }
  ArrayRef<KernelParam> getParams() const { return params; }
  /// The gpu.func's argument types.
  SmallVector<Type> getTypes() const {
    return llvm::map_to_vector(params, [](const KernelParam &p) { return p.type; });
  }
  /// The position of `role`, if the kernel takes it.
  std::optional<unsigned> find(abi::ParamRole role) const {
    for (auto [i, param] : llvm::enumerate(params))
      if (param.role == role)
        return i;
    return std::nullopt;
  }
  /// The roles in order, as a launch carries them (dhs.roles).
  ArrayAttr getRolesAttr(MLIRContext *context) const {
    return ArrayAttr::get(context,
                          llvm::map_to_vector(params, [&](const KernelParam &p) -> Attribute {
                            return StringAttr::get(context, abi::name(p.role));
                          }));
  }

private:
  SmallVector<KernelParam> params;
};

/// A kernel's arguments by role, for the code that emits its body: the
/// gpu.func's arguments, or the buffers of the CTA's group in a grouped
/// kernel (`values`, one per parameter).
class KernelArguments {
public:
  KernelArguments(gpu::GPUFuncOp func, const KernelSignature &signature,
                  SmallVector<Value> values = {})
      : func(func), signature(signature), values(std::move(values)) {}
  /// The argument of `role`, which the kernel takes.
  Value operator[](abi::ParamRole role) const {
    Value value = lookup(role);
    assert(value && "the kernel does not take this role");
    return value;
  }
  /// The argument of `role`, or null when the kernel does not take it.
  Value lookup(abi::ParamRole role) const {
    std::optional<unsigned> position = signature.find(role);
    if (!position)
      return Value();
    return values.empty() ? Value(func.getArgument(*position)) : values[*position];
  }
  /// The `i`-th shared-memory buffer of KernelSpec::workgroup.
  Value workgroup(unsigned i) const { return func.getWorkgroupAttributions()[i]; }

private:
  mutable gpu::GPUFuncOp func;
  const KernelSignature &signature;
  SmallVector<Value> values;
};

/// Types of the runtime-owned buffers as kernels take them: a tier of `pool`
/// ([?, layers, row bytes] x i8), the residency map (?xi32), the replacement
/// state (?x2xi32), the step log (?xi32) and the step status (1xi32).
inline MemRefType getTierType(KVPoolType pool) {
  return MemRefType::get({ShapedType::kDynamic, pool.getLayers(), pool.getFormat().getRowBytes()},
                         IntegerType::get(pool.getContext(), 8));
}
inline MemRefType getResidencyMapType(MLIRContext *context) {
  return MemRefType::get({ShapedType::kDynamic}, IntegerType::get(context, 32));
}
inline MemRefType getReplacementStateType(MLIRContext *context) {
  return MemRefType::get({ShapedType::kDynamic, 2}, IntegerType::get(context, 32));
}
inline MemRefType getStepLogType(MLIRContext *context) {
  return MemRefType::get({ShapedType::kDynamic}, IntegerType::get(context, 32));
}
inline MemRefType getStatusType(MLIRContext *context) {
  return MemRefType::get({1}, IntegerType::get(context, 32));
}
/// The type of a grouped launch's table (dhs.group_bindings): a kernel
/// that takes it runs a CTA per group along the grid's z.
inline MemRefType getGroupBindingsType(MLIRContext *context) {
  return MemRefType::get({ShapedType::kDynamic, ShapedType::kDynamic},
                         IntegerType::get(context, 64));
}

/// A kernel key: `parts` printed, separated by '/'.
template <typename... Parts> std::string kernelKey(const Parts &...parts) {
  std::string key;
  llvm::raw_string_ostream os(key);
  llvm::ListSeparator separator("/");
  ((os << separator << parts), ...);
  return key;
}

/// Everything dhs-lower-to-gpu needs to generate a kernel and launch it.
struct KernelSpec {
  KernelSpec(abi::LaunchKind kind, std::string key) : kind(kind), key(std::move(key)) {}

  /// What the runtime calls the launch; names the kernel and its PTX file.
  abi::LaunchKind kind;
  /// Everything the generated code depends on besides the kind: launches
  /// of equal kind and key share one kernel.
  std::string key;
  KernelSignature signature;
  KernelGeometry geometry;
  /// Static shared-memory buffers (gpu.func workgroup attributions).
  SmallVector<Type> workgroup;
  /// CTAs the kernel must fit on one SM at least (nvvm.minctasm; 0: no
  /// bound). With the block size it fixes the registers a thread starts with,
  /// which setmaxnreg needs.
  int64_t minBlocksPerSM = 0;
  /// CTAs of a cluster (nvvm.cluster_dim, PTX .reqnctapercluster: the driver
  /// launches the grid in clusters of this shape); {1, 1, 1}: no cluster.
  std::array<int64_t, 3> cluster{1, 1, 1};
  /// The kernel synchronizes with the launch before it itself (waits for it
  /// with griddepcontrol.wait before it reads what that launch wrote, or on
  /// its ready flags), so the runtime starts it as a programmatic dependent
  /// launch: its CTAs may start while that launch's last ones run
  /// (manifest: `dependent_launch`).
  bool dependentLaunch = false;
  /// Emits the body at the entry of the kernel's gpu.func.
  std::function<void(ImplicitLocOpBuilder &, const KernelArguments &)> emitBody;
  /// Where set, the body of a second kernel of the same launch (same
  /// signature and geometry) that is faster when every row the launch
  /// reads is resident in HBM and slower when rows come from the host: it
  /// is generated beside the kernel as `<kernel>_resident`, and the runtime
  /// launches one of the two each step, by the rows it expects from the
  /// host (manifest: `resident_kernel`).
  std::function<void(ImplicitLocOpBuilder &, const KernelArguments &)> emitResidentBody;
};

} // namespace mlir::dhs

#endif // DHS_CODEGEN_KERNELSPEC_H
