#pragma once
// Operand checks that every GPU backend makes the same way before its own limits: each returns
// "" when the node's operands suit the common kernels, else the reason for the report.
#include <string>

#include "graph/tensor.h"

namespace ps {

// F32 with contiguous rows (dimension 0 dense).
bool f32_rows(const Tensor& t);

// Element-wise ops, rope, rms_norm and softmax: F32 rows in and out (and for add, mul and
// swiglu a second F32 operand with contiguous rows).
std::string row_operands_problem(const Tensor& node);

// Attention: F32 queries and output with contiguous rows over F16 K and V caches of one layout
// with contiguous rows.
std::string attention_operands_problem(const Tensor& node);

// Attention's sinks (graph/ops.h), where it has them: contiguous F32 [n_head]. The CPU backend,
// whose caches may be F32 too, checks these alone.
std::string attention_sinks_problem(const Tensor& node);

// MatMul and GetRows: weights (or a table) in contiguous 2-D rows at even byte offsets (the
// 16-bit fields every decoder reads), an F32 output with contiguous rows, and 2-D F32
// activations with contiguous rows (matmul) or contiguous I32 ids (get_rows). Whether the
// weight type has a kernel is the backend's to say, before this.
std::string weights_operands_problem(const Tensor& node);

// Copy: an F32 source into an F32 or F16 destination.
std::string copy_operands_problem(const Tensor& node);

// The mixture-of-experts ops (graph/ops.h): top_k's F32 rows into contiguous I32 indices,
// expert_weights' F32 logits and contiguous I32 ids, expert_sum's F32 operands, matmul_id's
// experts in contiguous rows at even byte offsets (the 16-bit fields every decoder reads), F32
// activations and output, contiguous ids; whether the weight type has a kernel is the backend's.
std::string experts_operands_problem(const Tensor& node);

}  // namespace ps
