// Element-wise math: unary functions, the derivative helpers their gradients use,
// binary arithmetic and comparisons with NumPy broadcasting, logical ops, select
// and cast. TensorFlow semantics: every input of a binary op has one dtype (no
// implicit promotion); a mismatch throws naming both dtypes.
//
// Note: these names (exp, log, abs, ...) overload on `output`; inside namespace
// actorflow call the C library's versions as std::exp etc.
#pragma once
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
output neg(output x, const std::string& name = "");
/// |x| (integers wrap at the minimum).
output abs(output x, const std::string& name = "");
/// e^x.
output exp(output x, const std::string& name = "");
/// Natural logarithm.
output log(output x, const std::string& name = "");
/// Square root, correctly rounded.
output sqrt(output x, const std::string& name = "");
/// 1 / sqrt(x), within 3 ulp (an estimate refined by a Newton step, as TensorFlow's).
output rsqrt(output x, const std::string& name = "");
/// x * x.
output square(output x, const std::string& name = "");
/// -1, 0 or 1 (NaN stays NaN, -0 gives 0).
output sign(output x, const std::string& name = "");
/// 1 / x.
output reciprocal(output x, const std::string& name = "");
/// max(x, 0) (NaN stays NaN, -0 stays -0).
output relu(output x, const std::string& name = "");
/// 1 / (1 + e^-x).
output sigmoid(output x, const std::string& name = "");
/// Hyperbolic tangent.
output tanh(output x, const std::string& name = "");

// ---- derivative helpers (TensorFlow's *Grad ops) ------------------------------
// Both inputs share dtype and shape (no broadcasting); y is the forward output.

/// dy where x > 0, else 0 (every numeric dtype).
output relu_grad(output dy, output x, const std::string& name = "");
/// dy * y * (1 - y).
output sigmoid_grad(output y, output dy, const std::string& name = "");
/// dy * (1 - y * y).
output tanh_grad(output y, output dy, const std::string& name = "");
/// dy * 0.5 / y, with y = sqrt(x).
output sqrt_grad(output y, output dy, const std::string& name = "");
/// dy * -0.5 * y^3, with y = rsqrt(x).
output rsqrt_grad(output y, output dy, const std::string& name = "");
/// -dy * y * y, with y = 1 / x.
output reciprocal_grad(output y, output dy, const std::string& name = "");

// ---- binary, NumPy broadcasting ---------------------------------------------
// Numeric dtypes; both inputs of one dtype. Integer add/sub/mul wrap.

/// a + b.
output add(output a, output b, const std::string& name = "");
/// a - b.
output sub(output a, output b, const std::string& name = "");
/// a * b.
output mul(output a, output b, const std::string& name = "");
/// a / b; integers truncate toward zero, and an integer division by zero is an error.
output div(output a, output b, const std::string& name = "");
/// Element-wise maximum (NaN propagates).
output maximum(output a, output b, const std::string& name = "");
/// Element-wise minimum (NaN propagates).
output minimum(output a, output b, const std::string& name = "");
/// a ^ b; for integers a negative exponent is an error.
output pow(output a, output b, const std::string& name = "");

// ---- comparisons: bool output, broadcasting -----------------------------------
// equal / not_equal take every dtype (bool included); the orderings numeric ones.

output equal(output a, output b, const std::string& name = "");
output not_equal(output a, output b, const std::string& name = "");
output less(output a, output b, const std::string& name = "");
output less_equal(output a, output b, const std::string& name = "");
output greater(output a, output b, const std::string& name = "");
output greater_equal(output a, output b, const std::string& name = "");

// ---- logical (bool inputs) ----------------------------------------------------

/// a && b, broadcasting.
output logical_and(output a, output b, const std::string& name = "");
/// a || b, broadcasting.
output logical_or(output a, output b, const std::string& name = "");
/// !x.
output logical_not(output x, const std::string& name = "");

/// NumPy where: cond ? a : b element-wise; cond (bool), a and b broadcast together.
output select(output cond, output a, output b, const std::string& name = "");

/// Converts to `to` (any of the 6 dtypes). To bool: x != 0. Float to integer truncates
/// toward zero and saturates at the target's range (NaN becomes 0).
output cast(output x, dtype to, const std::string& name = "");

/// A scalar constant of x's dtype (value converted like cast) in x's graph.
output scalar_like(output x, double value, const std::string& name = "");

// ---- operators ----------------------------------------------------------------
// A double operand becomes a scalar constant of the other operand's dtype.

output operator+(output a, output b);
output operator-(output a, output b);
output operator*(output a, output b);
output operator/(output a, output b);
output operator-(output x);
output operator+(output a, double b);
output operator-(output a, double b);
output operator*(output a, double b);
output operator/(output a, double b);
output operator+(double a, output b);
output operator-(double a, output b);
output operator*(double a, output b);
output operator/(double a, output b);

}  // namespace actorflow
