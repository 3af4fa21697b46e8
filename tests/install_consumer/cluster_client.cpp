// An outside cluster client built against an installed actorflow
// (test_install): it runs a product on a ps task, a separate process
// (the installed actorflow-node) started by the test, and checks the value.
// Args: the ps task's host:port and a free host:port for itself.
#include <actorflow/actorflow.hpp>
#include <iostream>

namespace af = actorflow;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: cluster_client PS_HOST:PORT WORKER_HOST:PORT\n";
    return 2;
  }
  try {
    auto spec = af::cluster_spec::from_hosts(argv[1], argv[2]);
    af::cluster_options options;
    options.connect_timeout = std::chrono::seconds(20);
    auto cluster = std::make_shared<af::cluster_connection>(std::make_shared<af::runtime>(), spec,
                                                            "/job:worker/task:0", options);
    af::graph g;
    auto x = af::placeholder(g, af::dtype::float32, {2, 2}, "x");
    af::output product;
    {
      auto on_ps = g.device_scope("/job:ps/task:0");
      product = af::matmul(x, x, false, false, "on_ps");
    }
    af::session s(g, cluster);
    auto out = s.eval(product, {{x, af::tensor::from_vector<float>({1, 2, 3, 4}, {2, 2})}});
    if (out.to_vector<float>() != std::vector<float>{7, 10, 15, 22}) {
      std::cerr << "cluster_client: wrong product " << out << "\n";
      return 1;
    }
    std::cout << "cluster client ok: " << out << "\n";
    return 0;
  } catch (const af::error& e) {
    std::cerr << "cluster_client: " << e.what() << " (" << af::error_code_name(e.code()) << ")\n";
    return 1;
  }
}
