#pragma once
/// A ComfyUI server's HTTP API as vidline uses it (docs/backends.md, "ComfyUI's API"):
/// submit, history, queue, interrupt, upload, view, system_stats, object_info.
///
/// Each call opens its own connection (no state shared between threads) and sends no
/// Origin header (ComfyUI answers 403 to a loopback Host with a foreign Origin).
/// Failures are exceptions of two kinds, because the backend treats them differently:
/// `unreachable` (no connection, a timeout, a 5xx: the server may come back) and
/// `refused` (a 4xx: the request itself is wrong).

#include <cstdint>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace vidline::backends::comfyui {

/// The server did not answer, or answered 5xx.
class unreachable : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// The server answered 4xx; `body` holds its JSON (or text).
class refused : public std::runtime_error {
public:
  refused(int status, std::string body, const std::string& what)
      : std::runtime_error(what), status_(status), body_(std::move(body)) {}
  int status() const noexcept { return status_; }
  const std::string& body() const noexcept { return body_; }

private:
  int status_;
  std::string body_;
};

/// Where a server is and how long to wait for it.
struct endpoint {
  std::string host = "127.0.0.1";
  int port = 8188;
  double connect_timeout_s = 5;
  double read_timeout_s = 30;   ///< per read while waiting for / reading a response

  /// From "http://host:port" (no path, no https). Throws std::invalid_argument.
  static endpoint parse(const std::string& url);
  std::string url() const;
};

/// What /queue says.
struct queue_state {
  std::set<std::string> running;
  std::set<std::string> pending;
  bool holds(const std::string& id) const { return running.count(id) || pending.count(id); }
};

class client {
public:
  explicit client(endpoint e) : e_(std::move(e)) {}

  /// POST /prompt. Returns the reply (prompt_id, number, node_errors). Throws refused with
  /// the 400 body (error, node_errors) when ComfyUI rejects the workflow. A 200 reply may
  /// still carry node_errors: the outputs that failed validation, left out while the valid
  /// ones were queued; the caller decides what that means.
  nlohmann::json submit(const nlohmann::json& workflow, const std::string& prompt_id,
                        const std::string& client_id);

  /// GET /history/{id}: the entry once the prompt has ended, nullopt before.
  std::optional<nlohmann::json> history(const std::string& prompt_id);

  /// GET /queue.
  queue_state queue();

  /// POST /interrupt {"prompt_id"} (stops it if it is the one running).
  void interrupt(const std::string& prompt_id);

  /// POST /queue {"delete": [id]} (removes it if still pending).
  void delete_pending(const std::string& prompt_id);

  /// POST /upload/image (multipart, streamed from `file`) as `name` into `subfolder` of the
  /// input directory, overwriting. Returns the name to give a loader node:
  /// "<subfolder>/<name>" as the server reports it.
  std::string upload(const std::string& file, const std::string& name,
                     const std::string& subfolder);

  /// GET /view?filename&subfolder&type, streamed into `dest`. Returns the bytes written.
  uint64_t view(const std::string& filename, const std::string& subfolder,
                const std::string& type, const std::string& dest);

  /// GET /system_stats and GET /object_info.
  nlohmann::json system_stats();
  nlohmann::json object_info();

  const endpoint& where() const { return e_; }

private:
  endpoint e_;
};

/// "<type>: <message>" plus the node errors of a 400 body from POST /prompt, one line.
std::string describe_rejection(const std::string& body);

/// "node <id> (<class>): <message> <details>; node ..." for the node_errors of a POST
/// /prompt answer (400 or 200), one line; "" when there are none.
std::string describe_node_errors(const nlohmann::json& node_errors);

/// The files a node's entry of history "outputs" lists (any key whose value is a list of
/// {filename, subfolder, type}: "latents" for SaveLatent, "images" for SaveVideo, "gifs"
/// for VHS), in order.
struct output_file {
  std::string filename, subfolder, type;
};
std::vector<output_file> files_of(const nlohmann::json& node_outputs);

/// A lowercase canonical UUID (RFC 9562 version 8) made from SHA-256 of `key`: the same
/// key gives the same id, so a resubmission finds its earlier prompt.
std::string uuid_from(const std::string& key);

/// Whether `s` is a lowercase canonical UUID (what newer ComfyUI requires of prompt_id).
bool is_canonical_uuid(const std::string& s);

} // namespace vidline::backends::comfyui
