#include "nodes/http_review.hpp"

#include "common/text.hpp"
#include "nodes/bus/bus.hpp"
#include "nodes/verbs/client.hpp"
#include "nodes/verbs/exit_codes.hpp"
#include "nodes/bus/keys.hpp"
#include "nodes/verbs/commands.hpp"

namespace vidline::nodes {

using nlohmann::json;

std::optional<msg::review_take> parse_review(const std::string& run_id, uint32_t index,
                                             const std::string& body, api_error& err) {
  json doc;
  try {
    doc = json::parse(body);
  } catch (const json::parse_error& e) {
    err = {400, std::string("the body is not JSON: ") + e.what()};
    return std::nullopt;
  }
  if (!doc.is_object()) {
    err = {400, std::string("the body must be a JSON object, got ") + doc.type_name()};
    return std::nullopt;
  }
  for (auto it = doc.begin(); it != doc.end(); ++it)
    if (it.key() != "verdict" && it.key() != "another_take") {
      err = {400, "unknown field '" + text::to_valid_utf8(it.key()) +
                      "' (a review takes verdict and another_take)"};
      return std::nullopt;
    }
  msg::review_take r;
  r.run_id = run_id;
  r.index = index;
  if (!doc.contains("verdict") || !doc["verdict"].is_string() ||
      (doc["verdict"] != "accept" && doc["verdict"] != "reject")) {
    err = {400, "field 'verdict' must be \"accept\" or \"reject\""};
    return std::nullopt;
  }
  r.verdict = doc["verdict"].get<std::string>();
  if (doc.contains("another_take")) {
    if (!doc["another_take"].is_boolean()) {
      err = {400, std::string("field 'another_take' must be true or false, got ") +
                      doc["another_take"].type_name()};
      return std::nullopt;
    }
    r.another_take = doc["another_take"].get<bool>();
  }
  if (r.another_take && r.verdict != "reject") {
    err = {400, "field 'another_take' goes with the verdict \"reject\""};
    return std::nullopt;
  }
  return r;
}

msg::review_reply request_review(const config::cluster& c, const msg::review_take& req,
                                 int timeout_ms) {
  const auto* h = c.find_host(c.coordinator);
  if (h == nullptr)
    throw config::config_error("/coordinator", "names no host of the config");
  const std::string endpoint = "tcp://" + h->address + ":" + std::to_string(h->port);
  client cl(endpoint, c.knobs, client_security_for(c, c.coordinator));
  auto reply = cl.request("coordinator", req, timeout_ms);
  if (!reply)
    throw coordinator_error(exit_code::unreachable,
                            "no answer from the coordinator at " + endpoint + " within " +
                              std::to_string((timeout_ms + 999) / 1000) + " s");
  msg::review_reply r;
  if (reply->env.type != msg::review_reply::wire_name ||
      !msg::unpack_body_as(reply->body, wire_limits(c.knobs), r))
    throw coordinator_error(exit_code::refused,
                            "the coordinator answered something else than a review_reply "
                            "(a coordinator older than the review?)");
  return r;
}

int review_status(const msg::review_reply& r) {
  if (r.error.empty())
    return 200;
  if (r.code == msg::reply_code::no_such_run)
    return 404;
  if (r.code == "invalid")
    return 400;
  return 409;
}

json review_json(const msg::review_reply& r) {
  return {{"run_id", r.run_id},
          {"index", r.index},
          {"verdict", r.verdict},
          {"take", r.take_index >= 0 ? json{{"index", r.take_index}, {"seed", r.take_seed}}
                                     : json(nullptr)},
          {"state", r.state}};
}

} // namespace vidline::nodes
