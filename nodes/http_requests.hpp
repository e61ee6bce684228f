#pragma once
/// The bodies of the HTTP API's requests read into the messages the coordinator takes
/// (docs/http.md, docs/openapi.json): every field checked, an error naming the one that is
/// wrong. Also the bearer token file. Pure but for read_token_file.

#include <cstdint>
#include <optional>
#include <string>

#include "messages/messages.hpp"

namespace vidline::nodes {

/// A request the API refused before it reached the coordinator: the HTTP status and what
/// is wrong.
struct api_error {
  int status = 400;
  std::string message;
};

/// The body of `POST /v1/runs` as a submit_run (the fields of `vidline run`), or the
/// error naming the field that is wrong (unknown field, wrong type, out of range).
/// A missing request_id is left empty (the server gives one).
/// `priority` (optional, default 0) within +-api_max_priority (as `vidline run --priority`).
/// Either the uniform batch (prompt, width, height, seconds, count, seed) or a shot list
/// (`shots`: an array of shots with the fields of a shot line, docs/shots.md, the prompt as
/// text) with none of the uniform fields; each shot's errors name it ("shots[2].width").
std::optional<msg::submit_run> parse_submit(const std::string& body, api_error& err);

/// The body of `POST /v1/runs/{run_id}/jobs` as a submit_jobs for run `run_id` (the fields
/// of `vidline submit`), or the error naming the field that is wrong.
std::optional<msg::submit_jobs> parse_add_jobs(const std::string& run_id, const std::string& body,
                                               api_error& err);

/// A body that must say nothing (resume, cancel): empty or `{}`; else false and the error
/// naming the first field (`what`: the request, for the message).
bool parse_empty_body(const std::string& body, const std::string& what, api_error& err);

/// The largest run priority either way: actors::coordinator::max_priority (`vidline run --priority`).
inline constexpr int64_t api_max_priority = 1000000;

/// The token in a token file: its text without surrounding whitespace. Throws
/// std::runtime_error naming the file when it cannot be read or holds no token.
std::string read_token_file(const std::string& path);

} // namespace vidline::nodes
