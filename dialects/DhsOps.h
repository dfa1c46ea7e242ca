//===- DhsOps.h - dhs operations --------------------------------*- C++ -*-===//

#ifndef DHS_DIALECTS_DHSOPS_H
#define DHS_DIALECTS_DHSOPS_H

#include "dialects/DhsDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "dialects/DhsOps.h.inc"

#endif // DHS_DIALECTS_DHSOPS_H
