#include "actors/run/messages.hpp"

namespace actorflow {

namespace {

// Loops nest a few deep in real graphs; a deeper path is a peer's garbage.
constexpr uint32_t max_wire_frame_depth = 64;

caf::error tag_error(const std::string& what) {
  return caf::make_error(caf::sec::invalid_argument, "[wire] frame tag: " + what);
}

}  // namespace

caf::error save_frame_tag(caf::serializer& sink, frame_tag& x) {
  std::vector<const frame_tag*> path;
  for (const frame_tag* t = &x; t != nullptr; t = t->parent.get()) path.push_back(t);
  static const frame_tag root;
  if (!path.back()->is_root()) path.push_back(&root);  // implied for a first-level frame
  auto depth = static_cast<uint32_t>(path.size());
  if (auto err = sink(depth)) return err;
  for (size_t i = path.size(); i-- > 0;) {
    uint64_t frame = path[i]->frame, iteration = path[i]->iteration;
    if (auto err = sink(frame, iteration)) return err;
  }
  return caf::none;
}

caf::error load_frame_tag(caf::deserializer& source, frame_tag& x) {
  uint32_t depth = 0;
  if (auto err = source(depth)) return err;
  if (depth == 0 || depth > max_wire_frame_depth)
    return tag_error("depth " + std::to_string(depth) + " is outside 1.." +
                     std::to_string(max_wire_frame_depth));
  std::shared_ptr<const frame_tag> parent;
  frame_tag t;
  for (uint32_t i = 0; i < depth; ++i) {
    if (i > 1) parent = std::make_shared<const frame_tag>(std::move(t));  // the root stays implied
    t = frame_tag{};
    if (auto err = source(t.frame, t.iteration)) return err;
    if ((t.frame == 0) != (i == 0)) return tag_error("frame 0 is the root, and only the root");
    t.parent = parent;
  }
  x = std::move(t);
  return caf::none;
}

void step_request::complete(std::vector<tensor> fetched, const std::string& message,
                            error_code code) {
  if (message.empty())
    result.set_value(std::move(fetched));
  else
    result.set_exception(std::make_exception_ptr(error(message, code)));
  if (on_done) on_done();
}

}  // namespace actorflow
