#include "schema/event_proto.hpp"

#include "core/proto_wire.hpp"

namespace actorflow {

namespace {

using proto::field;
using proto::reader;
using proto::wire_type;
using proto::writer;

// ---------------------------------------------------------------- Summary

histogram_value decode_histogram(std::string_view bytes, const std::string& where) {
  histogram_value h;
  reader r(bytes, where + ".histo");
  for (field f; r.next(f);) {
    if (f.number >= 1 && f.number <= 5) {
      r.expect(f, wire_type::fixed64);
      double* scalars[] = {&h.min, &h.max, &h.num, &h.sum, &h.sum_squares};
      *scalars[f.number - 1] = f.as_double();
    } else if (f.number == 6) {
      r.append_doubles(f, h.bucket_limit);
    } else if (f.number == 7) {
      r.append_doubles(f, h.bucket);
    }
  }
  return h;
}

image_value decode_image(std::string_view bytes, const std::string& where) {
  image_value im;
  reader r(bytes, where + ".image");
  for (field f; r.next(f);) {
    if (f.number >= 1 && f.number <= 3) {
      r.expect(f, wire_type::varint);
      int64_t* dims[] = {&im.height, &im.width, &im.colorspace};
      *dims[f.number - 1] = f.as_int64();
    } else if (f.number == 4) {
      r.expect(f, wire_type::bytes);
      im.encoded = std::string(f.bytes);
    }
  }
  return im;
}

std::vector<int64_t> decode_shape(std::string_view bytes, const std::string& where) {
  std::vector<int64_t> dims;
  reader r(bytes, where + ".tensor_shape");
  for (field f; r.next(f);) {
    if (f.number != 2) continue;
    r.expect(f, wire_type::bytes);
    int64_t size = 0;
    reader d(f.bytes, where + ".tensor_shape.dim");
    for (field g; d.next(g);)
      if (g.number == 1) {
        d.expect(g, wire_type::varint);
        size = g.as_int64();
      }
    dims.push_back(size);
  }
  return dims;
}

tensor_value decode_tensor(std::string_view bytes, const std::string& where) {
  tensor_value t;
  reader r(bytes, where + ".tensor");
  for (field f; r.next(f);) {
    switch (f.number) {
      case 1:
        r.expect(f, wire_type::varint);
        t.dtype = f.as_int64();
        break;
      case 2:
        r.expect(f, wire_type::bytes);
        t.dims = decode_shape(f.bytes, where);
        break;
      case 4:
        r.expect(f, wire_type::bytes);
        t.tensor_content = std::string(f.bytes);
        break;
      case 8:
        r.expect(f, wire_type::bytes);
        t.string_val.emplace_back(f.bytes);
        break;
      default:
        break;
    }
  }
  return t;
}

std::string decode_plugin_name(std::string_view metadata, const std::string& where) {
  std::string name;
  reader r(metadata, where + ".metadata");
  for (field f; r.next(f);) {
    if (f.number != 1) continue;
    r.expect(f, wire_type::bytes);
    reader p(f.bytes, where + ".metadata.plugin_data");
    for (field g; p.next(g);)
      if (g.number == 1) {
        p.expect(g, wire_type::bytes);
        name = std::string(g.bytes);
      }
  }
  return name;
}

summary_value decode_value(std::string_view bytes, const std::string& where) {
  summary_value v;
  reader r(bytes, where);
  using k = summary_value::kind;
  for (field f; r.next(f);) {
    if (f.number == 2) {
      r.expect(f, wire_type::fixed32);
      v.what = k::simple_value;
      v.simple_value = f.as_float();
      continue;
    }
    if (f.number != 1 && f.number != 4 && f.number != 5 && f.number != 8 && f.number != 9) continue;
    r.expect(f, wire_type::bytes);
    switch (f.number) {
      case 1:
        v.tag = std::string(f.bytes);
        break;
      case 4:
        v.what = k::image, v.image = decode_image(f.bytes, where);
        break;
      case 5:
        v.what = k::histo, v.histo = decode_histogram(f.bytes, where);
        break;
      case 8:
        v.what = k::tensor, v.tensor = decode_tensor(f.bytes, where);
        break;
      case 9:
        v.plugin_name = decode_plugin_name(f.bytes, where);
        break;
    }
  }
  return v;
}

// ---------------------------------------------------------------- GraphDef

// DataType values from tensorflow/core/framework/types.proto.
constexpr int dt_float = 1, dt_double = 2, dt_int32 = 3, dt_uint8 = 4, dt_int64 = 9, dt_bool = 10,
              dt_bfloat16 = 14;

// Constants larger than this keep their dtype and shape only: the graph is for
// looking at, and weights would make every event file as large as a checkpoint.
constexpr size_t max_tensor_content = size_t{1} << 20;

writer shape_proto(const shape& dims) {
  writer s;
  for (int64_t d : dims.dims()) {
    writer dim;
    dim.int64_field(1, d);
    s.message_field(2, dim);
  }
  return s;
}

writer tensor_proto(const tensor& t) {
  writer w;
  w.varint_field(1, static_cast<uint64_t>(tf_datatype(t.type())));
  w.message_field(2, shape_proto(t.dims()));
  if (t.size_bytes() <= max_tensor_content && t.size_bytes() > 0)
    w.bytes_field(4, std::string_view(static_cast<const char*>(t.raw_data()), t.size_bytes()));
  return w;
}

// AttrValue (attr_value.proto): list=1, s=2, i=3, f=4, b=5, type=6, shape=7,
// tensor=8; ListValue: s=2, i=3, f=4, type=6, shape=7. Repeated scalars are
// written unpacked, which every parser accepts.
writer attr_proto(const attr_value& v) {
  writer w;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          w.int64_field(3, x);
        } else if constexpr (std::is_same_v<T, double>) {
          w.float_field(4, static_cast<float>(x));
        } else if constexpr (std::is_same_v<T, bool>) {
          w.varint_field(5, x ? 1 : 0);
        } else if constexpr (std::is_same_v<T, std::string>) {
          w.bytes_field(2, x);
        } else if constexpr (std::is_same_v<T, dtype>) {
          w.varint_field(6, static_cast<uint64_t>(tf_datatype(x)));
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          writer list;
          for (int64_t i : x) list.int64_field(3, i);
          w.message_field(1, list);
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          writer list;
          for (double d : x) list.float_field(4, static_cast<float>(d));
          w.message_field(1, list);
        } else if constexpr (std::is_same_v<T, tensor>) {
          if (x.valid()) w.message_field(8, tensor_proto(x));
        }
      },
      v);
  return w;
}

void add_attr(writer& node_def, const std::string& key, const writer& value) {
  writer entry;  // map<string, AttrValue> entries: key=1, value=2
  entry.bytes_field(1, key);
  entry.message_field(2, value);
  node_def.message_field(5, entry);
}

writer node_def(const graph& g, const node& n) {
  writer w;
  w.bytes_field(1, n.name);
  w.bytes_field(2, n.op);
  for (const endpoint& e : n.inputs) {
    const std::string& name = g.at(e.node).name;
    w.bytes_field(3, e.index == 0 ? name : name + ":" + std::to_string(e.index));
  }
  for (int c : n.control_inputs) w.bytes_field(3, "^" + g.at(c).name);
  if (!n.device.empty()) w.bytes_field(4, n.device);
  for (const auto& [key, value] : n.attrs) add_attr(w, key, attr_proto(value));
  if (!n.outputs.empty() && !n.attrs.count("T") && !n.attrs.count("dtype")) {
    writer type;
    type.varint_field(6, static_cast<uint64_t>(tf_datatype(n.outputs[0].type)));
    add_attr(w, "T", type);
  }
  writer shapes, list;
  for (const tensor_spec& s : n.outputs) list.message_field(7, shape_proto(s.dims));
  shapes.message_field(1, list);
  add_attr(w, "_output_shapes", shapes);
  return w;
}

graph_def_node decode_node(std::string_view bytes, const std::string& where) {
  graph_def_node n;
  reader r(bytes, where + ".node");
  for (field f; r.next(f);) {
    if (f.number < 1 || f.number > 5) continue;
    r.expect(f, wire_type::bytes);
    switch (f.number) {
      case 1:
        n.name = std::string(f.bytes);
        break;
      case 2:
        n.op = std::string(f.bytes);
        break;
      case 3:
        n.inputs.emplace_back(f.bytes);
        break;
      case 4:
        n.device = std::string(f.bytes);
        break;
      case 5: {
        std::string key, value;
        reader e(f.bytes, where + ".node.attr");
        for (field g; e.next(g);) {
          e.expect(g, wire_type::bytes);
          (g.number == 1 ? key : value) = std::string(g.bytes);
        }
        n.attrs[key] = std::move(value);
        break;
      }
    }
  }
  return n;
}

}  // namespace

int tf_datatype(dtype t) {
  switch (t) {
    case dtype::float32:
      return dt_float;
    case dtype::float64:
      return dt_double;
    case dtype::int32:
      return dt_int32;
    case dtype::int64:
      return dt_int64;
    case dtype::uint8:
      return dt_uint8;
    case dtype::boolean:
      return dt_bool;
    case dtype::bfloat16:
      return dt_bfloat16;
  }
  fail("tf_datatype", "invalid dtype value " + std::to_string(static_cast<int>(t)));
}

std::vector<summary_value> decode_summary(std::string_view bytes, const std::string& where) {
  std::vector<summary_value> values;
  reader r(bytes, where);
  for (field f; r.next(f);) {
    if (f.number != 1) continue;
    r.expect(f, wire_type::bytes);
    values.push_back(decode_value(f.bytes, where + ".value"));
  }
  return values;
}

std::string encode_event(const event& e) {
  writer w;
  w.double_field(1, e.wall_time);
  if (e.step != 0) w.int64_field(2, e.step);
  if (!e.file_version.empty()) w.bytes_field(3, e.file_version);
  if (!e.graph_def.empty()) w.bytes_field(4, e.graph_def);
  if (e.has_summary) w.bytes_field(5, e.summary_bytes);
  return w.take();
}

event decode_event(std::string_view bytes, const std::string& where) {
  event e;
  reader r(bytes, where);
  for (field f; r.next(f);) {
    switch (f.number) {
      case 1:
        r.expect(f, wire_type::fixed64);
        e.wall_time = f.as_double();
        break;
      case 2:
        r.expect(f, wire_type::varint);
        e.step = f.as_int64();
        break;
      case 3:
        r.expect(f, wire_type::bytes);
        e.file_version = std::string(f.bytes);
        break;
      case 4:
        r.expect(f, wire_type::bytes);
        e.graph_def = std::string(f.bytes);
        break;
      case 5:
        r.expect(f, wire_type::bytes);
        e.has_summary = true;
        e.summary_bytes = std::string(f.bytes);
        e.summary = decode_summary(f.bytes, where + ".summary");
        break;
      default:
        break;
    }
  }
  return e;
}

std::string encode_graph_def(const graph& g) {
  writer w;
  for (const node& n : g.nodes()) w.message_field(1, node_def(g, n));
  // VersionDef{producer=1}: the GraphDef version TensorFlow 1.x graphs begin
  // at; TensorBoard only displays it.
  writer versions;
  versions.varint_field(1, 1);
  w.message_field(4, versions);
  return w.take();
}

std::vector<graph_def_node> decode_graph_def(std::string_view bytes, const std::string& where) {
  std::vector<graph_def_node> nodes;
  reader r(bytes, where);
  for (field f; r.next(f);) {
    if (f.number != 1) continue;
    r.expect(f, wire_type::bytes);
    nodes.push_back(decode_node(f.bytes, where));
  }
  return nodes;
}

}  // namespace actorflow
