#include "core/op_registry.hpp"

namespace actorflow {

const char* attr_kind_name(const attr_value& v) {
  static const char* names[] = {"int",   "float",    "bool",       "string",
                                "dtype", "int list", "float list", "tensor"};
  return names[v.index()];
}

tensor& kernel_context::allocate_output(size_t i, dtype type, shape dims) {
  if (outputs.size() < i) outputs.resize(i);
  // The usual case, outputs allocated in order: construct in place.
  if (outputs.size() == i) return outputs.emplace_back(type, std::move(dims));
  return outputs[i] = tensor(type, std::move(dims));
}

tensor& kernel_context::reuse_or_allocate_output(size_t i, size_t from, dtype type,
                                                 const shape& dims) {
  const tensor& in = inputs[from];
  if (in.num_elements() > 0 && in.is_unique() && in.type() == type && in.dims() == dims) {
    set_output(i, in);
    return outputs[i];
  }
  return allocate_output(i, type, dims);
}

void kernel_context::set_output(size_t i, tensor t) {
  if (outputs.size() <= i) outputs.resize(i + 1);
  outputs[i] = std::move(t);
}

op_registry& op_registry::global() {
  static op_registry registry;
  return registry;
}

void op_registry::add(op_def def) {
  if (def.name.empty()) fail("op_registry", "op without a name");
  if (!def.infer) fail("op_registry", "op '" + def.name + "' has no shape function");
  if (!def.kernel && def.make_kernel)
    def.kernel = [make = def.make_kernel](kernel_context& ctx) { make(ctx.attrs)(ctx); };
  if (!def.kernel && !def.update) fail("op_registry", "op '" + def.name + "' has no kernel");
  if (def.acts_on_resource()) {
    if (def.role != op_role::kernel && def.role != op_role::resource_op)
      fail("op_registry", "op '" + def.name + "' acts on a resource but has another role");
    def.role = op_role::resource_op;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  auto name = def.name;
  if (!ops_.emplace(name, std::make_unique<op_def>(std::move(def))).second)
    fail("op_registry", "op '" + name + "' registered twice");
}

const op_def* op_registry::find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : it->second.get();
}

const op_def& op_registry::get(const std::string& name) const {
  if (auto def = find(name)) return *def;
  fail("graph", "unknown op '" + name + "'");
}

std::vector<const op_def*> op_registry::all() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<const op_def*> out;
  for (auto& [name, def] : ops_) out.push_back(def.get());
  return out;
}

std::vector<tensor_spec> infer_outputs(const op_def& def, const std::vector<tensor_spec>& inputs,
                                       const attr_map& attrs,
                                       const std::vector<tensor>* constant_inputs) {
  int n = static_cast<int>(inputs.size());
  if (def.num_inputs >= 0 && n != def.num_inputs)
    fail(def.name,
         "expects " + std::to_string(def.num_inputs) + " inputs, got " + std::to_string(n));
  if (def.num_inputs < 0 && n < def.min_inputs)
    fail(def.name, "expects at least " + std::to_string(def.min_inputs) + " inputs, got " +
                       std::to_string(n));
  shape_context ctx{def.name, inputs, attrs, constant_inputs};
  return def.infer(ctx);
}

std::vector<tensor> run_kernel(const std::string& op, std::vector<tensor> inputs,
                               const attr_map& attrs, uint64_t invocation) {
  const op_def& def = op_registry::global().get(op);
  if (!def.kernel) fail(op, "has no standalone kernel (it updates a variable)");
  std::vector<tensor_spec> specs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].valid()) fail(op, "input " + std::to_string(i) + " is an empty tensor");
    specs.push_back({inputs[i].type(), inputs[i].dims()});
  }
  auto expected = infer_outputs(def, specs, attrs, &inputs);
  std::string name = op;
  kernel_context ctx{def.name, name, attrs, std::move(inputs), {}, invocation};
  def.kernel(ctx);
  if (ctx.outputs.size() != expected.size())
    fail(op, "kernel produced " + std::to_string(ctx.outputs.size()) + " outputs, expected " +
                 std::to_string(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    auto& t = ctx.outputs[i];
    if (!t.valid() || t.type() != expected[i].type || !expected[i].dims.compatible_with(t.dims()))
      fail(op, "kernel output " + std::to_string(i) + " is " +
                   (t.valid() ? tensor_spec{t.type(), t.dims()}.to_string() : "empty") +
                   ", shape function said " + expected[i].to_string());
  }
  return std::move(ctx.outputs);
}

}  // namespace actorflow
