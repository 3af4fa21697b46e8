// Builds and runs a graph through the installed headers and library.
#include <actors/session.hpp>
#include <core/version.hpp>
#include <iostream>
#include <ops/math.hpp>
#include <ops/state.hpp>

int main() {
  actorflow::graph g;
  auto x = actorflow::placeholder(g, actorflow::dtype::float32, {-1}, "x");
  auto y = x * 3.0 + 1.0;
  actorflow::session s(g);
  auto out = s.eval(y, {{x, actorflow::tensor::from_vector<float>({1, 2})}});
  auto v = out.to_vector<float>();
  if (v != std::vector<float>{4, 7}) {
    std::cerr << "wrong result: " << out << "\n";
    return 1;
  }
  std::cout << "consumer ok (actorflow " ACTORFLOW_VERSION "): " << out << "\n";
  return 0;
}
