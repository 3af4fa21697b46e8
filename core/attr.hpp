// Node attributes: compile-time parameters of an op (axes, strides, a constant's value).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "core/export.hpp"
#include "core/tensor.hpp"

namespace actorflow {

using attr_value = std::variant<int64_t, double, bool, std::string, dtype, std::vector<int64_t>,
                                std::vector<double>, tensor>;
using attr_map = std::map<std::string, attr_value>;

/// Name of the attr_value alternative held ("int", "float", ...), for errors.
ACTORFLOW_API const char* attr_kind_name(const attr_value& v);

/// Reads attribute `name` as T; throws "[op] attribute 'name' ..." when missing or of another kind.
/// T = int is accepted for int64_t attributes, float for double ones.
template <class T>
T get_attr(const attr_map& attrs, const std::string& name, const std::string& op) {
  auto it = attrs.find(name);
  if (it == attrs.end()) fail(op, "missing attribute '" + name + "'");
  if constexpr (std::is_same_v<T, int>) {
    if (auto p = std::get_if<int64_t>(&it->second)) return static_cast<int>(*p);
  } else if constexpr (std::is_same_v<T, float>) {
    if (auto p = std::get_if<double>(&it->second)) return static_cast<float>(*p);
  } else {
    if (auto p = std::get_if<T>(&it->second)) return *p;
  }
  fail(op, "attribute '" + name + "' has kind " + attr_kind_name(it->second));
}

/// Like get_attr, with a default when the attribute is absent.
template <class T>
T get_attr_or(const attr_map& attrs, const std::string& name, const std::string& op, T fallback) {
  return attrs.count(name) ? get_attr<T>(attrs, name, op) : fallback;
}

/// Declares, inside a context struct with members `op` and `attrs` (the shape,
/// kernel, gradient and GPU kernel contexts), ctx.attr<T>(name),
/// ctx.attr_or<T>(name, fallback) and ctx.fail(what), whose errors name the op.
/// A macro rather than a base class: the contexts stay aggregates with no base,
/// which their callers brace-initialize member by member ({op, node_name, ...}).
#define ACTORFLOW_ATTR_ACCESSORS                                   \
  template <class T>                                               \
  T attr(const std::string& name) const {                          \
    return ::actorflow::get_attr<T>(attrs, name, op);              \
  }                                                                \
  template <class T>                                               \
  T attr_or(const std::string& name, T fallback) const {           \
    return ::actorflow::get_attr_or<T>(attrs, name, op, fallback); \
  }                                                                \
  [[noreturn]] void fail(const std::string& what) const { ::actorflow::fail(op, what); }

}  // namespace actorflow
