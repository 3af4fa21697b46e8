// The input pipeline: IDX files and Fashion-MNIST, the shuffled dataset, the
// FIFO queue and its actor, and the reader actor that feeds it.
#include <doctest/doctest.h>
#include <zlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <numeric>
#include <thread>

#include "actors/input/dataset.hpp"
#include "actors/input/idx_reader.hpp"
#include "actors/input/reader_actor.hpp"
#include "actors/run/messages.hpp"
#include "actors/run/runtime.hpp"
#include "actors/session.hpp"
#include "ops/math.hpp"
#include "ops/queue.hpp"
#include "ops/reduce.hpp"
#include "ops/state.hpp"
#include "schema/graph_io.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::contains;
using actorflow::testing::error_of;
using actorflow::testing::future_error;
using actorflow::testing::temp_dir;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

// A scratch directory, removed at the end of the test.
using bytes = std::vector<unsigned char>;

void write_plain(const std::string& path, const bytes& b) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

void write_gz(const std::string& path, const bytes& b) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  if (!b.empty()) REQUIRE(gzwrite(f, b.data(), static_cast<unsigned>(b.size())) == int(b.size()));
  gzclose(f);
}

// An IDX header: type code, then big-endian dims.
bytes idx_header(uint8_t code, const std::vector<uint32_t>& dims) {
  bytes b{0, 0, code, static_cast<unsigned char>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8)
      b.push_back(static_cast<unsigned char>(d >> shift));
  return b;
}

bytes concat(bytes a, const bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The shared Fashion-MNIST load: done once, it takes a fraction of a second.
const fashion_mnist& fmnist() {
  static const fashion_mnist data = [] {
    auto start = std::chrono::steady_clock::now();
    auto d = load_fashion_mnist();
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    MESSAGE("load_fashion_mnist: " << ms << " ms (4 gzip files, 70000 images)");
    return d;
  }();
  return data;
}

// A small dataset whose example i holds the value i in every element.
std::shared_ptr<dataset> counting_dataset(int64_t n, dataset_options options) {
  tensor x(dtype::float32, shape{n, 3});
  tensor y(dtype::int32, shape{n});
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 3; ++j) x.mutable_data<float>()[i * 3 + j] = static_cast<float>(i);
    y.mutable_data<int32_t>()[i] = static_cast<int32_t>(i);
  }
  return std::make_shared<dataset>(std::vector<tensor>{x, y}, options);
}

}  // namespace

// ---- IDX and Fashion-MNIST -------------------------------------------------

TEST_CASE("the IDX reader parses the real Fashion-MNIST files") {
  std::string dir = fashion_mnist_dir;
  auto images = read_idx(dir + "/train-images-idx3-ubyte.gz");
  CHECK(images.type() == dtype::uint8);
  CHECK(images.dims() == shape{60000, 28, 28});
  uint64_t pixel_sum = 0;
  for (auto p = images.data<uint8_t>(), e = p + images.num_elements(); p != e; ++p) pixel_sum += *p;
  CHECK(pixel_sum == 3431114169ull);  // computed independently with Python's gzip module

  auto labels = read_idx(dir + "/train-labels-idx1-ubyte.gz");
  CHECK(labels.dims() == shape{60000});
  auto v = labels.to_vector<uint8_t>();
  CHECK(std::vector<uint8_t>(v.begin(), v.begin() + 10) ==
        std::vector<uint8_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5});
  std::vector<int> counts(10, 0);
  for (auto l : v) {
    REQUIRE(l < 10);
    ++counts[l];
  }
  CHECK(counts == std::vector<int>(10, 6000));

  auto test_images = read_idx(dir + "/t10k-images-idx3-ubyte.gz");
  CHECK(test_images.dims() == shape{10000, 28, 28});
}

TEST_CASE("load_fashion_mnist gives NHWC floats in [0,1] and int32 labels") {
  auto& d = fmnist();
  CHECK(d.train_images.type() == dtype::float32);
  CHECK(d.train_images.dims() == shape{60000, 28, 28, 1});
  CHECK(d.test_images.dims() == shape{10000, 28, 28, 1});
  CHECK(d.train_labels.type() == dtype::int32);
  CHECK(d.train_labels.dims() == shape{60000});
  CHECK(d.test_labels.dims() == shape{10000});
  auto px = d.train_images.flat<float>();
  CHECK(px.minCoeff() == 0.0f);
  CHECK(px.maxCoeff() == 1.0f);
  CHECK(px.cast<double>().sum() * 255.0 == doctest::Approx(3431114169.0).epsilon(1e-7));
  CHECK(d.test_images.flat<float>().cast<double>().sum() * 255.0 ==
        doctest::Approx(573469082.0).epsilon(1e-7));
  CHECK(d.train_labels.data<int32_t>()[0] == 9);
  CHECK(d.test_labels.flat<int32_t>().sum() == 45000);
}

TEST_CASE("IDX files of every stored type, plain and gzip") {
  temp_dir tmp;
  // int32 big-endian: 1, -2, 65536
  auto body = concat(idx_header(0x0C, {3}), {0, 0, 0, 1, 0xFF, 0xFF, 0xFF, 0xFE, 0, 1, 0, 0});
  write_plain(tmp.file("i32.idx"), body);
  write_gz(tmp.file("i32.idx.gz"), body);
  for (auto name : {"i32.idx", "i32.idx.gz"}) {
    auto t = read_idx(tmp.file(name));
    CHECK(t.type() == dtype::int32);
    CHECK(t.to_vector<int32_t>() == std::vector<int32_t>{1, -2, 65536});
  }
  write_plain(tmp.file("i8.idx"), concat(idx_header(0x09, {2}), {0x7F, 0x80}));
  CHECK(read_idx(tmp.file("i8.idx")).to_vector<int32_t>() == std::vector<int32_t>{127, -128});
  write_plain(tmp.file("i16.idx"), concat(idx_header(0x0B, {2}), {0x01, 0x00, 0xFF, 0xFF}));
  CHECK(read_idx(tmp.file("i16.idx")).to_vector<int32_t>() == std::vector<int32_t>{256, -1});
  // float32 1.5 = 0x3FC00000; float64 -2.0 = 0xC000000000000000
  write_plain(tmp.file("f32.idx"), concat(idx_header(0x0D, {1, 1}), {0x3F, 0xC0, 0, 0}));
  auto f = read_idx(tmp.file("f32.idx"));
  CHECK(f.dims() == shape{1, 1});
  CHECK(f.item<float>() == 1.5f);
  write_plain(tmp.file("f64.idx"), concat(idx_header(0x0E, {1}), {0xC0, 0, 0, 0, 0, 0, 0, 0}));
  CHECK(read_idx(tmp.file("f64.idx")).item<double>() == -2.0);
  // A zero-sized dimension is a valid, empty tensor.
  write_plain(tmp.file("empty.idx"), idx_header(0x08, {0, 28}));
  CHECK(read_idx(tmp.file("empty.idx")).dims() == shape{0, 28});
}

TEST_CASE("malformed IDX files give errors that name the file and the fault") {
  temp_dir tmp;
  auto check = [&](const std::string& name, const bytes& content, bool gz,
                   const std::string& want) {
    auto path = tmp.file(name);
    gz ? write_gz(path, content) : write_plain(path, content);
    auto what = error_of([&] { read_idx(path); });
    INFO("file " << name << ": " << what);
    CHECK(contains(what, path));
    CHECK(contains(what, want));
  };
  auto good = concat(idx_header(0x08, {2, 3}), {1, 2, 3, 4, 5, 6});
  check("truncated.gz", bytes(good.begin(), good.end() - 2), true,
        "truncated: dims (2,3) need 6 bytes of data, the file has 4");
  check("truncated.idx", bytes(good.begin(), good.end() - 2), false,
        "truncated: dims (2,3) need 6 bytes of data, the file has 4");
  check("trailing.idx", concat(good, {7}), false, "trailing bytes");
  check("trailing.gz", concat(good, {7, 8}), true, "trailing bytes");
  check("magic.idx", concat({1, 2}, good), false, "bad magic 0x01020000: not an IDX file");
  check("text.gz", {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'}, true, "bad magic");
  check("short.idx", {0, 0}, false, "too short for an IDX header");
  check("empty.idx", {}, false, "too short for an IDX header");
  check("type.idx", concat(idx_header(0x07, {1}), {0}), false, "unknown IDX type code 7");
  check("rank0.idx", {0, 0, 8, 0, 1}, false, "rank 0");
  check("dims_cut.idx", {0, 0, 8, 3, 0, 0, 0, 1}, false, "declares 3 dimensions");
  check("overflow.idx", idx_header(0x0E, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}), false,
        "more data than can be addressed");
  // A header that claims gigabytes from a tiny file fails before allocating them.
  check("huge.gz", idx_header(0x08, {60000, 60000, 28}), true, "more than the file can hold");
  // Missing, a directory.
  auto missing = tmp.file("nope.gz");
  CHECK(contains(error_of([&] { read_idx(missing); }), missing + ": no such file"));
  CHECK(contains(error_of([&] { read_idx(tmp.path.string()); }), "is a directory"));
}

TEST_CASE("corrupt gzip data is reported, not read as data") {
  temp_dir tmp;
  bytes good = concat(idx_header(0x08, {1000}), bytes(1000, 7));
  write_gz(tmp.file("ok.gz"), good);
  std::ifstream in(tmp.file("ok.gz"), std::ios::binary);
  bytes gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(gz.size() > 30);
  for (size_t i = 12; i < gz.size() - 8; ++i) gz[i] ^= 0x5A;  // scramble the deflate stream
  write_plain(tmp.file("bad.gz"), gz);
  auto what = error_of([&] { read_idx(tmp.file("bad.gz")); });
  INFO(what);
  CHECK(contains(what, tmp.file("bad.gz")));
  CHECK((contains(what, "corrupt gzip data") || contains(what, "bad magic")));
}

TEST_CASE("a missing Fashion-MNIST says to install dataset-fashion-mnist") {
  temp_dir tmp;
  auto no_dir = tmp.file("absent");
  auto what = error_of([&] { load_fashion_mnist(no_dir); });
  CHECK(contains(what, "directory " + no_dir + " not found"));
  CHECK(contains(what, "dataset-fashion-mnist"));
  // A partial install: the first missing file is named.
  fs::copy_file(std::string(fashion_mnist_dir) + "/train-labels-idx1-ubyte.gz",
                tmp.file("train-labels-idx1-ubyte.gz"));
  what = error_of([&] { load_fashion_mnist(tmp.path.string()); });
  CHECK(contains(what, "train-images-idx3-ubyte.gz not found"));
  CHECK(contains(what, "dataset-fashion-mnist"));
  // Files of the wrong kind: labels where images belong.
  for (auto name :
       {"train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
    fs::copy_file(tmp.file("train-labels-idx1-ubyte.gz"), tmp.file(name));
  what = error_of([&] { load_fashion_mnist(tmp.path.string()); });
  CHECK(contains(
      what,
      "train-images-idx3-ubyte.gz: expected uint8 images of shape (N,28,28), got uint8(60000)"));
}

TEST_CASE("Fashion-MNIST labels outside 0..9 or of the wrong count are refused") {
  temp_dir tmp;
  for (auto name :
       {"train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
    write_gz(tmp.file(name), concat(idx_header(0x08, {2, 28, 28}), bytes(2 * 28 * 28, 0)));
  write_gz(tmp.file("t10k-labels-idx1-ubyte.gz"), concat(idx_header(0x08, {2}), {1, 2}));
  write_gz(tmp.file("train-labels-idx1-ubyte.gz"), concat(idx_header(0x08, {2}), {3, 10}));
  auto what = error_of([&] { load_fashion_mnist(tmp.path.string()); });
  CHECK(contains(what, "train-labels-idx1-ubyte.gz: label 1 is 10, outside 0..9"));
  write_gz(tmp.file("train-labels-idx1-ubyte.gz"), concat(idx_header(0x08, {3}), {3, 1, 2}));
  what = error_of([&] { load_fashion_mnist(tmp.path.string()); });
  CHECK(contains(what, "3 labels for 2 images"));
  write_gz(tmp.file("train-labels-idx1-ubyte.gz"), concat(idx_header(0x08, {2}), {3, 1}));
  auto d = load_fashion_mnist(tmp.path.string());
  CHECK(d.train_images.dims() == shape{2, 28, 28, 1});
  CHECK(d.train_labels.to_vector<int32_t>() == std::vector<int32_t>{3, 1});
}

// ---- the dataset -----------------------------------------------------------

TEST_CASE("each epoch's order depends only on (seed, epoch)") {
  auto a = counting_dataset(1000, {.batch_size = 10, .seed = 42});
  auto b = counting_dataset(1000, {.batch_size = 10, .seed = 42});
  auto c = counting_dataset(1000, {.batch_size = 10, .seed = 43});
  auto o0 = a->order(0);
  CHECK(o0 == b->order(0));
  CHECK(a->order(5) == b->order(5));
  CHECK(o0 != a->order(1));
  CHECK(o0 != c->order(0));
  auto sorted = o0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(1000);
  std::iota(iota.begin(), iota.end(), 0);
  CHECK(sorted == iota);  // a permutation
  CHECK(o0 != iota);      // and shuffled
  auto plain = counting_dataset(1000, {.batch_size = 10, .shuffle = false});
  CHECK(plain->order(3) == iota);
  // The same order on a second call, after another epoch was asked for.
  a->batch({7, 0});
  CHECK(a->batch({0, 3})[1].to_vector<int32_t>() ==
        std::vector<int32_t>(o0.begin() + 30, o0.begin() + 40));
}

TEST_CASE("batches gather rows in the epoch's order; the remainder is dropped by default") {
  auto d = counting_dataset(10, {.batch_size = 3, .seed = 1});
  CHECK(d->batches_per_epoch() == 3);
  CHECK(d->batch_shapes() == std::vector<shape>{shape{3, 3}, shape{3}});
  CHECK(d->batch_types() == std::vector<dtype>{dtype::float32, dtype::int32});
  auto order = d->order(2);
  auto b = d->batch({2, 1});
  CHECK(b[0].dims() == shape{3, 3});
  for (int r = 0; r < 3; ++r) {
    CHECK(b[1].data<int32_t>()[r] == order[3 + r]);
    for (int j = 0; j < 3; ++j) CHECK(b[0].data<float>()[r * 3 + j] == float(order[3 + r]));
  }
  // Kept remainder: a short last batch, and an unknown batch dim in the shapes.
  auto k = counting_dataset(10, {.batch_size = 3, .seed = 1, .drop_remainder = false});
  CHECK(k->batches_per_epoch() == 4);
  CHECK(k->batch({0, 3})[0].dims() == shape{1, 3});
  CHECK(k->batch_shapes()[0] == shape{-1, 3});
  // Positions and steps.
  CHECK(d->next({0, 2}) == dataset_position{1, 0});
  CHECK(d->position_at_step(7) == dataset_position{2, 1});
  CHECK(d->step_at({2, 1}) == 7);
  // Errors.
  CHECK(contains(error_of([&] {
                   d->batch({0, 3});
                 }),
                 "position (epoch 0, batch 3) is outside 0..2"));
  CHECK(contains(error_of([&] { d->batch({-1, 0}); }), "outside"));
  CHECK(contains(error_of([&] { counting_dataset(2, {.batch_size = 3}); }),
                 "2 examples make no batch of 3"));
  CHECK(contains(error_of([&] { counting_dataset(2, {.batch_size = 0}); }),
                 "batch_size must be at least 1"));
  CHECK(contains(
      error_of([&] {
        dataset({tensor::zeros(dtype::float32, {4, 2}), tensor::zeros(dtype::int32, {3})}, {});
      }),
      "component 1 has 3 examples, component 0 has 4"));
}

TEST_CASE("resuming at a global step continues the same batch stream") {
  auto& f = fmnist();
  auto d = std::make_shared<dataset>(std::vector<tensor>{f.train_images, f.train_labels},
                                     dataset_options{.batch_size = 128, .seed = 7});
  CHECK(d->batches_per_epoch() == 468);  // 60000 / 128, the remainder dropped
  // The batches of steps 465..470 (they cross an epoch boundary), straight
  // through and resumed at step 467.
  std::vector<std::vector<tensor>> straight;
  for (auto pos = d->position_at_step(465); d->step_at(pos) <= 470; pos = d->next(pos))
    straight.push_back(d->batch(pos));
  auto resumed = std::make_shared<dataset>(std::vector<tensor>{f.train_images, f.train_labels},
                                           dataset_options{.batch_size = 128, .seed = 7});
  auto pos = resumed->position_at_step(467);
  CHECK(pos == dataset_position{0, 467});
  for (size_t i = 2; i < straight.size(); ++i, pos = resumed->next(pos)) {
    auto b = resumed->batch(pos);
    CHECK(b[0].equals(straight[i][0]));
    CHECK(b[1].equals(straight[i][1]));
  }
  // Gathering is a memcpy per row: time it on real sizes.
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 200; ++i) d->batch({1, i});
  double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("dataset::batch, 128 x (28x28x1 float + label): " << us / 200 << " us per batch");
}

// ---- the queue -------------------------------------------------------------

namespace {

// A queue of float32 (2) elements and the ops that the tests run on it.
struct queue_graph {
  graph g;
  output q, x, size;
  operation enq, close, cancel;
  std::vector<output> deq;
  explicit queue_graph(int64_t capacity) {
    q = fifo_queue(g, {dtype::float32}, {shape{2}}, capacity, "q");
    x = placeholder(g, dtype::float32, {-1}, "x");  // any length: checked when it arrives
    enq = queue_enqueue(q, {x}, "enq");
    deq = queue_dequeue(q, "deq");
    close = queue_close(q, false, "close");
    cancel = queue_close(q, true, "cancel");
    size = queue_size(q, "size");
  }
  feed_list feed(float a, float b) { return {{x, tensor::from_vector<float>({a, b})}}; }
};

}  // namespace

TEST_CASE("a FIFO queue hands out elements in order and counts them") {
  queue_graph t(4);
  session s(t.g);
  for (int i = 0; i < 3; ++i) s.run(t.feed(float(i), float(10 + i)), {}, {t.enq});
  CHECK(s.eval(t.size).item<int32_t>() == 3);
  for (int i = 0; i < 3; ++i)
    CHECK(s.eval(t.deq[0]).to_vector<float>() == std::vector<float>{float(i), float(10 + i)});
  CHECK(s.eval(t.size).item<int32_t>() == 0);
  // Several components come out as one output each.
  graph g;
  auto q = fifo_queue(g, {dtype::float32, dtype::int32}, {shape{-1, 2}, shape{-1}}, 2, "pairs");
  auto enq = queue_enqueue(q, {constant(g, tensor::from_vector<float>({1, 2, 3, 4}, {2, 2})),
                               constant(g, tensor::from_vector<int32_t>({5, 6}))});
  auto deq = queue_dequeue(q);
  REQUIRE(deq.size() == 2);
  CHECK(deq[0].dims() == shape{-1, 2});
  CHECK(deq[1].type() == dtype::int32);
  session s2(g);
  s2.run({enq});
  auto out = s2.run({}, {deq[1], deq[0], reduce_sum(deq[0])});
  CHECK(out[0].to_vector<int32_t>() == std::vector<int32_t>{5, 6});
  CHECK(out[1].dims() == shape{2, 2});
  CHECK(out[2].item<float>() == 10.0f);
}

TEST_CASE("an enqueue on a full queue waits until a dequeue frees a slot") {
  queue_graph t(2);
  session s(t.g);
  s.run(t.feed(1, 1), {}, {t.enq});
  s.run(t.feed(2, 2), {}, {t.enq});
  auto blocked = s.run_async(t.feed(3, 3), {}, {t.enq});
  CHECK(blocked.wait_for(100ms) == std::future_status::timeout);
  CHECK(s.eval(t.size).item<int32_t>() == 2);  // the queue still answers meanwhile
  CHECK(s.eval(t.deq[0]).to_vector<float>() == std::vector<float>{1, 1});
  REQUIRE(blocked.wait_for(10s) == std::future_status::ready);
  blocked.get();
  CHECK(s.eval(t.deq[0]).to_vector<float>() == std::vector<float>{2, 2});
  CHECK(s.eval(t.deq[0]).to_vector<float>() == std::vector<float>{3, 3});
}

TEST_CASE("a dequeue on an empty queue waits for an element") {
  queue_graph t(2);
  session s(t.g);
  auto waiting = s.run_async({}, {t.deq[0]});
  auto second = s.run_async({}, {t.deq[0]});
  CHECK(waiting.wait_for(100ms) == std::future_status::timeout);
  s.run(t.feed(4, 5), {}, {t.enq});
  REQUIRE(waiting.wait_for(10s) == std::future_status::ready);
  CHECK(waiting.get()[0].to_vector<float>() == std::vector<float>{4, 5});
  CHECK(second.wait_for(50ms) == std::future_status::timeout);
  s.run(t.feed(6, 7), {}, {t.enq});
  REQUIRE(second.wait_for(10s) == std::future_status::ready);
  CHECK(second.get()[0].to_vector<float>() == std::vector<float>{6, 7});
}

TEST_CASE("a closed queue refuses enqueues, drains, then reports out of range") {
  queue_graph t(4);
  session s(t.g);
  s.run(t.feed(1, 1), {}, {t.enq});
  s.run(t.feed(2, 2), {}, {t.enq});
  s.run({t.close});
  auto what = error_of([&] { s.run(t.feed(3, 3), {}, {t.enq}); });
  CHECK(contains(what, "node 'enq' (queue_enqueue): queue 'q' is closed: enqueue refused"));
  CHECK(s.eval(t.deq[0]).to_vector<float>() == std::vector<float>{1, 1});
  CHECK(s.eval(t.deq[0]).to_vector<float>() == std::vector<float>{2, 2});
  what = error_of([&] { s.eval(t.deq[0]); });
  CHECK(contains(what, "node 'deq' (queue_dequeue): queue 'q' is closed and empty (out of range)"));
  s.run({t.close});  // closing twice is harmless
}

TEST_CASE("closing a queue fails the dequeues waiting on it") {
  queue_graph t(2);
  session s(t.g);
  auto waiting = s.run_async({}, {t.deq[0]});
  CHECK(waiting.wait_for(100ms) == std::future_status::timeout);
  s.run({t.close});
  REQUIRE(waiting.wait_for(10s) == std::future_status::ready);
  CHECK(contains(future_error(waiting), "queue 'q' is closed and empty"));
}

TEST_CASE("enqueues waiting on a full queue: kept by close, failed by cancel") {
  queue_graph t(1);
  session s(t.g);
  s.run(t.feed(1, 1), {}, {t.enq});
  auto kept = s.run_async(t.feed(2, 2), {}, {t.enq});
  CHECK(kept.wait_for(50ms) == std::future_status::timeout);
  s.run({t.close});  // without cancel, the waiting enqueue still lands
  CHECK(kept.wait_for(50ms) == std::future_status::timeout);
  CHECK(s.eval(t.deq[0]).to_vector<float>() == std::vector<float>{1, 1});
  REQUIRE(kept.wait_for(10s) == std::future_status::ready);
  kept.get();
  CHECK(s.eval(t.deq[0]).to_vector<float>() == std::vector<float>{2, 2});

  queue_graph u(1);
  session s2(u.g);
  s2.run(u.feed(1, 1), {}, {u.enq});
  auto cancelled = s2.run_async(u.feed(2, 2), {}, {u.enq});
  CHECK(cancelled.wait_for(50ms) == std::future_status::timeout);
  s2.run({u.cancel});
  REQUIRE(cancelled.wait_for(10s) == std::future_status::ready);
  CHECK(contains(future_error(cancelled), "queue 'q' was closed (cancel_pending_enqueues)"));
  CHECK(s2.eval(u.deq[0]).to_vector<float>() == std::vector<float>{1, 1});
}

// A step whose other branch fails must not leave its queue ops waiting:
// the step would wait for them, and a dequeue would later take an element
// for nobody. Each round checks that the element goes to the next step.
TEST_CASE("a failing step cancels its waiting queue ops, which then take and add nothing") {
  queue_graph t(1);
  auto a = placeholder(t.g, dtype::float32, {-1}, "a");
  auto b = placeholder(t.g, dtype::float32, {-1}, "b");
  auto bad = add(a, b, "bad");  // fails at run time for lengths 2 and 3
  feed_list mismatched{{a, tensor::from_vector<float>({1, 2})},
                       {b, tensor::from_vector<float>({1, 2, 3})}};
  session s(t.g);
  for (int round = 0; round < 20; ++round) {
    // A dequeue on the empty queue, beside the failing branch.
    auto failed = s.run_async(mismatched, {t.deq[0], bad});
    REQUIRE(failed.wait_for(10s) == std::future_status::ready);
    CHECK(contains(future_error(failed), "node 'bad' (add)"));
    s.run(t.feed(float(round), 1), {}, {t.enq});
    auto next = s.run_async({}, {t.deq[0]});
    REQUIRE(next.wait_for(10s) == std::future_status::ready);
    CHECK(next.get()[0].to_vector<float>() == std::vector<float>{float(round), 1});
  }
  // An enqueue waiting on the full queue, beside the failing branch: its
  // element never lands.
  s.run(t.feed(7, 7), {}, {t.enq});
  feed_list enqueue_and_fail = mismatched;
  enqueue_and_fail.push_back({t.x, tensor::from_vector<float>({8, 8})});
  auto failed = s.run_async(enqueue_and_fail, {bad}, {t.enq});
  REQUIRE(failed.wait_for(10s) == std::future_status::ready);
  CHECK(contains(future_error(failed), "node 'bad' (add)"));
  CHECK(s.eval(t.deq[0]).to_vector<float>() == std::vector<float>{7, 7});
  CHECK(s.eval(t.size).item<int32_t>() == 0);
}

TEST_CASE("queue components are checked: dtype, shape, count") {
  queue_graph t(2);
  // At build time, naming the queue and the component.
  auto ints = placeholder(t.g, dtype::int32, {2}, "ints");
  CHECK(contains(error_of([&] { queue_enqueue(t.q, {ints}); }),
                 "[queue_enqueue] queue 'q': component 0 is int32(2), the queue holds float32(2)"));
  CHECK(contains(error_of([&] {
                   queue_enqueue(t.q, {t.x, t.x});
                 }),
                 "an element has 1 components, got 2"));
  CHECK(
      contains(error_of([&] { queue_enqueue(t.x, {t.x}); }), "'x' is a placeholder, not a queue"));
  CHECK(contains(error_of([&] { fifo_queue(t.g, {dtype::float32}, {shape{2}}, 0); }),
                 "capacity must be at least 1"));
  CHECK(contains(error_of([&] { fifo_queue(t.g, {dtype::float32}, {}, 1); }),
                 "1 dtypes but 0 shapes"));
  CHECK(contains(error_of([&] { fifo_queue(t.g, {}, {}, 1); }), "at least one component"));
  // At run time, for shapes the graph left open; the step fails, the queue goes on.
  session s(t.g);
  auto what = error_of([&] { s.run({{t.x, tensor::from_vector<float>({1, 2, 3})}}, {}, {t.enq}); });
  CHECK(contains(what,
                 "node 'enq' (queue_enqueue): [queue 'q'] component 0 is float32(3), the queue "
                 "holds float32(2)"));
  s.run(t.feed(1, 2), {}, {t.enq});
  CHECK(s.eval(t.size).item<int32_t>() == 1);
  // Fetching the queue itself is an error that says what to do instead.
  CHECK(contains(error_of([&] { s.eval(t.q); }), "is a queue reference, not a value"));
  // Direct messages are checked the same way.
  caf::scoped_actor self{s.rt().system()};
  std::string reply_error;
  self->request(s.queue_actor(t.q), std::chrono::seconds(10), enqueue_atom::value,
                std::vector<tensor>{tensor::scalar<int32_t>(1), tensor::scalar<int32_t>(2)})
      .receive([&](update_result& r) { reply_error = r.error; },
               [&](caf::error& e) { reply_error = "actor error " + caf::to_string(e); });
  CHECK(contains(reply_error, "[queue 'q'] an element has 1 components, got 2"));
  CHECK(contains(error_of([&] { s.queue_actor(t.x); }), "'x' is a placeholder, not a queue"));
}

TEST_CASE("a session with steps waiting on its queues shuts down without hanging") {
  queue_graph t(1);
  auto full = fifo_queue(t.g, {dtype::float32}, {shape{2}}, 1, "full");
  auto fill = queue_enqueue(full, {t.x}, "fill");
  std::future<std::vector<tensor>> waiting_dequeue, waiting_enqueue;
  auto done = std::async(std::launch::async, [&] {
    session s(t.g);
    waiting_dequeue = s.run_async({}, {t.deq[0]});
    s.run(t.feed(1, 1), {}, {fill});
    waiting_enqueue = s.run_async(t.feed(2, 2), {}, {fill});
    // Both wait; then the session goes away with them in flight.
    return waiting_dequeue.wait_for(50ms) == std::future_status::timeout &&
           waiting_enqueue.wait_for(50ms) == std::future_status::timeout;
  });
  REQUIRE(done.wait_for(20s) == std::future_status::ready);
  CHECK(done.get());
  CHECK(contains(future_error(waiting_dequeue),
                 "node 'deq' (queue_dequeue): queue 'q' is closed and empty"));
  CHECK(
      contains(future_error(waiting_enqueue), "queue 'full' was closed (cancel_pending_enqueues)"));
}

TEST_CASE("a queue graph survives saving and loading") {
  queue_graph t(3);
  auto loaded = deserialize_graph(serialize_graph(t.g), "queue graph");
  graph& g = *loaded;
  session s(g);
  s.run_by_name({{"x", tensor::from_vector<float>({8, 9})}}, {}, {"enq"});
  CHECK(s.run_by_name({}, {"size"})[0].item<int32_t>() == 1);
  CHECK(s.run_by_name({}, {"deq"})[0].to_vector<float>() == std::vector<float>{8, 9});
  CHECK(contains(error_of([&] {
                   s.run_by_name({{"x", tensor::from_vector<float>({1})}}, {}, {"enq"});
                 }),
                 "component 0 is float32(1), the queue holds float32(2)"));
}

// ---- the reader actor ------------------------------------------------------

TEST_CASE("a reader feeds a graph that dequeues and sums a full epoch of Fashion-MNIST") {
  auto& f = fmnist();
  auto data = std::make_shared<dataset>(std::vector<tensor>{f.train_images, f.train_labels},
                                        dataset_options{.batch_size = 128, .seed = 3});
  graph g;
  auto q = fifo_queue(g, data->batch_types(), data->batch_shapes(), 4, "batches");
  auto batch = queue_dequeue(q, "next_batch");
  auto pixel_sum = reduce_sum(batch[0]);
  auto label_sum = reduce_sum(batch[1]);
  session s(g);
  batch_reader reader(s, q, data, {0, 0}, {.until_epoch = 1});

  double pixels = 0;
  int64_t labels = 0, steps = 0;
  std::string end;
  auto start = std::chrono::steady_clock::now();
  for (;;) {
    auto step = s.run_async({}, {pixel_sum, label_sum});
    REQUIRE(step.wait_for(30s) == std::future_status::ready);
    try {
      auto out = step.get();
      pixels += out[0].item<float>();
      labels += out[1].item<int32_t>();
      ++steps;
    } catch (const error& e) {
      end = e.what();
      break;
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("reader -> queue -> dequeue+sum steps: " << steps / secs << " batches/s of 128 (" << steps
                                                   << " batches in " << secs << " s)");
  CHECK(steps == 468);
  CHECK(contains(end, "queue 'batches' is closed and empty (out of range)"));
  // The expected sums, over the first 468 * 128 examples of epoch 0's order.
  auto order = data->order(0);
  double want_pixels = 0;
  int64_t want_labels = 0;
  const float* px = f.train_images.data<float>();
  for (size_t i = 0; i < 468 * 128; ++i) {
    auto e = static_cast<size_t>(order[i]);
    for (size_t k = 0; k < 784; ++k) want_pixels += px[e * 784 + k];
    want_labels += f.train_labels.data<int32_t>()[e];
  }
  CHECK(labels == want_labels);
  CHECK(pixels == doctest::Approx(want_pixels).epsilon(1e-5));
  REQUIRE(reader.wait(10s));
  auto r = reader.report();
  CHECK(r.finished);
  CHECK(r.error.empty());
  CHECK(r.batches == 468);
  CHECK(r.position == dataset_position{1, 0});
}

TEST_CASE("a reader can be stopped mid-epoch and resumed from its position") {
  auto data = counting_dataset(100, {.batch_size = 10, .seed = 5});
  graph g;
  auto q = fifo_queue(g, data->batch_types(), data->batch_shapes(), 2, "q");
  auto deq = queue_dequeue(q);
  session s(g);
  dataset_position stopped_at;
  {
    batch_reader reader(s, q, data, {0, 0});
    // The queue fills (2 batches), a third waits; nothing consumes them.
    for (int i = 0; i < 200 && reader.report().batches < 2; ++i) std::this_thread::sleep_for(5ms);
    auto stopping = std::async(std::launch::async, [&] { reader.stop(); });
    REQUIRE(stopping.wait_for(10s) == std::future_status::ready);
    auto r = reader.report();
    CHECK(r.finished);
    CHECK(r.error.empty());
    CHECK(r.batches == 2);
    CHECK(r.position == dataset_position{0, 2});
    stopped_at = r.position;
  }
  auto expect = [&](dataset_position pos) {
    auto got = s.run({}, deq);
    CHECK(got[1].equals(data->batch(pos)[1]));
  };
  expect({0, 0});
  expect({0, 1});
  // The batch offered when the reader stopped may land: drain it if it did.
  auto left = s.eval(queue_size(q)).item<int32_t>();
  CHECK(left <= 1);
  if (left == 1) expect({0, 2});
  // A resumed reader continues with the same batches, across the epoch end.
  batch_reader resumed(s, q, data, stopped_at, {.max_batches = 12});
  for (auto pos = stopped_at; data->step_at(pos) < 14; pos = data->next(pos)) expect(pos);
  auto end = s.run_async({}, deq);
  REQUIRE(end.wait_for(10s) == std::future_status::ready);
  CHECK(contains(future_error(end), "closed and empty"));
  REQUIRE(resumed.wait(10s));
  CHECK(resumed.report().position == dataset_position{1, 4});
}

TEST_CASE("a failing reader reports why and closes the queue so consumers do not wait") {
  auto data = counting_dataset(30, {.batch_size = 10});
  graph g;
  // The queue wants int32 first: the dataset's batches do not fit.
  auto q = fifo_queue(g, {dtype::int32, dtype::float32}, {shape{10}, shape{10, 3}}, 2, "q");
  auto deq = queue_dequeue(q);
  session s(g);
  batch_reader reader(s, q, data, {0, 0});
  REQUIRE(reader.wait(10s));
  auto r = reader.report();
  CHECK(contains(r.error,
                 "[reader] enqueue failed: [queue 'q'] component 0 is float32(10,3), the queue "
                 "holds int32(10)"));
  CHECK(r.batches == 0);
  auto step = s.run_async({}, deq);
  REQUIRE(step.wait_for(10s) == std::future_status::ready);
  CHECK(contains(future_error(step), "closed and empty"));

  // A start position outside the dataset.
  graph g2;
  auto q2 = fifo_queue(g2, data->batch_types(), data->batch_shapes(), 2, "q2");
  session s2(g2);
  batch_reader bad(s2, q2, data, {0, 3});
  REQUIRE(bad.wait(10s));
  CHECK(contains(bad.report().error,
                 "[reader] [dataset] position (epoch 0, batch 3) is outside 0..2"));
}

TEST_CASE("a reader that outlives its session ends cleanly") {
  auto data = counting_dataset(100, {.batch_size = 10});
  auto done = std::async(std::launch::async, [&] {
    std::unique_ptr<batch_reader> reader;
    {
      graph g;
      auto q = fifo_queue(g, data->batch_types(), data->batch_shapes(), 2, "q");
      session s(g);
      reader = std::make_unique<batch_reader>(s, q, data, dataset_position{0, 0});
      for (int i = 0; i < 200 && reader->report().batches < 2; ++i)
        std::this_thread::sleep_for(5ms);
    }  // the session closes its queue, cancelling the reader's waiting enqueue
    bool ended = reader->wait(10s);
    auto report = reader->report();
    reader.reset();  // the last owner of the runtime
    return std::make_pair(ended, report);
  });
  REQUIRE(done.wait_for(20s) == std::future_status::ready);
  auto [ended, report] = done.get();
  CHECK(ended);
  CHECK(report.batches == 2);
  CHECK(contains(report.error, "queue 'q' was closed (cancel_pending_enqueues)"));
}
