// The harness's registered cases. A family registers its cases from a static
// initializer; cases whose inputs come from kernels (random_source) register a
// function instead, called on first use: in a test executable the library's
// op registrations are static initializers too, in no set order, so no kernel
// may run before main.
#pragma once
#include <vector>

namespace actorflow::testing {

template <class Case>
class case_list {
 public:
  using factory = std::vector<Case> (*)();

  void add(std::vector<Case> cases) {
    for (auto& c : cases) ready_.push_back(std::move(c));
  }
  void add(factory make) { pending_.push_back(make); }

  /// Every case, the factories' built now (once).
  std::vector<Case>& all() {
    for (auto make : pending_) add(make());
    pending_.clear();
    return ready_;
  }

 private:
  std::vector<Case> ready_;
  std::vector<factory> pending_;
};

}  // namespace actorflow::testing
