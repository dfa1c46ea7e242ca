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
}

class Dhs_Op<string mnemonic, list<Trait> traits = []>
    : Op<Dhs_Dialect, mnemonic, traits>;

#endif // DHS_DIALECT_TD
