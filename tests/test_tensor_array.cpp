// Tensor arrays (ops/tensor_array.hpp) in graphs run by a session: chains of
// writes, reads and stacks, growth, gradients, errors that fail one step and
// leave the session usable, and the in-place writes that keep a chain of
// writes from copying the array.
#include <doctest/doctest.h>

#include "actors/session.hpp"
#include "core/gradients.hpp"
#include "ops/control_flow.hpp"
#include "ops/math.hpp"
#include "ops/reduce.hpp"
#include "ops/state.hpp"
#include "ops/tensor_array.hpp"
#include "schema/graph_io.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::error_of;

namespace {

tensor floats(std::vector<float> v) { return tensor::from_vector<float>(v); }
std::vector<float> values(const tensor& t) { return t.to_vector<float>(); }
tensor index(int32_t i) { return tensor::scalar<int32_t>(i); }

// Runs op on inputs it alone holds. Not run_kernel(op, {std::move(a), ...}):
// an initializer list is copied into the vector, and its own copies hold the
// buffers until the call returns.
std::vector<tensor> run_moved(const std::string& op, tensor& data, tensor& written,
                              std::vector<tensor> rest = {}, const attr_map& attrs = {}) {
  std::vector<tensor> inputs;
  inputs.push_back(std::move(data));
  inputs.push_back(std::move(written));
  for (auto& t : rest) inputs.push_back(std::move(t));
  return run_kernel(op, std::move(inputs), attrs);
}

struct three_rows {
  graph g;
  output x0 = placeholder(g, dtype::float32, {2}, "x0");
  output x1 = placeholder(g, dtype::float32, {2}, "x1");
  output x2 = placeholder(g, dtype::float32, {2}, "x2");
  feed_list feeds{{x0, floats({1, 2})}, {x1, floats({3, 4})}, {x2, floats({5, 6})}};
  tensor_array empty = make_tensor_array(g, dtype::float32, 3, {2}, false, "ta");

  // The array with x_i written at i, in the given order of i.
  tensor_array filled(std::vector<int32_t> order) {
    std::vector<output> xs{x0, x1, x2};
    tensor_array ta = empty;
    for (int32_t i : order) ta = ta.write(scalar(g, i), xs[static_cast<size_t>(i)]);
    return ta;
  }
};

}  // namespace

TEST_CASE("a chain of writes, then stack, read and size") {
  three_rows t;
  auto full = t.filled({2, 0, 1});  // out of order: the array does not care
  CHECK(full.data.dims() == shape{3, 2});
  CHECK(full.element_shape() == shape{2});
  session s(t.g);
  auto out = s.run(t.feeds, {full.stack(), full.read(scalar(t.g, int32_t{1})), full.size()});
  CHECK(out[0].dims() == shape{3, 2});
  CHECK(values(out[0]) == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(values(out[1]) == std::vector<float>{3, 4});
  CHECK(out[2].item<int32_t>() == 3);
}

TEST_CASE("a dynamic array grows past its initial size") {
  graph g;
  auto ta = make_tensor_array(g, dtype::float64, 0, {}, true, "grow");
  for (int32_t i = 0; i < 5; ++i)  // int32 and int64 indices alike
    ta = ta.write(i % 2 ? scalar(g, i) : scalar(g, int64_t{i}), scalar(g, 1.5 * i));
  session s(g);
  auto out = s.run({}, {ta.stack(), ta.size(), ta.data});
  CHECK(out[0].to_vector<double>() == std::vector<double>{0, 1.5, 3, 4.5, 6});
  CHECK(out[1].item<int32_t>() == 5);
  CHECK(out[2].dims() == shape{8});  // capacity 0, 1, 2, 4, 8: geometric
  // TensorFlow's size counts the initial size; the rows never written stack
  // as zeros, as TensorFlow's do.
  auto sized = make_tensor_array(g, dtype::float64, 3, {}, true, "sized");
  auto one = sized.write(scalar(g, int32_t{0}), scalar(g, 1.0));
  CHECK(s.eval(one.size()).item<int32_t>() == 3);
  CHECK(s.eval(one.stack()).to_vector<double>() == std::vector<double>{1, 0, 0});
}

// An empty array's buffers are none at all, as a tensor moved from has
// none: the write that moves its inputs out must find the array again in the
// next run (it found "data float32() and written bool()" before).
TEST_CASE("a write to an array made empty runs the same in every run") {
  for (bool dynamic : {true, false}) {
    for (int64_t rank : {0, 1}) {
      CAPTURE(dynamic);
      CAPTURE(rank);
      graph g;
      shape element = rank == 0 ? shape{} : shape{2};
      auto empty = make_tensor_array(g, dtype::float32, dynamic ? 0 : 1, element, dynamic, "dyn0");
      auto i = placeholder(g, dtype::int32, {}, "i");
      auto value = placeholder(g, dtype::float32, element, "value");
      auto written = empty.write(i, value);
      session s(g);
      tensor v = rank == 0 ? tensor::scalar<float>(1.5f) : floats({1, 2});
      for (int run = 0; run < 3; ++run) {
        CAPTURE(run);
        auto out = s.run({{i, index(0)}, {value, v}}, {written.stack()})[0];
        CHECK(out.dims() == (rank == 0 ? shape{1} : shape{1, 2}));
        CHECK(out.to_vector<float>() == v.to_vector<float>());
      }
    }
  }
}

// Constants from outside enter a cond's branches through switches; their
// values still inform shape inference there (a dynamic array's capacity
// after a write at a constant index).
TEST_CASE("a write at a constant index inside nested conds keeps the capacity known") {
  graph g;
  auto p = placeholder(g, dtype::boolean, {}, "p");
  auto q = placeholder(g, dtype::boolean, {}, "q");
  auto value = placeholder(g, dtype::float32, {2}, "value");
  auto ta = make_tensor_array(g, dtype::float32, 0, {2}, true, "dyn");
  auto at = scalar(g, int32_t{2});
  output data;
  auto rows = cond(
      p,
      [&] {
        return cond(
            q,
            [&] {
              auto w = ta.write(at, value);
              data = w.data;
              return w.stack();
            },
            [&] { return ta.write(at, value * 2.0f).stack(); }, "inner");
      },
      [&] { return ta.stack(); });
  CHECK_MESSAGE((data.dims() == shape{3, 2}), data.dims().to_string());
  session s(g);
  auto out = s.run(
      {{p, tensor::scalar<bool>(true)}, {q, tensor::scalar<bool>(true)}, {value, floats({1, 2})}},
      {rows})[0];
  CHECK(out.dims() == shape{3, 2});
  CHECK(values(out) == std::vector<float>{0, 0, 0, 0, 1, 2});
  out = s.run(
      {{p, tensor::scalar<bool>(false)}, {q, tensor::scalar<bool>(true)}, {value, floats({1, 2})}},
      {rows})[0];
  CHECK(out.dims() == shape{0, 2});
}

TEST_CASE("unstack, gather and scatter") {
  graph g;
  auto m = constant(g, tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2}));
  auto ta = unstack_to_tensor_array(m, "rows");
  auto picked = ta.gather(constant(g, tensor::from_vector<int32_t>({2, 0})));
  auto other = make_tensor_array(g, dtype::float32, 4, {2}, false, "other");
  auto filled = other.scatter(constant(g, tensor::from_vector<int64_t>({3, 1})), picked);
  session s(g);
  auto out = s.run({}, {picked, filled.read(scalar(g, int32_t{3})), ta.size(), filled.written});
  CHECK(values(out[0]) == std::vector<float>{5, 6, 1, 2});
  CHECK(values(out[1]) == std::vector<float>{5, 6});
  CHECK(out[2].item<int32_t>() == 3);
  CHECK(out[3].to_vector<bool>() == std::vector<bool>{false, true, false, true});
}

TEST_CASE("gradients flow through writes, reads and stack") {
  three_rows t;
  auto full = t.filled({0, 1, 2});
  auto w = constant(t.g, tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2}));
  // x1 reaches the loss twice: through the stack and through a read.
  auto loss = add(reduce_sum(mul(full.stack(), w)),
                  reduce_sum(mul(full.read(scalar(t.g, int32_t{1})), scalar(t.g, 10.0f))));
  auto grads = gradients({loss}, {t.x0, t.x1, t.x2});
  session s(t.g);
  auto out = s.run(t.feeds, {grads[0], grads[1], grads[2]});
  CHECK(values(out[0]) == std::vector<float>{1, 2});
  CHECK(values(out[1]) == std::vector<float>{13, 14});
  CHECK(values(out[2]) == std::vector<float>{5, 6});
}

TEST_CASE("indices never written read and stack as zeros, as TensorFlow's (twice)") {
  three_rows t;
  auto some = t.filled({0, 2});
  auto read = some.read(scalar(t.g, int32_t{1}));
  auto stacked = some.stack();
  auto gathered = some.gather(constant(t.g, tensor::from_vector<int32_t>({1, 2})));
  auto loss = add(reduce_sum(mul(stacked, stacked)), reduce_sum(gathered));
  auto grads = gradients({loss}, {t.x0, t.x2});
  session s(t.g);
  for (int run = 0; run < 2; ++run) {
    auto out = s.run(t.feeds, {read, stacked, gathered, grads[0], grads[1]});
    CHECK(values(out[0]) == std::vector<float>{0, 0});
    CHECK(values(out[1]) == std::vector<float>{1, 2, 0, 0, 5, 6});
    CHECK(values(out[2]) == std::vector<float>{0, 0, 5, 6});
    CHECK(values(out[3]) == std::vector<float>{2, 4});
    CHECK(values(out[4]) == std::vector<float>{11, 13});
  }
}

TEST_CASE("an error fails the step naming the node; the session stays usable") {
  three_rows t;
  auto i = placeholder(t.g, dtype::int32, {}, "i");
  auto once = t.empty.write(scalar(t.g, int32_t{1}), t.x1);
  auto twice = once.write(i, t.x2);
  auto read = once.read(i);
  session s(t.g);
  auto e = error_of([&] {
    s.run({{t.x1, floats({3, 4})}, {t.x2, floats({5, 6})}, {i, index(1)}}, {twice.stack()});
  });
  CHECK(e.find("node 'ta/write_1'") != std::string::npos);
  CHECK(e.find("tensor_array 'ta': index 1 was written twice") != std::string::npos);
  e = error_of([&] { s.run({{t.x1, floats({3, 4})}, {i, index(7)}}, {read}); });
  CHECK(e.find("node 'ta/read'") != std::string::npos);
  CHECK(e.find("read past the end: index 7, size 3") != std::string::npos);
  // The same session runs the same graph on good input.
  auto out = s.run({{t.x1, floats({3, 4})}, {i, index(1)}}, {read});
  CHECK(values(out[0]) == std::vector<float>{3, 4});
}

TEST_CASE("a graph of tensor arrays survives saving and loading") {
  graph g;
  auto ta = make_tensor_array(g, dtype::float32, 1, {}, true, "saved");
  ta = ta.write(scalar(g, int32_t{0}), scalar(g, 1.0f))
           .write(scalar(g, int32_t{2}), scalar(g, 3.0f));
  auto size = ta.size();
  auto loaded = deserialize_graph(serialize_graph(g), "test");
  session s(*loaded);
  auto out = s.run_by_name({}, {size.name(), ta.data.name(), ta.written.name()});
  CHECK(out[0].item<int32_t>() == 3);
  CHECK(values(out[1]) == std::vector<float>{1, 0, 3});
  CHECK(out[2].to_vector<bool>() == std::vector<bool>{true, false, true});
  // The array's name travels with its nodes, for the errors.
  auto twice = ta.write(scalar(g, int32_t{2}), scalar(g, 4.0f));
  loaded = deserialize_graph(serialize_graph(g), "test");
  session again(*loaded);
  CHECK(error_of([&] {
          again.run_by_name({}, {twice.data.name()});
        }).find("tensor_array 'saved': index 2 was written twice") != std::string::npos);
}

TEST_CASE("build-time checks") {
  graph g;
  auto ta = make_tensor_array(g, dtype::float32, 3, {2}, false, "ta");
  auto value = constant(g, tensor::from_vector<float>({1, 2}));
  CHECK(error_of([&] {
          ta.write(scalar(g, 1.0f), value);
        }).find("indices must be int32 or int64, got float32") != std::string::npos);
  CHECK(error_of([&] {
          ta.write(scalar(g, int32_t{0}), scalar(g, 1.0f));
        }).find("differs from the element") != std::string::npos);
  CHECK(error_of([&] {
          make_tensor_array(g, dtype::float32, 2, {-1, 3});
        }).find("element shape (?,3) must be fully defined") != std::string::npos);
  CHECK(error_of([&] { make_tensor_array(g, dtype::float32, -1, {}); }).find("is negative") !=
        std::string::npos);
}

TEST_CASE("writes to an unshared array happen in place") {
  tensor data = tensor::zeros(dtype::float32, {100, 4});
  tensor written = tensor::zeros(dtype::boolean, {100});
  const void* buffer = data.raw_data();
  tensor row = floats({1, 2, 3, 4});
  for (int32_t i = 0; i < 100; ++i) {
    auto out = run_moved("tensor_array_write", data, written, {index(i), row});
    data = std::move(out[0]);
    written = std::move(out[1]);
    CHECK(data.raw_data() == buffer);
  }
  // A stack of a full fixed array is the array: no copy either.
  tensor stacked = run_moved("tensor_array_stack", data, written)[0];
  CHECK(stacked.raw_data() == buffer);
  CHECK(stacked.flat<float>().sum() == doctest::Approx(1000));
}

TEST_CASE("a shared array is copied before a write (copy-on-write)") {
  tensor data = tensor::zeros(dtype::float32, {3, 1});
  tensor written = tensor::zeros(dtype::boolean, {3});
  tensor keep = data;  // another holder, as a second consumer would be
  auto out = run_moved("tensor_array_write", data, written, {index(0), floats({7})});
  CHECK(!out[0].shares_buffer_with(keep));
  CHECK(keep.to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK(out[0].to_vector<float>() == std::vector<float>{7, 0, 0});
}

TEST_CASE("a dynamic array reallocates O(log n) times over n writes") {
  tensor data = tensor::zeros(dtype::float32, {0, 2});
  tensor written = tensor::zeros(dtype::boolean, {0});
  tensor row = floats({1, 2});
  int reallocations = 0;
  for (int32_t i = 0; i < 1000; ++i) {
    const void* before = data.raw_data();
    auto out =
        run_moved("tensor_array_write", data, written, {index(i), row}, {{"dynamic_size", true}});
    reallocations += out[0].raw_data() != before;
    data = std::move(out[0]);
    written = std::move(out[1]);
  }
  CHECK(data.dims() == shape{1024, 2});
  CHECK(reallocations == 11);  // capacity 1, 2, 4, ..., 1024
}
