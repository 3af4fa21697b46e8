// Tensors, shapes, dtypes and the graph builder.
#include <doctest/doctest.h>
#include <malloc.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "core/graph.hpp"
#include "core/large_blocks.hpp"
#include "ops/state.hpp"

using namespace actorflow;

TEST_CASE("tensor basics") {
  auto t = tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(t.num_elements() == 6);
  CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % 64 == 0);
  CHECK(t.matrix<float>()(1, 2) == 6);
  CHECK(t.to_string() == "tensor<float32 (2,3)> [[1, 2, 3], [4, 5, 6]]");
  CHECK_THROWS_WITH_AS(t.data<int32_t>(), "[tensor] accessed as int32 but holds float32", error);
  auto s = tensor::scalar<bool>(true);
  CHECK(s.rank() == 0);
  CHECK(s.to_string() == "tensor<bool ()> true");
  auto z = tensor::zeros(dtype::int64, {3, 0});
  CHECK(z.num_elements() == 0);
  CHECK(z.to_string() == "tensor<int64 (3,0)> [[], [], []]");
  auto c = t.clone();
  CHECK(c.equals(t));
  CHECK_FALSE(c.shares_buffer_with(t));
  CHECK(t.reshaped({3, 2}).shares_buffer_with(t));
  // An empty tensor holds no buffer, and shares none: not with another
  // empty one, not with what is left of one moved from.
  CHECK_FALSE(z.shares_buffer_with(tensor::zeros(dtype::int64, {0})));
  auto moved = z;
  auto taken = std::move(moved);
  CHECK_FALSE(moved.shares_buffer_with(z));
  CHECK_THROWS_AS(t.reshaped({4}), error);
  CHECK_THROWS_AS(tensor(dtype::float32, {-1, 2}), error);
  CHECK_THROWS_AS(tensor(dtype::float32, {int64_t{1} << 40, int64_t{1} << 30}), error);
}

TEST_CASE("large tensor buffers are recycled, up to a bound") {
  const int64_t n = int64_t{40} << 18;      // 40 MiB of float32: above the threshold
  const size_t rounded = size_t{42} << 20;  // with the header, rounded up to 2 MiB
  size_t before = large_blocks::cached_bytes();
  const void* first = nullptr;
  {
    tensor a(dtype::float32, {n});
    first = a.raw_data();
    CHECK(reinterpret_cast<uintptr_t>(first) % 64 == 0);
    a.mutable_data<float>()[n - 1] = 3.0f;  // the whole block is usable
    CHECK(a.data<float>()[n - 1] == 3.0f);
  }
  CHECK(large_blocks::cached_bytes() == before + rounded);
  {
    tensor b(dtype::float32, {n});  // the same size reuses the block just freed
    CHECK(b.raw_data() == first);
    CHECK(large_blocks::cached_bytes() == before);
    tensor c(dtype::float32, {n / 2 * 3});  // another size does not
    CHECK(c.raw_data() != first);
  }
  // More than the bound given back at once: the oldest are freed. (The
  // pages are never touched, so this costs address space, not memory.)
  {
    std::vector<tensor> many;
    for (int i = 0; i < 32; ++i) many.emplace_back(dtype::float32, shape{n});
  }
  CHECK(large_blocks::cached_bytes() <= large_blocks::max_cached_bytes);
  CHECK(large_blocks::cached_bytes() > large_blocks::max_cached_bytes - rounded * 2);
}

TEST_CASE("tensor buffers: reference counts, small and large, across threads") {
  auto a = tensor::scalar(1.5f);
  CHECK(a.is_unique());
  tensor b = a;
  CHECK_FALSE(a.is_unique());
  CHECK(b.shares_buffer_with(a));
  b = tensor();
  CHECK(a.is_unique());
  tensor moved = std::move(a);
  CHECK(moved.item<float>() == 1.5f);
  CHECK(moved.is_unique());
  // Small buffers are recycled per thread; a buffer freed on another thread
  // joins that thread's list. Both kinds stay 64-byte aligned.
  std::vector<tensor> made;
  for (int i = 0; i < 100; ++i) made.push_back(tensor::scalar(float(i)));
  std::thread([&made] { made.clear(); }).join();
  for (int64_t n : {1, 16, 17, 1000}) {
    tensor t(dtype::float32, {n});
    CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % 64 == 0);
    t.mutable_flat<float>().setConstant(2.0f);
    CHECK(t.flat<float>().sum() == 2.0f * float(n));
  }
}

namespace {

// A queue of tensors between threads (a mutex, so sanitizers see the hand-off).
class tensor_queue {
 public:
  void push(tensor t) {
    std::lock_guard lock(mutex_);
    items_.push_back(std::move(t));
    ready_.notify_one();
  }
  tensor pop() {
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [&] { return !items_.empty(); });
    tensor t = std::move(items_.front());
    items_.pop_front();
    return t;
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<tensor> items_;
};

}  // namespace

TEST_CASE("small buffers freed on another thread are reused there intact") {
  // Each side makes small tensors, sends them over and drops what it gets:
  // the blocks it frees are the other side's, and it allocates from them
  // next. A block reused while still referenced, or one list touched by two
  // threads, shows as a wrong value here (or as a race under TSAN).
  constexpr int rounds = 20000;
  tensor_queue to_peer, to_main;
  // Sends {offset + i, i}; checks that what arrives is {peer_offset + i, i}.
  auto exchange = [](tensor_queue& out, tensor_queue& in, float offset, float peer_offset) {
    int wrong = 0;
    for (int i = 0; i < rounds; ++i) {
      out.push(tensor::from_vector<float>({offset + float(i), float(i)}, {2}));
      auto v = in.pop().to_vector<float>();
      if (v[0] != peer_offset + v[1] || v[1] != float(i)) ++wrong;
    }
    return wrong;
  };
  int peer_wrong = 0;
  std::thread peer([&] { peer_wrong = exchange(to_main, to_peer, 1e6f, 0); });
  int main_wrong = exchange(to_peer, to_main, 0, 1e6f);
  peer.join();
  CHECK(main_wrong == 0);
  CHECK(peer_wrong == 0);
}

TEST_CASE("a thread's cached small buffers go back to malloc when it exits") {
  auto in_use = [] { return mallinfo2().uordblks; };
  std::vector<tensor> made;
  for (int i = 0; i < 1000; ++i) made.push_back(tensor::scalar(float(i)));
  made.clear();  // into this thread's list: allocate the next ones from it
  for (int i = 0; i < 1000; ++i) made.push_back(tensor::scalar(float(i)));
  const size_t before = in_use();
  // 20 threads each drop 1000 of them: 2.5 MB would stay allocated if their
  // lists were not drained at thread exit.
  for (int t = 0; t < 20; ++t) {
    std::thread([&made] { made.clear(); }).join();
    for (int i = 0; i < 1000; ++i) made.push_back(tensor::scalar(float(i)));
  }
  made.clear();
  CHECK(in_use() < before + 256 * 1024);
}

TEST_CASE("shapes keep small ranks in place and behave like vectors") {
  shape s{2, 3, 4};
  auto d = s.dims();  // a copy to edit, as ops do
  d.insert(d.begin() + 1, 7);
  d.erase(d.end() - 1);
  d.push_back(5);
  CHECK(shape(d) == shape{2, 7, 3, 5});
  CHECK(d == std::vector<int64_t>{2, 7, 3, 5});
  std::vector<int64_t> v = d;
  CHECK(v.size() == 4);
  d.insert(d.begin(), d.begin(), d.end());  // from its own range
  CHECK(shape(d) == shape{2, 7, 3, 5, 2, 7, 3, 5});
  shape big(d);  // above the inline rank: on the heap
  shape copy = big;
  shape moved = std::move(big);
  CHECK(copy == moved);
  CHECK(copy.rank() == 8);
  CHECK(copy.to_string() == "(2,7,3,5,2,7,3,5)");
  copy = s;
  CHECK(copy == s);
  CHECK(tensor(dtype::int32, shape(std::vector<int64_t>{1, 2, 1, 2, 1, 2, 1})).num_elements() == 8);
}

TEST_CASE("dtype names round trip") {
  for (auto t :
       {dtype::float32, dtype::float64, dtype::int32, dtype::int64, dtype::uint8, dtype::boolean})
    CHECK(parse_dtype(dtype_name(t)) == t);
  CHECK_FALSE(parse_dtype("float16"));
}

TEST_CASE("graph builder names, scopes and specs") {
  graph g;
  auto x = placeholder(g, dtype::float32, {-1, 3}, "x");
  CHECK(x.dims() == shape{-1, 3});
  {
    auto s = g.name_scope("layer");
    auto d = g.device_scope("/cpu:0");
    auto y = identity(x);
    CHECK(y.name() == "layer/identity");
    CHECK(y.node().device == "/cpu:0");
    auto y2 = identity(x);
    CHECK(y2.name() == "layer/identity_1");
  }
  CHECK(g.output_by_name("x").ref() == x.ref());
  CHECK_THROWS_WITH_AS(g.output_by_name("nope"), "[graph] no node named 'nope'", error);
  CHECK_THROWS_WITH_AS(g.output_by_name("x:3"), "[graph] node 'x' has no output 3", error);
  CHECK_THROWS_WITH_AS(g.add_node("frobnicate", {}), "[graph] unknown op 'frobnicate'", error);
}

TEST_CASE("graph rejects raw edges to later or missing nodes") {
  graph g;
  CHECK_THROWS_AS(g.add_node_raw("identity", {{0, 0}}, {}, {}, "a", ""), error);
  scalar(g, 1.0f, "one");
  CHECK_THROWS_AS(g.add_node_raw("identity", {{0, 1}}, {}, {}, "b", ""), error);
  CHECK_THROWS_AS(g.add_node_raw("identity", {{0, 0}}, {5}, {}, "c", ""), error);
  CHECK_NOTHROW(g.add_node_raw("identity", {{0, 0}}, {0}, {}, "d", ""));
}

TEST_CASE("variables and control dependencies") {
  graph g;
  auto v = make_variable(scalar(g, 2.0f), "w");
  CHECK(v.name() == "w");
  CHECK(v.initializer().name() == "w/init");
  auto init = global_variables_initializer(g);
  CHECK(init.node().control_inputs == std::vector<int>{v.initializer().id()});
  CHECK_THROWS_AS(assign(v, scalar(g, 1.0)), error);  // float64 into float32
}

TEST_CASE("shape arithmetic that would overflow is an error, not a wrong shape") {
  graph g;
  auto huge = placeholder(g, dtype::float32, {int64_t{1} << 40, int64_t{1} << 40}, "huge");
  CHECK_THROWS_WITH_AS(g.add_node("reshape", {huge}, {{"shape", std::vector<int64_t>{-1}}}),
                       doctest::Contains("overflows"), error);
  auto partial =
      placeholder(g, dtype::float32, {-1, int64_t{1} << 40, int64_t{1} << 40}, "partial");
  CHECK_THROWS_WITH_AS(g.add_node("reshape", {partial}, {{"shape", std::vector<int64_t>{-1, 4}}}),
                       doctest::Contains("overflows"), error);
}
