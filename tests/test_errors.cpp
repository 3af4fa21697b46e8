// Typed errors (core/error.hpp): each failure carries TensorFlow's status
// code beside its message, through kernels, resource actors and files, so
// that callers decide by code. Across processes: tests/test_distributed.cpp.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <new>

#include "actors/checkpoint.hpp"
#include "actors/session.hpp"
#include "ops/array.hpp"
#include "ops/control_flow.hpp"
#include "ops/math.hpp"
#include "ops/queue.hpp"
#include "ops/state.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::code_of_failure;

TEST_CASE("an error carries its code; fail() without one is invalid_argument") {
  CHECK(error("x").code() == error_code::invalid_argument);
  CHECK(error("x", error_code::data_loss).code() == error_code::data_loss);
  CHECK(code_of_failure([] { fail("op", "bad"); }) == error_code::invalid_argument);
  CHECK(code_of_failure([] { fail(error_code::unavailable, "op", "gone"); }) ==
        error_code::unavailable);
  CHECK(std::string(error_code_name(error_code::deadline_exceeded)) == "deadline_exceeded");
  CHECK(std::string(error_code_name(error_code::out_of_range)) == "out_of_range");
  // Codes from the wire or a file: anything outside the enum is unknown.
  CHECK(checked_error_code(15) == error_code::data_loss);
  CHECK(checked_error_code(17) == error_code::unknown);
  CHECK(checked_error_code(-1) == error_code::unknown);
  CHECK(code_of(std::bad_alloc()) == error_code::resource_exhausted);
  CHECK(code_of(std::runtime_error("x")) == error_code::unknown);
  CHECK(code_of(error("x", error_code::aborted)) == error_code::aborted);
}

TEST_CASE("a step's error has the code of the failure that stopped it") {
  graph g;
  auto v = make_variable(scalar(g, 1.0f), "v");
  auto x = placeholder(g, dtype::float32, {-1}, "x");
  auto bad_shape = reshape(x, {3}, "bad_shape");
  auto q = fifo_queue(g, {dtype::float32}, {shape{}}, 2, "q");
  auto take = queue_dequeue(q, "take")[0];
  auto put = queue_enqueue(q, {scalar(g, 1.0f)}, "put");
  auto close = queue_close(q, false, "close");
  auto counted = while_loop(
      [&](const std::vector<output>& i) { return less(i[0], scalar(g, 10)); },
      [&](const std::vector<output>& i) { return std::vector<output>{add(i[0], scalar(g, 1))}; },
      {scalar(g, 0)}, while_options{.max_iterations = 3});
  session s(g);
  // A variable read before it is set: the state is wrong, not the input.
  CHECK(code_of_failure([&] { s.eval(v); }) == error_code::failed_precondition);
  // A kernel's check of its input.
  CHECK(code_of_failure([&] {
          s.run({{x, tensor::from_vector<float>({1, 2, 3, 4}, {4})}}, {bad_shape});
        }) == error_code::invalid_argument);
  // A loop past its bound.
  CHECK(code_of_failure([&] { s.eval(counted[0]); }) == error_code::out_of_range);
  // The end of the input: a closed queue's dequeue once it is empty, and an
  // enqueue refused.
  s.run({put});
  s.run({close});
  CHECK(s.eval(take).item<float>() == 1.0f);
  CHECK(code_of_failure([&] { s.eval(take); }) == error_code::out_of_range);
  CHECK(code_of_failure([&] { s.run({put}); }) == error_code::cancelled);
}

TEST_CASE("a corrupted checkpoint is data_loss, a missing one not_found") {
  graph g;
  auto v = make_variable(scalar(g, 3.0f), "v");
  session s(g);
  s.run({v.initializer()});
  auto dir = std::filesystem::temp_directory_path() / "actorflow_error_codes";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto path = (dir / "ckpt").string();
  save_checkpoint(s, path, 1);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x5a');
  }
  CHECK(code_of_failure([&] { restore_checkpoint(s, path); }) == error_code::data_loss);
  CHECK(code_of_failure([&] { restore_checkpoint(s, (dir / "none").string()); }) ==
        error_code::not_found);
  std::filesystem::remove_all(dir);
}
