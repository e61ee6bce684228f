#include "nodes/http_server_impl.hpp"

// PUT /v1/inputs/{sha256} (docs/http.md): an image a shot names by its digest, stored on
// the coordinator's node.

namespace vidline::nodes {

void http_server::impl::put_input(const httplib::Request& req, httplib::Response& res) {
  // `vidline run` uploads over the bus; this is the same store for HTTP clients
  // (nodes/inputs.hpp). The coordinator's node keeps it, named by the digest given.
  const std::string sha = req.matches.size() > 1 ? std::string(req.matches[1]) : std::string();
  if (req.has_header("Transfer-Encoding") && req.body.size() > data::max_input_bytes) {
    send_error(res, 413, "the image is over the limit of " + std::to_string(data::max_input_bytes) +
                             " bytes for an input");
    return;
  }
  data::input_store::whole_result r;
  {
    std::lock_guard<std::mutex> l(inputs_mutex);
    r = inputs->put_whole(sha, req.body);
  }
  if (r.status >= 400) {
    send_error(res, r.status, r.error);
    return;
  }
  res.set_header("Location", "/v1/inputs/" + sha);
  send_json(res, r.status, {{"sha256", sha}, {"bytes", req.body.size()},
                            {"stored", r.status == 201 ? "now" : "before"}});
}

} // namespace vidline::nodes
