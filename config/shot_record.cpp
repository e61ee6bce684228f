#include "config/shot_record.hpp"

#include "common/sha256.hpp"
#include "config/shot_identity.hpp"

#ifndef VIDLINE_VERSION
#define VIDLINE_VERSION "unknown"
#endif

namespace vidline::config {

using nlohmann::json;

const char* vidline_version() { return VIDLINE_VERSION; }

json shot_record(const msg::job_spec& j) {
  json params = json::object();
  for (auto& p : j.params)
    params[p.name] = param_json(p);
  json inputs = json::object();
  for (auto& i : j.inputs)
    inputs[i.name] = i.sha256.empty() ? json(nullptr) : json(i.sha256);
  return {{"workflow", j.workflow.empty() ? json(nullptr) : json(j.workflow)},
          {"model", j.model.empty() ? json(nullptr) : json(j.model)},
          {"params", std::move(params)},
          {"inputs", std::move(inputs)},
          {"negative_prompt_sha256", to_hex(sha256_of(j.negative_prompt))},
          {"ident", inputs_known(j) ? json(to_hex(ident(j))) : json(nullptr)},
          {"vidline_version", vidline_version()}};
}

} // namespace vidline::config
