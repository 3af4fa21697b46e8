#include "ops/functional.hpp"

#include "core/error.hpp"
#include "ops/control_flow.hpp"
#include "ops/math.hpp"
#include "ops/state.hpp"
#include "ops/tensor_array.hpp"

namespace actorflow {

namespace {

int64_t known_rows(const output& elems, const std::string& where) {
  if (elems.dims().rank() < 1 || elems.dims().dim(0) < 0)
    fail(where, "elems must have a known first dim, not " + elems.dims().to_string());
  return elems.dims().dim(0);
}

void check_result(const std::string& where, const output& got, const tensor_spec& want) {
  if (!got.valid()) fail(where, "fn returned no tensor");
  if (got.type() != want.type || got.dims() != want.dims)
    fail(where, "fn returns " + got.spec().to_string() + " but " + want.to_string() +
                    " was expected (each call must return the same dtype and shape)");
}

// A loop over the rows of elems that writes step(i, row, carried) into an
// array of `spec` per row; `carried` is an extra loop variable (scan's
// accumulator) or none. Returns the array stacked.
output loop_over_rows(
    output elems, const tensor_spec& spec, std::optional<output> carried, const map_options& o,
    const std::function<output(output row, std::optional<output> carried)>& step) {
  const std::string where = o.name;
  const int64_t n = known_rows(elems, where);
  if (!spec.dims.is_fully_defined())
    fail(where, "fn's result must have a fully defined shape, not " + spec.dims.to_string());
  graph& g = elems.owner();
  auto rows = unstack_to_tensor_array(elems, o.name + "_elems");
  auto results = make_tensor_array(g, spec.type, n, spec.dims, false, o.name + "_results");
  std::vector<output> vars{scalar<int32_t>(g, 0), results.data, results.written};
  if (carried) vars.push_back(*carried);
  auto outs = while_loop(
      [&](const std::vector<output>& v) { return less(v[0], scalar<int32_t>(g, int32_t(n))); },
      [&](const std::vector<output>& v) {
        auto i = v[0];
        std::optional<output> acc;
        if (carried) acc = v[3];
        auto value = step(rows.read(i), acc);
        check_result(where, value, spec);
        auto written = results.with(v[1], v[2]).write(i, value);
        std::vector<output> next{i + scalar<int32_t>(g, 1), written.data, written.written};
        if (carried) next.push_back(value);
        return next;
      },
      vars, {.parallel_iterations = o.parallel_iterations, .name = o.name});
  return results.with(outs[1], outs[2]).stack();
}

}  // namespace

output map_fn(const std::function<output(output)>& fn, output elems, const map_options& o) {
  known_rows(elems, o.name);
  const auto& d = elems.dims().dims();
  tensor_spec row{elems.type(), shape(std::vector<int64_t>(d.begin() + 1, d.end()))};
  tensor_spec spec = o.result.value_or(row);
  return loop_over_rows(elems, spec, std::nullopt, o,
                        [&](output x, std::optional<output>) { return fn(x); });
}

output scan(const std::function<output(output, output)>& fn, output elems, output initializer,
            map_options o) {
  return loop_over_rows(elems, initializer.spec(), initializer, o,
                        [&](output x, std::optional<output> acc) { return fn(*acc, x); });
}

}  // namespace actorflow
