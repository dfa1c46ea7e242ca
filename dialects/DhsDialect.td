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
    (the backing store); some rows are also resident in HBM slots. Ops take
    the selected row ids plus a slot map (the resident slot of each selected
    row, or -1) and compute attention exactly, whatever is resident.
  }];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  let dependentDialects = ["::mlir::memref::MemRefDialect"];
}

class Dhs_Op<string mnemonic, list<Trait> traits = []>
    : Op<Dhs_Dialect, mnemonic, traits>;

#endif // DHS_DIALECT_TD
