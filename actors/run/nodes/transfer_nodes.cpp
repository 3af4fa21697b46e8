// Values that come from outside the partition: a placeholder's feed, from
// the step coordinator; a recv's, from the send of its cut edge. And the
// send, which forwards a value to its recv in another partition.
#include "actors/run/node_runner.hpp"

namespace actorflow {

namespace {

class feed_node final : public node_behaviour {
 public:
  explicit feed_node(bool recv) : recv_(recv) {}

  void fire(node_runner& r, firing& f) override {
    if (recv_) trace_transfer(r.plan(), f.step, f.tag, trace_kind::recv, f.slots[0].value);
    r.emit_value(f.step, f.tag, std::move(f.slots[0].value));
  }

 private:
  bool recv_;
};

// A send passes on errors too, so that its peer's step fails instead of
// waiting (send_to_peer).
class send_node final : public node_behaviour {
 public:
  bool sees_every_firing() const override { return true; }
  void fire(node_runner& r, firing& f) override {
    send_to_peer(r.host(), r.plan(), f.step, f.tag, f.slots, f.num_slots);
  }
};

}  // namespace

std::unique_ptr<node_behaviour> make_feed_node(bool recv) {
  return std::make_unique<feed_node>(recv);
}
std::unique_ptr<node_behaviour> make_send_node() { return std::make_unique<send_node>(); }

}  // namespace actorflow
