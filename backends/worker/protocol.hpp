#pragma once
/// The worker protocol, version 2 (docs/worker.md is its spec): how a node and a
/// long-lived worker process talk over the one socket the worker finds at descriptor 3.
/// Each message is one JSON object on one line, with "v": 2 and a "type". Version 2 adds
/// the shot to a request (job.workflow, job.model, job.negative_prompt, job.params and one
/// inputs.NAME per named input); the worker's messages are the same in both versions, so a
/// worker's line of version 1 is still read. A version-1 worker is told the node's version
/// (VIDLINE_WORKER_PROTOCOL) and refuses it at start, naming both.
///
///   node -> worker: request (a stage to run), cancel (of a request), ping, shutdown,
///                   preempt (of a sample request: save a checkpoint at the next step and
///                   end with outcome "preempted"),
///                   load (a model to load now, before any request: only to a worker whose
///                   hello said "load": true)
///   worker -> node: hello (once, when it is ready), progress (step i of n), result (one
///                   per request: an outcome class and cold/warm, and optionally the model
///                   it has loaded with an identity of its weights), pong (to a ping),
///                   loaded (one per load: the model, its identity and the load's seconds),
///                   checkpoint (a sample request's state saved after step i: a file in the
///                   request's checkpoint.dir, handed over to the node)
///
/// Checkpoints are optional additions too: a request's "checkpoint" (dir, interval_s) and
/// "resume" (step, file, sha256) are ignored by a worker that does not know them, which
/// then samples from step 0 as before (its latent is the same either way).
///
/// The model fields, hello's "load" and the load/loaded pair are optional additions to
/// version 2: a worker without them is served as before (its results name no model, its
/// pools are not warmed before their first job).
///
/// Pure: no I/O. Unknown fields are ignored (fields are only ever added); a message of
/// another version, an unknown type or a field of the wrong type is an error naming it.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vidline::backends::worker {

constexpr int protocol_version = 2;
/// The oldest version whose worker lines the node still reads.
constexpr int oldest_worker_version = 1;
/// The descriptor of the worker's socket in the worker process.
constexpr int worker_fd = 3;
/// Longest line either side may send, in bytes (a result's error text is cut well before).
constexpr std::size_t max_line_bytes = 1 << 20;

/// A stage to run: what the worker needs, with absolute paths.
struct request {
  std::string id;                     ///< unique per attempt: the attempt's id
  std::string stage;                  ///< "encode" | "sample" | "decode"
  // The job (empty/zero for encode, which has only a prompt).
  std::string run_id;
  uint32_t index = 0;
  uint64_t seed = 0;
  uint32_t width = 0, height = 0, seconds = 0, frames = 0, fps = 0;
  std::string prompt;
  // The shot (version 2): its workflow, model key, negative prompt and params.
  std::string workflow, model, negative_prompt;
  std::vector<std::pair<std::string, std::string>> params_json;  ///< name -> value as JSON text
  /// The job's named inputs beside the fixed ones: name -> path on this host.
  std::vector<std::pair<std::string, std::string>> named_inputs;
  // Input files ("" when the stage has none).
  std::string prompt_file, conditioning, latent, latent_sha256, reference;
  std::string output;                 ///< where the worker must leave its product
  std::string work_dir;               ///< private to this attempt
  double timeout_s = 0;               ///< 0 = none (the node enforces it either way)
  // Checkpoints (sample only): where to save them and how often; where to go on from.
  std::string checkpoint_dir;         ///< "" = save none
  double checkpoint_interval_s = 0;
  uint32_t resume_step = 0;           ///< 0 = from the start
  std::string resume_file, resume_sha256;
};

/// A message from the worker.
struct worker_message {
  enum class kind { hello, progress, result, pong, loaded, checkpoint };
  kind type = kind::hello;
  std::string id;                     ///< progress, result: the request's id
  uint32_t step = 0, steps = 0;       ///< progress, checkpoint (steps 0 = not said)
  std::string file;                   ///< checkpoint: the saved state's file
  std::string outcome;                ///< result: ok | capacity | transient | fatal
  bool cold = false;                  ///< result: the model was loaded for this request
  std::string error;                  ///< result: why, when not ok
  std::vector<std::string> stages;    ///< hello: the stages it serves
  bool takes_load = false;            ///< hello: it answers load messages ("load": true)
  uint64_t seq = 0;                   ///< pong
  /// result, loaded: the model it has loaded (its key) and an identity that changes when
  /// its weights change ("sha256:<hex>"); "" = not said.
  std::string model;
  std::string model_identity;
  double load_s = 0;                  ///< loaded: seconds the load took
};

/// A model to load before any request (the node's warm start). `id` names the answer.
struct load_request {
  std::string id;
  std::string stage;                  ///< the stage it is loaded for ("sample")
  std::string workflow;
  std::string model;
};

std::string encode_request(const request& r);
std::string encode_cancel(const std::string& id);
std::string encode_ping(uint64_t seq);
std::string encode_shutdown();
std::string encode_load(const load_request& l);
std::string encode_preempt(const std::string& id);
/// Each encode_* returns one line ending in '\n'.

/// One line from the worker (without its '\n'); nullopt with `error` naming what is wrong.
std::optional<worker_message> decode_worker_line(std::string_view line, std::string& error);

/// The node's messages decoded (for tests and for workers written in C++).
std::optional<request> decode_request(std::string_view line, std::string& error);
std::optional<load_request> decode_load(std::string_view line, std::string& error);

/// Splits a byte stream into lines; refuses a line longer than max_line_bytes.
class line_reader {
public:
  /// Appends bytes; false when the current line grew past the limit (the stream is broken).
  bool feed(std::string_view bytes);
  /// The next complete line (without '\n'), if any.
  std::optional<std::string> next();

private:
  std::string buf_;
  std::size_t scanned_ = 0;
};

} // namespace vidline::backends::worker
