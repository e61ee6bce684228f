#pragma once
/// The videos the coordinator's node serves (GET /v1/runs/{id}/jobs/{i}/video, the
/// dashboard's review page): from its own outputs when the decoder is on this host, else a
/// copy pulled over the bus from the decoder's host (`latent_fetch` kind "output", as
/// `--collect` pulls them), verified by its SHA-256 and kept in <data_dir>/review/ by
/// digest. Never a redirect: a client keeps its bearer token and gets the bytes here, with
/// range requests (206) so a browser can seek.

#include <string>

#include <nlohmann/json.hpp>

#include "config/config.hpp"

namespace vidline::nodes {

/// The folder under a data directory where fetched videos are kept by digest.
inline constexpr const char* review_subdir = "review";

/// A local path holding job `job`'s video (its status record) of run `run_id`, or "" with
/// `why` and `status` (an HTTP status: 404 not here, 502 its host did not give it).
std::string local_video(const config::cluster& c, const config::host& self,
                        const std::string& run_id, const nlohmann::json& job, std::string& why,
                        int& status);

} // namespace vidline::nodes
