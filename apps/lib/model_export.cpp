#include "apps/lib/model_export.hpp"

#include <filesystem>
#include <system_error>

#include "actors/serving/export.hpp"
#include "ops/reduce.hpp"
#include "ops/softmax.hpp"
#include "ops/state.hpp"

namespace actorflow::apps {

namespace fs = std::filesystem;

int64_t next_export_version(const std::string& base) {
  int64_t newest = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator(base, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    auto name = it->path().filename().string();
    if (!name.empty() && name.size() <= 18 &&
        name.find_first_not_of("0123456789") == std::string::npos)
      newest = std::max<int64_t>(newest, std::stoll(name));
  }
  return newest + 1;
}

std::string export_classifier(session& s, const models::classifier& net, const std::string& base) {
  graph& g = s.owner();
  auto scope = g.name_scope("serving");
  auto images = placeholder(g, dtype::float32, {-1, 28, 28, 1}, "images");
  auto logits = net.logits(images);
  auto probabilities = softmax(logits, "probabilities");
  auto classes = argmax(logits, 1, "classes");
  std::string dir = (fs::path(base) / std::to_string(next_export_version(base))).string();
  export_model(s, dir,
               {{.inputs = {{"images", images}},
                 .outputs = {{"probabilities", probabilities}, {"classes", classes}}}});
  return dir;
}

}  // namespace actorflow::apps
