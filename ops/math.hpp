// Element-wise math: unary functions, the derivative helpers their gradients use,
// binary arithmetic and comparisons with NumPy broadcasting, logical ops, select
// and cast. TensorFlow semantics: every input of a binary op has one dtype (no
// implicit promotion); a mismatch throws naming both dtypes.
//
// Note: these names (exp, log, abs, ...) overload on `output`; inside namespace
// actorflow call the C library's versions as std::exp etc.
#pragma once
#include "core/export.hpp"
#include "core/graph.hpp"

namespace actorflow {

// ---- unary ------------------------------------------------------------------
// Float ops take float32/float64; neg, abs, square and sign also int32/int64;
// relu takes every numeric dtype. The output has the input's dtype and shape.
//
// Each element's result depends on its value alone, bit for bit: not on the
// tensor's size, the element's position or the thread that computed it (every
// element goes through the same SIMD code; tests/ops/unary_edge_cases.cpp).
// Special values follow TensorFlow: sqrt(inf) = inf, sqrt(-0) = -0,
// rsqrt(0) = inf, rsqrt(-0) = -inf, log(0) = -inf, log(-1) = NaN, exp(-inf) = 0,
// tanh(+-inf) = +-1, sigmoid(-inf) = 0, sign(-0) = 0, NaN in gives NaN out.
// Where actorflow deliberately differs from TensorFlow's CPU kernels:
//  - Denormals are numbers, as in IEEE arithmetic and the C library. TensorFlow
//    flushes float32 denormals to zero (inputs and results) in its thread pool:
//    sqrt(1e-40f) is 1e-20 here and 0 there, rsqrt(1e-40f) 1e20 against inf,
//    log(1e-40f) -92.1 against -inf or -104, exp(-100f) and sigmoid(-100f) 3.8e-44
//    against 0, relu(1e-40f) 1e-40 against 0 (at some sizes only).
//  - exp(x) for float32 x in (88.38, 88.72] is finite, as it is mathematically
//    (TensorFlow's Eigen gives inf).
//  - sqrt is the correctly rounded IEEE one; TensorFlow's may be 1 ulp off.
//  - relu(-0) is -0 (TensorFlow gives -0 or +0 depending on the tensor's size).

/// -x (integers wrap).
ACTORFLOW_API output neg(output x, const std::string& name = "");
/// |x| (integers wrap at the minimum).
ACTORFLOW_API output abs(output x, const std::string& name = "");
/// e^x.
ACTORFLOW_API output exp(output x, const std::string& name = "");
/// Natural logarithm.
ACTORFLOW_API output log(output x, const std::string& name = "");
/// Square root, correctly rounded.
ACTORFLOW_API output sqrt(output x, const std::string& name = "");
/// 1 / sqrt(x), within 3 ulp (an estimate refined by a Newton step, as TensorFlow's).
ACTORFLOW_API output rsqrt(output x, const std::string& name = "");
/// x * x.
ACTORFLOW_API output square(output x, const std::string& name = "");
/// -1, 0 or 1 (NaN stays NaN, -0 gives 0).
ACTORFLOW_API output sign(output x, const std::string& name = "");
/// 1 / x.
ACTORFLOW_API output reciprocal(output x, const std::string& name = "");
/// max(x, 0) (NaN stays NaN, -0 stays -0).
ACTORFLOW_API output relu(output x, const std::string& name = "");
/// 1 / (1 + e^-x).
ACTORFLOW_API output sigmoid(output x, const std::string& name = "");
/// Hyperbolic tangent.
ACTORFLOW_API output tanh(output x, const std::string& name = "");

// ---- derivative helpers (TensorFlow's *Grad ops) ------------------------------
// Both inputs share dtype and shape (no broadcasting); y is the forward output.

/// dy where x > 0, else 0 (every numeric dtype).
ACTORFLOW_API output relu_grad(output dy, output x, const std::string& name = "");
/// dy * y * (1 - y).
ACTORFLOW_API output sigmoid_grad(output y, output dy, const std::string& name = "");
/// dy * (1 - y * y).
ACTORFLOW_API output tanh_grad(output y, output dy, const std::string& name = "");
/// dy * 0.5 / y, with y = sqrt(x).
ACTORFLOW_API output sqrt_grad(output y, output dy, const std::string& name = "");
/// dy * -0.5 * y^3, with y = rsqrt(x).
ACTORFLOW_API output rsqrt_grad(output y, output dy, const std::string& name = "");
/// -dy * y * y, with y = 1 / x.
ACTORFLOW_API output reciprocal_grad(output y, output dy, const std::string& name = "");

// ---- binary, NumPy broadcasting ---------------------------------------------
// Numeric dtypes; both inputs of one dtype. Integer add/sub/mul wrap.

/// a + b.
ACTORFLOW_API output add(output a, output b, const std::string& name = "");
/// a - b.
ACTORFLOW_API output sub(output a, output b, const std::string& name = "");
/// a * b.
ACTORFLOW_API output mul(output a, output b, const std::string& name = "");
/// a / b; integers truncate toward zero, and an integer division by zero is an error.
ACTORFLOW_API output div(output a, output b, const std::string& name = "");
/// Element-wise maximum (NaN propagates).
ACTORFLOW_API output maximum(output a, output b, const std::string& name = "");
/// Element-wise minimum (NaN propagates).
ACTORFLOW_API output minimum(output a, output b, const std::string& name = "");
/// a ^ b; for integers a negative exponent is an error.
ACTORFLOW_API output pow(output a, output b, const std::string& name = "");

// ---- comparisons: bool output, broadcasting -----------------------------------
// equal / not_equal take every dtype (bool included); the orderings numeric ones.

ACTORFLOW_API output equal(output a, output b, const std::string& name = "");
ACTORFLOW_API output not_equal(output a, output b, const std::string& name = "");
ACTORFLOW_API output less(output a, output b, const std::string& name = "");
ACTORFLOW_API output less_equal(output a, output b, const std::string& name = "");
ACTORFLOW_API output greater(output a, output b, const std::string& name = "");
ACTORFLOW_API output greater_equal(output a, output b, const std::string& name = "");

// ---- logical (bool inputs) ----------------------------------------------------

/// a && b, broadcasting.
ACTORFLOW_API output logical_and(output a, output b, const std::string& name = "");
/// a || b, broadcasting.
ACTORFLOW_API output logical_or(output a, output b, const std::string& name = "");
/// !x.
ACTORFLOW_API output logical_not(output x, const std::string& name = "");

/// NumPy where: cond ? a : b element-wise; cond (bool), a and b broadcast together.
ACTORFLOW_API output select(output cond, output a, output b, const std::string& name = "");

/// Converts to `to` (any of the 6 dtypes). To bool: x != 0. Float to integer truncates
/// toward zero and saturates at the target's range (NaN becomes 0).
ACTORFLOW_API output cast(output x, dtype to, const std::string& name = "");

/// A scalar constant of x's dtype (value converted like cast) in x's graph.
ACTORFLOW_API output scalar_like(output x, double value, const std::string& name = "");

// ---- operators ----------------------------------------------------------------
// A double operand becomes a scalar constant of the other operand's dtype.

ACTORFLOW_API output operator+(output a, output b);
ACTORFLOW_API output operator-(output a, output b);
ACTORFLOW_API output operator*(output a, output b);
ACTORFLOW_API output operator/(output a, output b);
ACTORFLOW_API output operator-(output x);
ACTORFLOW_API output operator+(output a, double b);
ACTORFLOW_API output operator-(output a, double b);
ACTORFLOW_API output operator*(output a, double b);
ACTORFLOW_API output operator/(output a, double b);
ACTORFLOW_API output operator+(double a, output b);
ACTORFLOW_API output operator-(double a, output b);
ACTORFLOW_API output operator*(double a, output b);
ACTORFLOW_API output operator/(double a, output b);

}  // namespace actorflow
