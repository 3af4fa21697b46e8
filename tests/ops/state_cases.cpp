// Cases for the source and identity ops; the variable ops run in test_session.
#include "ops/op_cases.hpp"

namespace actorflow::testing {
namespace {

const op_case_registrar cases({
    {.op = "constant",
     .label = "returns its value",
     .attrs = {{"value", make<float>({2}, {1.5f, -2.f})}},
     .expected = {make<float>({2}, {1.5f, -2.f})}},
    {.op = "identity",
     .label = "0-d int64",
     .inputs = {scalar_of<int64_t>(7)},
     .expected = {scalar_of<int64_t>(7)}},
    {.op = "identity",
     .label = "zero-size",
     .inputs = {tensor(dtype::float32, {0, 3})},
     .expected = {tensor(dtype::float32, {0, 3})}},
    {.op = "stop_gradient",
     .label = "passes its input through",
     .inputs = {make<float>({2}, {1.5f, -2.f})},
     .expected = {make<float>({2}, {1.5f, -2.f})}},
    {.op = "no_op", .label = "no outputs"},
    {.op = "identity", .label = "arity", .expect_error = "expects 1 inputs"},
});

}  // namespace
}  // namespace actorflow::testing
