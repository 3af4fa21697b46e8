#include "devices/accelerator.hpp"

namespace actorflow {

device_value_ptr input_on_device(accelerator_launch& launch, size_t i,
                                 const std::function<device_value_ptr(const tensor&)>& copy_in) {
  const bool constant = launch.constants && i < launch.constants->is_constant.size() &&
                        launch.constants->is_constant[i] != 0;
  if (!constant) return copy_in(launch.host_inputs[i]);
  std::lock_guard<std::mutex> lock(launch.constants->mutex);
  auto& values = launch.constants->values;
  if (values.size() <= i) values.resize(i + 1);
  if (!values[i]) values[i] = copy_in(launch.host_inputs[i]);
  return values[i];
}

bool is_counter_slot(const tensor& slot, dtype value_type) {
  return slot.type() == dtype::int64 && value_type != dtype::int64 && slot.num_elements() == 1;
}

void check_restorable(const device_variable& v, const variable_state& in,
                      const std::string& device) {
  auto refuse = [&](const std::string& why) {
    fail(error_code::invalid_argument, "restore",
         "variable '" + v.name + "' on " + device + ": " + why);
  };
  if (!in.initialized()) refuse("the restored state has no value");
  const tensor_spec value{in.value.type(), in.value.dims()};
  if (value.type != v.declared.type || !v.declared.dims.compatible_with(value.dims))
    refuse("the graph declares " + v.declared.to_string() + ", the restored value is " +
           value.to_string());
  for (auto& [name, slot] : in.slots) {
    if (is_counter_slot(slot, value.type)) continue;
    if (slot.type() != value.type || slot.dims() != value.dims)
      refuse("slot '" + name + "' is " + tensor_spec{slot.type(), slot.dims()}.to_string() +
             ", not the value's " + value.to_string());
  }
}

}  // namespace actorflow
