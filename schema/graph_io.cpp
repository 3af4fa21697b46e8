#include "schema/graph_io.hpp"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <fcntl.h>
#include <kj/exception.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <new>

#include "schema/file_io.hpp"
#include "schema/graph.capnp.h"
#include "schema/tensor_io.hpp"

namespace actorflow {

namespace {

constexpr uint32_t format_version = schema::GRAPH_FORMAT_VERSION;

// Loads allow this many words of traversal per word of input: enough for a
// reader that follows each pointer once, while a message whose pointers alias
// one large object many times over (an amplification attack) is cut off.
constexpr uint64_t traversal_words_per_word = 4;
constexpr uint64_t traversal_slack_words = 1024;
// The schema nests about 7 deep (graph, nodes, node, attrs, attr, value, tensor).
constexpr int nesting_limit = 16;

// A name from the file, quoted for an error message: bytes that are not
// printable ASCII are escaped and very long names are cut.
std::string quoted(std::string_view s) { return "'" + printable(s, 80) + "'"; }

std::string to_std(capnp::Text::Reader t) { return std::string(t.begin(), t.size()); }

capnp::Text::Reader to_text(const std::string& s) {
  return capnp::Text::Reader(s.c_str(), s.size());
}

// ---------------------------------------------------------------- writing

void write_attr(const attr_value& value, schema::AttrValue::Builder out) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          out.setInt(v);
        } else if constexpr (std::is_same_v<T, double>) {
          out.setFloat(v);
        } else if constexpr (std::is_same_v<T, bool>) {
          out.setBool(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          out.setString(to_text(v));
        } else if constexpr (std::is_same_v<T, dtype>) {
          out.setDtype(dtype_to_capnp(v));
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          auto list = out.initInts(static_cast<unsigned>(v.size()));
          for (size_t i = 0; i < v.size(); ++i) list.set(static_cast<unsigned>(i), v[i]);
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          auto list = out.initFloats(static_cast<unsigned>(v.size()));
          for (size_t i = 0; i < v.size(); ++i) list.set(static_cast<unsigned>(i), v[i]);
        } else {
          static_assert(std::is_same_v<T, tensor>);
          tensor_to_capnp(v, out.initTensor());
        }
      },
      value);
}

void write_graph(const graph& g, schema::Graph::Builder root) {
  root.setVersion(format_version);
  auto& nodes = g.nodes();
  auto list = root.initNodes(static_cast<unsigned>(nodes.size()));
  for (size_t i = 0; i < nodes.size(); ++i) {
    const node& n = nodes[i];
    auto out = list[static_cast<unsigned>(i)];
    try {
      out.setName(to_text(n.name));
      out.setOp(to_text(n.op));
      out.setDevice(to_text(n.device));
      auto inputs = out.initInputs(static_cast<unsigned>(n.inputs.size()));
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        inputs[static_cast<unsigned>(k)].setNode(static_cast<uint32_t>(n.inputs[k].node));
        inputs[static_cast<unsigned>(k)].setIndex(static_cast<uint32_t>(n.inputs[k].index));
      }
      auto controls = out.initControlInputs(static_cast<unsigned>(n.control_inputs.size()));
      for (size_t k = 0; k < n.control_inputs.size(); ++k)
        controls.set(static_cast<unsigned>(k), static_cast<uint32_t>(n.control_inputs[k]));
      auto attrs = out.initAttrs(static_cast<unsigned>(n.attrs.size()));
      unsigned k = 0;
      for (auto& [name, value] : n.attrs) {
        attrs[k].setName(to_text(name));
        write_attr(value, attrs[k].initValue());
        ++k;
      }
    } catch (const error& e) {
      throw error("node " + std::to_string(i) + " (" + quoted(n.name) + "): " + e.what(), e.code());
    }
  }
}

// Builds the message, turning Cap'n Proto's own limits (a name or list too
// long for the format) into actorflow errors that name `where`.
void build_message(const graph& g, capnp::MallocMessageBuilder& msg, const std::string& where) {
  try {
    write_graph(g, msg.initRoot<schema::Graph>());
  } catch (const error& e) {
    throw error(where + e.what(), e.code());
  } catch (const kj::Exception& e) {
    throw error(where + "cannot encode the graph: " + capnp_error_reason(e));
  }
}

// ---------------------------------------------------------------- reading

class loader {
 public:
  explicit loader(std::string prefix) : prefix_(std::move(prefix)) {}

  /// A file that is not a whole, valid graph: data_loss.
  [[noreturn]] void fail(const std::string& what, error_code code = error_code::data_loss) const {
    throw error(prefix_ + what, code);
  }

  std::unique_ptr<graph> parse(kj::ArrayPtr<const capnp::word> words) const {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = words.size() * traversal_words_per_word + traversal_slack_words;
    options.nestingLimit = nesting_limit;
    try {
      capnp::FlatArrayMessageReader reader(words, options);
      if (reader.getEnd() != words.end())
        fail(std::to_string((words.end() - reader.getEnd()) * sizeof(capnp::word)) +
             " bytes of trailing data after the message");
      return build(reader.getRoot<schema::Graph>());
    } catch (const error&) {
      throw;
    } catch (const kj::Exception& e) {
      fail("malformed Cap'n Proto message: " + capnp_error_reason(e));
    } catch (const std::bad_alloc&) {
      fail("out of memory while loading");
    } catch (const std::exception& e) {
      // Shape functions of op families may throw std exceptions on odd attributes.
      fail(e.what());
    }
  }

 private:
  std::unique_ptr<graph> build(schema::Graph::Reader root) const {
    uint32_t version = root.getVersion();
    if (version != format_version)
      fail("unsupported graph format version " + std::to_string(version) +
           " (this build reads version " + std::to_string(format_version) + ")");
    auto nodes = root.getNodes();
    if (nodes.size() > static_cast<unsigned>(INT_MAX))
      fail("too many nodes (" + std::to_string(nodes.size()) + ")");
    auto g = std::make_unique<graph>();
    auto& registry = op_registry::global();
    for (unsigned i = 0; i < nodes.size(); ++i) {
      auto n = nodes[i];
      std::string name = to_std(n.getName());
      std::string op = to_std(n.getOp());
      std::string device = to_std(n.getDevice());
      std::string label = "node " + std::to_string(i) + " (" + quoted(name) + ")";
      if (name.empty()) fail("node " + std::to_string(i) + " has an empty name");
      if (name.find('\0') != std::string::npos) fail(label + ": the name holds a NUL byte");
      if (auto prev = g->find(name))
        fail(label + " has the same name as node " + std::to_string(prev->id));
      if (!registry.find(op)) fail(label + " has unknown op " + quoted(op));

      std::vector<endpoint> inputs;
      auto in = n.getInputs();
      inputs.reserve(in.size());
      for (unsigned k = 0; k < in.size(); ++k) {
        uint32_t src = in[k].getNode(), index = in[k].getIndex();
        if (src >= i)
          fail(label + " input " + std::to_string(k) + " names node " + std::to_string(src) +
               ", which is not an earlier node");
        auto& s = g->at(static_cast<int>(src));
        if (index >= s.outputs.size())
          fail(label + " input " + std::to_string(k) + " names output " + std::to_string(index) +
               " of node " + std::to_string(src) + " (" + quoted(s.name) + "), which has " +
               std::to_string(s.outputs.size()) + " outputs");
        inputs.push_back({static_cast<int>(src), static_cast<int>(index)});
      }

      std::vector<int> controls;
      auto ctrl = n.getControlInputs();
      controls.reserve(ctrl.size());
      for (unsigned k = 0; k < ctrl.size(); ++k) {
        uint32_t src = ctrl[k];
        if (src >= i)
          fail(label + " control input " + std::to_string(k) + " names node " +
               std::to_string(src) + ", which is not an earlier node");
        controls.push_back(static_cast<int>(src));
      }

      attr_map attrs;
      auto attr_list = n.getAttrs();
      for (unsigned k = 0; k < attr_list.size(); ++k) {
        std::string attr_name = to_std(attr_list[k].getName());
        std::string where = label + " attribute " + quoted(attr_name);
        if (attrs.count(attr_name)) fail(where + " appears twice");
        attrs.emplace(std::move(attr_name), read_attr(attr_list[k].getValue(), where));
      }

      const node* added = nullptr;
      try {
        added = &g->add_node_raw(op, inputs, controls, std::move(attrs), name, device);
      } catch (const error& e) {
        fail(label + ": " + e.what());
      } catch (const std::exception& e) {
        // An op family's shape function threw something other than actorflow::error.
        fail(label + ": [" + op + "] " + e.what());
      }
      // Bounds every spec a later node's shape function sees (no dim below -1, no
      // product of known dims past max_tensor_bytes), so none of them can overflow.
      for (size_t k = 0; k < added->outputs.size(); ++k)
        check_untrusted_shape(added->outputs[k].dims.dims(), added->outputs[k].type, true,
                              prefix_ + label + " output " + std::to_string(k));
    }
    return g;
  }

  attr_value read_attr(schema::AttrValue::Reader v, const std::string& where) const {
    switch (v.which()) {
      case schema::AttrValue::INT:
        return int64_t{v.getInt()};
      case schema::AttrValue::FLOAT:
        return v.getFloat();
      case schema::AttrValue::BOOL:
        return v.getBool();
      case schema::AttrValue::STRING:
        return to_std(v.getString());
      case schema::AttrValue::DTYPE:
        return dtype_from_capnp(v.getDtype(), prefix_ + where);
      case schema::AttrValue::INTS: {
        std::vector<int64_t> out;
        for (int64_t x : v.getInts()) out.push_back(x);
        return out;
      }
      case schema::AttrValue::FLOATS: {
        std::vector<double> out;
        for (double x : v.getFloats()) out.push_back(x);
        return out;
      }
      case schema::AttrValue::TENSOR:
        return tensor_from_capnp(v.getTensor(), prefix_ + where);
    }
    fail(where + " has unknown kind " + std::to_string(static_cast<unsigned>(v.which())));
  }

  std::string prefix_;
};

// Closes a file descriptor on every path out.
struct fd_guard {
  int fd;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string serialize_graph(const graph& g) {
  capnp::MallocMessageBuilder msg;
  build_message(g, msg, "[serialize_graph] ");
  auto segments = msg.getSegmentsForOutput();
  std::string out = capnp_segment_table(segments);
  size_t total = out.size();
  for (auto& s : segments) total += s.asBytes().size();
  out.reserve(total);
  for (auto& s : segments) out.append(reinterpret_cast<const char*>(s.begin()), s.asBytes().size());
  return out;
}

std::unique_ptr<graph> deserialize_graph(std::string_view bytes, const std::string& source_name) {
  loader l("[deserialize_graph] " + source_name + ": ");
  if (bytes.empty()) l.fail("empty input (0 bytes)");
  if (bytes.size() % sizeof(capnp::word) != 0)
    l.fail("size " + std::to_string(bytes.size()) +
           " bytes is not a multiple of 8 (truncated, or not a graph message)");
  size_t n = bytes.size() / sizeof(capnp::word);
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(capnp::word) == 0)
    return l.parse({reinterpret_cast<const capnp::word*>(bytes.data()), n});
  // Cap'n Proto reads words in place and needs them aligned: copy.
  kj::Array<capnp::word> words;
  try {
    words = kj::heapArray<capnp::word>(n);
  } catch (const std::bad_alloc&) {
    l.fail("out of memory copying " + std::to_string(bytes.size()) + " bytes");
  }
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  return l.parse(words);
}

std::unique_ptr<graph> load_graph(const std::string& path) {
  loader l("[load_graph] " + path + ": ");
  fd_guard file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) l.fail("cannot open: " + errno_text(errno), errno_code(errno));
  struct stat st;
  if (::fstat(file.fd, &st) != 0) l.fail("cannot stat: " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) l.fail("not a regular file");
  auto size = static_cast<uint64_t>(st.st_size);
  if (size == 0) l.fail("empty file (0 bytes)");
  if (size % sizeof(capnp::word) != 0)
    l.fail("size " + std::to_string(size) +
           " bytes is not a multiple of 8 (truncated, or not a graph file)");
  kj::Array<capnp::word> words;
  try {
    words = kj::heapArray<capnp::word>(size / sizeof(capnp::word));
  } catch (const std::bad_alloc&) {
    l.fail("out of memory reading " + std::to_string(size) + " bytes");
  }
  auto p = reinterpret_cast<char*>(words.begin());
  size_t left = size;
  while (left > 0) {
    ssize_t n = ::read(file.fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) l.fail("read error: " + errno_text(errno));
    if (n == 0)
      l.fail("file ended after " + std::to_string(size - left) + " of " + std::to_string(size) +
             " bytes (changed while reading?)");
    p += n;
    left -= static_cast<size_t>(n);
  }
  return l.parse(words);
}

void save_graph(const graph& g, const std::string& path) {
  std::string where = "[save_graph] " + path + ": ";
  capnp::MallocMessageBuilder msg;
  build_message(g, msg, where);
  auto segments = msg.getSegmentsForOutput();
  std::string table = capnp_segment_table(segments);
  std::vector<std::string_view> pieces{table};
  for (auto& s : segments) pieces.emplace_back(s.asChars().begin(), s.asChars().size());
  write_file_atomically(path, pieces, where);
}

}  // namespace actorflow
