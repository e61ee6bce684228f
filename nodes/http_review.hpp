#pragma once
/// The review over HTTP (`POST /v1/runs/{id}/jobs/{i}/review`, docs/http.md "Review"): a
/// reviewer accepts or rejects a take; a reject may ask for another take of its shot, which
/// the coordinator adds to the run with the shot's next seed.

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "messages/review.hpp"
#include "nodes/http_requests.hpp"

namespace vidline::nodes {

/// The body `{"verdict": "accept" | "reject", "another_take": bool}` (another_take optional,
/// false; only with "reject") as a review_take of job `index` of run `run_id`, or the error
/// naming what is wrong (400).
std::optional<msg::review_take> parse_review(const std::string& run_id, uint32_t index,
                                             const std::string& body, api_error& err);

/// The HTTP status of an answer: 200, or 404 (no such run or job), 409 (not reviewable
/// now: a video not made, a cancelled run, the run's job limit), 400 (invalid).
int review_status(const msg::review_reply& r);

/// The answer's body: run_id, index, verdict, take ({index, seed} of the take a reject
/// added, or null), state (the run's).
nlohmann::json review_json(const msg::review_reply& r);

} // namespace vidline::nodes
