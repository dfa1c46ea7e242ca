//===- DhsDialect.td - the dhs dialect definition ----------*- tablegen -*-===//
//
// The dhs dialect describes one decode step of sparse attention over a KV
// hierarchy: KV pools split into tiers (HBM slots, a pinned host store), row
// formats, and exact sparse attention over selected row ids.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_DIALECT_TD
#define DHS_DIALECT_TD

include "mlir/IR/OpBase.td"

def Dhs_Dialect : Dialect {
  let name = "dhs";
  let cppNamespace = "::mlir::dhs";
  let summary = "Decode-time sparse attention over a hierarchical KV store";
  let description = [{
    A `dhs` program describes one decode step of a long-context model whose
    attention reads, per query and layer, the top-k selected rows of the KV
    history. The history lives in tiers: every row is in a pinned host store
    (the backing store); some rows are also resident in HBM slots.

    - Row formats (`#dhs.mla_bf16`, `#dhs.mla_fp8`, `#dhs.v41_fp8`,
      `#dhs.gqa<...>`) give a row's bytes and how keys and values are read.
    - A `!dhs.kv_pool` holds the rows of one layer group (the layers that
      share one selection, as with IndexShare) in both tiers, a token's rows
      for all layers of the group side by side.
    - Selection (`dhs.topk`) and residency (`dhs.resolve`) produce row ids
      and the HBM slot of each (or -1); retrieval (`dhs.fetch`,
      `dhs.union_missing`) stages missing rows; attention reads resident rows
      from HBM and the rest from staging (`dhs.attention`) or from the host
      store directly (`dhs.sparse_attention`), exactly, whatever is resident.
    - Speculative decoding: `dhs.draft` (the drafter's KV in a ring bounded
      by a window), `dhs.verify` (gamma + 1 query positions per request) and
      `dhs.accept` (greedy or lossless rejection sampling).
    - Step-local buffers (`dhs.scratch`) live in one staging arena that the
      runtime owns and a pass plans.
  }];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  let dependentDialects = ["::mlir::memref::MemRefDialect"];

  // The attributes that code generation puts on other dialects' ops
  // (gpu.launch_func, func.func) for the manifest writer
  // (codegen/Manifest.cpp) to read back; missing rows are rows not in HBM.
  // Each has a helper, `dialect->get<Name>AttrHelper()`: getName, getAttr
  // and isAttrPresent (both check the type), setAttr, removeAttr; its static
  // getNameStr() is the name.
  let discardableAttrs = (ins
    // A launch's kind: the dhs op it runs (an abi::LaunchKind name).
    "::mlir::StringAttr":$op,
    // A launch's kernel parameter roles, in order (abi::ParamRole names).
    "::mlir::ArrayAttr":$roles,
    // An attention launch's layer within its pool's layer group.
    "::mlir::IntegerAttr":$layer,
    // A step function's staging arena: its bytes, slots and buffers.
    "::mlir::DictionaryAttr":$staging_plan,
    // A share_rows launch's rows per shared tile.
    "::mlir::IntegerAttr":$tile,
    // An attention launch's sliding window, in tokens.
    "::mlir::IntegerAttr":$window_size,
    // Marks a shared-prefix attention's unclustered launch (before its twin).
    "::mlir::UnitAttr":$unshared_requests,
    // An attention launch's softmax scale.
    "::mlir::FloatAttr":$softmax_scale,
    // The entry point of a launch kernel's resident form.
    "::mlir::StringAttr":$resident_kernel,
    // A launch the runtime starts as a programmatic dependent launch of the
    // launch before it (KernelSpec::dependentLaunch).
    "::mlir::UnitAttr":$dependent_launch,
    // Launches run in steps missing at most this share of rows (fused form).
    "::mlir::FloatAttr":$missing_up_to,
    // Launches run in steps missing more than this share of rows (staged).
    "::mlir::FloatAttr":$missing_above,
    // Prefix rows missing from HBM from which share_rows shares (absent: 0).
    "::mlir::IntegerAttr":$min_missing,
    // A copy_rows launch's direction (an abi::CopyDirection name).
    "::mlir::StringAttr":$direction
  );
}

class Dhs_Op<string mnemonic, list<Trait> traits = []>
    : Op<Dhs_Dialect, mnemonic, traits>;

#endif // DHS_DIALECT_TD
