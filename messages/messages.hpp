#pragma once
/// The message vocabulary of vidline: plain structs, packed with msgpack on the wire and
/// carried as they are between actors of one node. No logic, no I/O.
///
/// Rules (see messages/PROTOCOL.md): fields are only ever added, at the end of a struct;
/// a struct's wire name (`wire_name`) never changes; every struct packs as a msgpack map
/// so a receiver ignores fields it does not know and defaults fields it does not get.

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <msgpack.hpp>

/// msgpack's MSGPACK_DEFINE_MAP with the unpacking a member template like the packing, so
/// a struct's decoder is compiled only where frames are decoded (messages/codec.cpp),
/// not parsed and instantiated again in each of the ~150 files that include this header
/// (about a second of build time each). The object type is not deduced: msgpack's
/// convert passes an `implicit_type`, which converts to msgpack::object as before.
#define VIDLINE_MSGPACK_MAP(...)                                                         \
  template <typename Packer>                                                              \
  void msgpack_pack(Packer& msgpack_pk) const {                                           \
    msgpack::type::make_define_map MSGPACK_DEFINE_MAP_IMPL(__VA_ARGS__)                   \
        .msgpack_pack(msgpack_pk);                                                        \
  }                                                                                       \
  template <typename Object = msgpack::object>                                            \
  void msgpack_unpack(typename std::enable_if<true, Object>::type const& msgpack_o) {     \
    msgpack::type::make_define_map MSGPACK_DEFINE_MAP_IMPL(__VA_ARGS__)                   \
        .msgpack_unpack(msgpack_o);                                                       \
  }                                                                                       \
  template <typename MSGPACK_OBJECT>                                                      \
  void msgpack_object(MSGPACK_OBJECT* msgpack_o, msgpack::zone& msgpack_z) const {        \
    msgpack::type::make_define_map MSGPACK_DEFINE_MAP_IMPL(__VA_ARGS__)                   \
        .msgpack_object(msgpack_o, msgpack_z);                                            \
  }

namespace vidline::msg {

/// Outcome classes shared by every stage and backend.
/// "ok"; "capacity" (out of memory: a limit of that pool kind, never retried on it);
/// "transient" (retried); "fatal" (job fails); "corrupt" (bytes did not hash as expected).
namespace outcome {
inline constexpr const char* ok = "ok";
inline constexpr const char* capacity = "capacity";
inline constexpr const char* transient = "transient";
inline constexpr const char* fatal = "fatal";
inline constexpr const char* corrupt = "corrupt";
/// The attempt's product lost the race: its lease ended and the coordinator gave the stage
/// to another attempt. The product was removed, never published (messages/PROTOCOL.md 6.1).
inline constexpr const char* fenced = "fenced";
/// The coordinator asked the attempt to make way for a job of a higher priority
/// (lease_grant::preempt): it saved a checkpoint at its next step and stopped. The job
/// resumes from that checkpoint later; nothing is wrong with it.
inline constexpr const char* preempted = "preempted";
} // namespace outcome

/// One named value of a shot's workflow parameters. `text` is the value's canonical text,
/// the same everywhere it is written (the sim contract's ident, the job key, `exec`
/// placeholders): a string as it is; `true` / `false`; an integer in decimal; any other
/// number as JSON writes it in shortest round-trip form (0.1, 2.5, 1e-07). `type` says how
/// to read it back: "string" | "integer" | "number" | "boolean".
struct param_value {
  std::string name;
  std::string type;
  std::string text;
  VIDLINE_MSGPACK_MAP(name, type, text)
};

/// One named input file of a job or shot, as its workflow declares it ("reference",
/// "first_frame", "last_frame", "audio", ...). Either a file (`sha256`, uploaded to the
/// coordinator's node before the submit: input_put, PUT /v1/inputs) or taken from another
/// shot of the same run (`from`): that shot's video's frame `frame`, or with `latent` its
/// latent itself. Such an input's `sha256` stays "" until the parent's output exists.
struct job_input {
  std::string name;
  std::string sha256;        ///< the file's contents (hex); "" = not made yet (from another shot)
  uint64_t bytes = 0;        ///< its size in bytes (set by the coordinator from its copy)
  std::string path;          ///< where the submitting host read it (informational; "" = none)
  std::string from;          ///< in a shot: the name of the shot it is taken from ("" = a file)
  int64_t from_index = -1;   ///< in a job: the index of that shot's job in the run (-1 = none)
  std::string frame;         ///< with `from`: "first", "last" or a frame number
  bool latent = false;       ///< with `from`: the parent's latent instead of a frame
  VIDLINE_MSGPACK_MAP(name, sha256, bytes, path, from, from_index, frame, latent)
};

/// One job of a run: what to make. Keyed by (run_id, index).
struct job_spec {
  std::string run_id;
  uint32_t index = 0;
  uint64_t seed = 0;
  uint32_t width = 0;
  uint32_t height = 0;
  uint32_t seconds = 0;
  std::string prompt;          ///< the prompt text (bounded by limits::max_prompt_bytes)
  std::string prompt_sha256;   ///< conditioning cache key
  std::string reference;       ///< optional reference image contents' path on the coordinator host
  /// The output file's stem (a shot's `name`, "-take-N" added with takes); "" = the
  /// decoder's own job-<index>-<seed>. A safe name (names::is_safe_name, at most 80).
  std::string name;
  /// SHA-256 (hex) of the reference image's contents as `vidline run` read them ("" = no
  /// reference, or a client older than it): part of the job's record and its index line.
  std::string reference_sha256;
  /// The reference image's size in bytes, set by the coordinator from its own copy in
  /// <data_dir>/inputs/<reference_sha256> (0 = no reference_sha256): the sampling host
  /// pulls that copy (latent_fetch kind "input") before it samples.
  uint64_t reference_bytes = 0;
  // -- the shot model: what a production says of each shot (docs/shots.md) -------------
  std::string negative_prompt;   ///< "" = the backend's default negative prompt
  std::string workflow;          ///< the workflow's name, after defaults (never "" once admitted)
  std::string model;             ///< the workflow's model key (e.g. "h3-fl2v-int8")
  std::vector<param_value> params;  ///< after defaults, ascending by name
  /// Named inputs, ascending by name. `reference` is also here as `inputs.reference`
  /// (reference_sha256 / reference_bytes mirror it for older readers).
  std::vector<job_input> inputs;
  std::string shot;              ///< the shot's own name ("" = unnamed); `name` adds the take
  uint32_t take = 0;             ///< which take of its shot (0-based)
  /// SHA-256 (hex) of everything that determines the output (docs/shots.md, "Job keys");
  /// "" until every input's digest is known.
  std::string key;
  std::string sequence;          ///< the sequence this job is a part of ("" = none)
  VIDLINE_MSGPACK_MAP(run_id, index, seed, width, height, seconds, prompt, prompt_sha256,
                     reference, name, reference_sha256, reference_bytes, negative_prompt,
                     workflow, model, params, inputs, shot, take, key, sequence)
};

// -- coordinator <-> pool ----------------------------------------------------------------

/// A sampler's state saved at a step boundary (docs/reliability.md, "Checkpoints"): a file
/// in its sampling host's latent store under its SHA-256, fetched by digest like a latent,
/// from which another attempt of the same job on a pool of the same kind goes on.
struct checkpoint_ref {
  uint32_t step = 0;           ///< steps done when it was saved (>= 1; 0 = none)
  uint32_t steps = 0;          ///< of how many (0 = the backend cannot tell)
  std::string sha256;          ///< lowercase hex of the file
  uint64_t bytes = 0;
  std::string host;            ///< the host whose latent store holds it
  double made_unix_s = 0;      ///< when it was saved (the sampling host's wall clock)
  uint64_t attempt = 0;        ///< the sampling attempt that saved it
  VIDLINE_MSGPACK_MAP(step, steps, sha256, bytes, host, made_unix_s, attempt)
};

/// coordinator -> pool: sample this job under this attempt id.
struct sample_order {
  static constexpr const char* wire_name = "sample_order";
  std::string pool;
  uint64_t attempt = 0;  ///< unique per (job, try); fences late results
  job_spec job;
  /// Go on from this checkpoint (step 0 = from the start): the pool verifies it by its
  /// digest (pulled from `resume.host` when it is not here) before its backend resumes.
  checkpoint_ref resume;
  VIDLINE_MSGPACK_MAP(pool, attempt, job, resume)
};

/// pool -> coordinator: how one sampling attempt ended.
struct sample_result {
  static constexpr const char* wire_name = "sample_result";
  std::string pool;
  std::string host;            ///< where the latent now lies
  uint64_t attempt = 0;
  std::string run_id;
  uint32_t index = 0;
  std::string outcome;         ///< see msg::outcome
  std::string error;           ///< human-readable reason when not ok
  std::string latent_sha256;   ///< lowercase hex
  uint64_t latent_bytes = 0;
  double conditioning_s = 0;   ///< run-clock seconds spent conditioning (0 when cached)
  double sampling_s = 0;       ///< run-clock seconds from start to the sampler's success
  bool cold = false;           ///< the model had to be loaded for this attempt
  // When the stages of this attempt ran, as the pool stamped them: unix seconds of its
  // host's wall clock (0 = not reached, or a sender older than these fields).
  double start_unix_s = 0;         ///< the pool took the order: conditioning began
  double sampling_start_unix_s = 0;  ///< conditioning done: the sampler began
  double end_unix_s = 0;           ///< the attempt ended (latent made, or the failure)
  /// The model the backend had loaded when it sampled: its key and an identity that changes
  /// when its weights change (a worker's "sha256:<hex>" of its weights, the sim's
  /// "sim:<key>"); "" = the backend cannot tell (exec, comfyui, an older sender).
  std::string model;
  std::string model_identity;
  /// The newest checkpoints this attempt saved (at most two, oldest first), so a result
  /// that ends without a latent still tells where the next attempt goes on from.
  std::vector<checkpoint_ref> checkpoints;
  /// The digest of the order's `resume` checkpoint when it did not verify (the pool's copy
  /// and every pull hashed otherwise): the coordinator drops it and resumes from the one
  /// before. "" = it verified, or there was none.
  std::string bad_checkpoint;
  VIDLINE_MSGPACK_MAP(pool, host, attempt, run_id, index, outcome, error, latent_sha256,
                     latent_bytes, conditioning_s, sampling_s, cold, start_unix_s,
                     sampling_start_unix_s, end_unix_s, model, model_identity, checkpoints,
                     bad_checkpoint)
};

/// pool -> coordinator, every status interval and on every change. Level-triggered: the
/// coordinator rebuilds its view of the pool from it, so a lost report costs nothing.
struct pool_status {
  static constexpr const char* wire_name = "pool_status";
  std::string pool;
  std::string host;
  uint64_t epoch = 0;          ///< changes every time the pool actor starts
  uint64_t busy_attempt = 0;   ///< 0 when idle
  std::vector<sample_result> unacked;  ///< results the coordinator has not acknowledged yet
  bool accepting = true;       ///< false when the host's latent budget is full
  uint64_t seq = 0;            ///< increases with every report of one epoch: stale ones lose
  uint32_t step = 0;           ///< busy_attempt's progress: step `step` of `steps`, as its
  uint32_t steps = 0;          ///< backend reports it (a worker's sampler); 0 = unknown
  uint64_t fenced = 0;         ///< products of this epoch removed because their lease ended
  /// The model its backend holds loaded now (key and identity, as sample_result says them);
  /// "" = none loaded, or the backend cannot tell.
  std::string model;
  std::string model_identity;
  /// The newest checkpoints busy_attempt saved (at most two, oldest first; level-triggered
  /// like the rest: the coordinator journals each new one).
  std::vector<checkpoint_ref> checkpoints;
  VIDLINE_MSGPACK_MAP(pool, host, epoch, busy_attempt, unacked, accepting, seq, step, steps,
                     fenced, model, model_identity, checkpoints)
};

/// coordinator -> pool or decoder: this result is durable in the journal, forget it.
struct result_ack {
  static constexpr const char* wire_name = "result_ack";
  std::string target;          ///< pool or decoder name
  uint64_t attempt = 0;
  /// The result's product lost the race (another attempt's was published first): remove
  /// it and count it. Only for a result that arrived after the stage was given away.
  bool discard = false;
  VIDLINE_MSGPACK_MAP(target, attempt, discard)
};

/// coordinator -> pool or decoder, answering every status report: the stage orders it
/// names that the coordinator still holds current, whose leases now run `lease_ms` from
/// when the worker sent that report, and those it gave up on (moved elsewhere, finished,
/// unknown). A worker commits or publishes a product only within its lease, or after a
/// grant names the attempt current; an ended attempt's product is removed, never published.
struct lease_grant {
  static constexpr const char* wire_name = "lease_grant";
  std::string target;               ///< pool or decoder name
  uint64_t epoch = 0;               ///< of the report answered
  uint64_t seq = 0;                 ///< of the report answered
  std::vector<uint64_t> current;    ///< attempts whose lease is renewed
  std::vector<uint64_t> ended;      ///< attempts given up on: drop, remove any product
  uint64_t lease_ms = 0;            ///< the lease, from when the report was sent
  /// Those of `ended` whose job the user cancelled (`vidline cancel`): stop the stage now
  /// (the backend call is cancelled, its GPU freed), do not let it run to its end.
  std::vector<uint64_t> cancelled;
  /// Of `current`: attempts asked to make way for a job of a higher priority (knob
  /// preempt_priority_gap): save a checkpoint at the next step and stop, outcome
  /// "preempted". A pool whose backend cannot checkpoint runs on.
  std::vector<uint64_t> preempt;
  VIDLINE_MSGPACK_MAP(target, epoch, seq, current, ended, lease_ms, cancelled, preempt)
};

// -- coordinator <-> decoder -------------------------------------------------------------

/// coordinator -> decoder: fetch this latent from its host, verify it, decode it.
/// Sent only against a credit the decoder granted (decoder_status::credits).
struct decode_order {
  static constexpr const char* wire_name = "decode_order";
  std::string decoder;
  uint64_t attempt = 0;
  job_spec job;
  std::string latent_sha256;
  uint64_t latent_bytes = 0;
  std::string source_host;
  /// How the latent was made, for the run's index file (docs/shots.md): the pool that
  /// sampled it and its conditioning and sampling run-clock seconds.
  std::string pool;
  double conditioning_s = 0;
  double sampling_s = 0;
  /// The identity of the model that sampled it (sample_result::model_identity; "" unknown).
  std::string model_identity;
  VIDLINE_MSGPACK_MAP(decoder, attempt, job, latent_sha256, latent_bytes, source_host, pool,
                     conditioning_s, sampling_s, model_identity)
};

/// decoder -> coordinator: how one decoding attempt ended.
struct decode_result {
  static constexpr const char* wire_name = "decode_result";
  std::string decoder;
  std::string host;
  uint64_t attempt = 0;
  std::string run_id;
  uint32_t index = 0;
  std::string outcome;
  std::string error;
  std::string output;          ///< absolute path of the video file on the decoder's host
  std::string output_sha256;
  double handoff_s = 0;        ///< run-clock seconds to fetch and verify the latent
  double decode_s = 0;         ///< run-clock seconds from the latent's arrival to the file
  std::string stage;           ///< where it ended: "handoff" (fetching) or "decode"
  // When the stages of this attempt ran, as the decoder stamped them: unix seconds of its
  // host's wall clock (0 = not reached, or a sender older than these fields).
  double start_unix_s = 0;         ///< the decoder took the order: the handoff (fetch) began
  double fetched_unix_s = 0;       ///< the latent arrived and verified (pending from here)
  double decode_start_unix_s = 0;  ///< decoding began (the one decode of this decoder)
  double end_unix_s = 0;           ///< the attempt ended (video made, or the failure)
  /// The latent it decoded (its order's): a late video adopted after the job was queued
  /// again keeps the job's record of the latent it came from ("" / 0 from older senders).
  std::string latent_sha256;
  uint64_t latent_bytes = 0;
  std::string latent_host;
  VIDLINE_MSGPACK_MAP(decoder, host, attempt, run_id, index, outcome, error, output,
                     output_sha256, handoff_s, decode_s, stage, start_unix_s, fetched_unix_s,
                     decode_start_unix_s, end_unix_s, latent_sha256, latent_bytes, latent_host)
};

/// decoder -> coordinator, every status interval and on every change (level-triggered).
/// credits = capacity - holding.size(): how many more orders the decoder will take.
struct decoder_status {
  static constexpr const char* wire_name = "decoder_status";
  std::string decoder;
  std::string host;
  uint64_t epoch = 0;
  uint32_t capacity = 2;              ///< 1 decoding + 1 pending
  std::vector<uint64_t> holding;      ///< attempts accepted and not finished
  uint32_t credits = 0;
  std::vector<decode_result> unacked;
  uint64_t seq = 0;                   ///< increases with every report of one epoch
  uint32_t pending = 0;               ///< held latents waiting behind the one decoding
  uint64_t fenced = 0;                ///< products of this epoch removed: lease ended
  VIDLINE_MSGPACK_MAP(decoder, host, epoch, capacity, holding, credits, unacked, seq, pending,
                     fenced)
};

// -- coordinator <-> latents (each host's latent store) ----------------------------------

/// One latent file a host holds. run_id/index name the job it was sampled for when the
/// host sampled it (empty/0 for a latent it received).
struct latent_held {
  std::string sha256;
  uint64_t bytes = 0;
  std::string run_id;
  uint32_t index = 0;
  /// A sampler's checkpoint of that job (checkpoint_ref), not its latent: the step it was
  /// saved at (0 = a latent) and the attempt that saved it.
  uint32_t checkpoint_step = 0;
  uint64_t attempt = 0;
  VIDLINE_MSGPACK_MAP(sha256, bytes, run_id, index, checkpoint_step, attempt)
};

/// latents -> coordinator, every status interval (level-triggered): the latents on this
/// host that no release covers yet. The coordinator answers with latent_release for those
/// no unfinished job needs, and adopts one sampled for a job still waiting for a latent.
struct latent_holdings {
  static constexpr const char* wire_name = "latent_holdings";
  std::string host;
  uint64_t epoch = 0;
  uint64_t seq = 0;
  std::vector<latent_held> latents;
  uint64_t bytes = 0;        ///< every latent byte on the host, retained ones included
  bool accepting = true;     ///< bytes < latent_budget_bytes
  VIDLINE_MSGPACK_MAP(host, epoch, seq, latents, bytes, accepting)
};

/// coordinator -> latents: these latents' jobs were decoded; remove them after
/// latent_retention_s. Repeated as long as a host reports them.
struct latent_release {
  static constexpr const char* wire_name = "latent_release";
  std::string host;
  std::vector<std::string> sha256s;
  VIDLINE_MSGPACK_MAP(host, sha256s)
};

// -- encoder (conditioning), local to a sampling host ------------------------------------

/// pool -> encoder: conditioning for this prompt (cached by prompt hash).
struct encode_request {
  static constexpr const char* wire_name = "encode_request";
  std::string prompt_sha256;
  std::string prompt;
  VIDLINE_MSGPACK_MAP(prompt_sha256, prompt)
};

/// encoder -> pool.
struct encode_reply {
  static constexpr const char* wire_name = "encode_reply";
  std::string prompt_sha256;
  std::string conditioning_path;  ///< where the conditioning lies on this host
  bool cached = false;
  double encode_s = 0;            ///< run-clock seconds spent (0 when cached)
  std::string error;
  VIDLINE_MSGPACK_MAP(prompt_sha256, conditioning_path, cached, encode_s, error)
};

// -- bus level ---------------------------------------------------------------------------

/// node -> node every heartbeat interval, both ways.
struct heartbeat {
  static constexpr const char* wire_name = "heartbeat";
  std::string host;
  uint64_t boot_id = 0;    ///< random per process start: a new value means the peer restarted
  uint64_t seq = 0;
  double sent_unix_s = 0;  ///< for clock-skew checks
  // The hello: who the sender is, checked by the receiver (nodes/bus/hello.hpp). Empty from a
  // build older than the check.
  std::string version;        ///< the sender's vidline version, e.g. "0.1.0"
  std::string config_digest;  ///< SHA-256 hex of its canonical cluster config (config::digest)
  /// The secret the sender's bulk DEALER presents to the receiver's bulk ROUTER this boot
  /// (random per boot and receiver; docs/security.md, "Bulk transfers"). Empty when either
  /// host has no bulk channel.
  std::string bulk_secret;
  VIDLINE_MSGPACK_MAP(host, boot_id, seq, sent_unix_s, version, config_digest, bulk_secret)
};

/// bus -> local coordinator: a peer host went up or down.
struct peer_event {
  static constexpr const char* wire_name = "peer_event";
  std::string host;
  bool up = false;
  uint64_t boot_id = 0;
  bool restarted = false;  ///< the peer came back with a new boot_id: its in-flight work is lost
  VIDLINE_MSGPACK_MAP(host, up, boot_id, restarted)
};

// -- data plane: latents move as chunks, pulled by the receiver ---------------------------

/// receiver -> sender: send `length` bytes of latent `sha256` from `offset`.
struct latent_fetch {
  static constexpr const char* wire_name = "latent_fetch";
  uint64_t transfer_id = 0;
  std::string sha256;
  uint64_t offset = 0;
  uint32_t length = 0;
  std::string kind;  ///< "" = a latent; "output" = a finished video (outputs collected);
                     ///< "input" = a reference image uploaded to the host (input_put)
  VIDLINE_MSGPACK_MAP(transfer_id, sha256, offset, length, kind)
};

/// sender -> receiver: one chunk (or an error such as "not found").
struct latent_chunk {
  static constexpr const char* wire_name = "latent_chunk";
  uint64_t transfer_id = 0;
  std::string sha256;
  uint64_t offset = 0;
  uint64_t total = 0;
  std::string error;
  msgpack::type::raw_ref data;  ///< zero-copy view; valid while the frame lives
  VIDLINE_MSGPACK_MAP(transfer_id, sha256, offset, total, error, data)
};

/// client (CLI) -> a node's bus (target "bus"): part of an input (a reference image) of
/// SHA-256 `sha256` and `total` bytes, the bytes [offset, offset + data.size). Chunks go in
/// order, one request at a time; an empty chunk at offset 0 asks whether the node has the
/// input already. The node stores it at <data_dir>/inputs/<sha256> once every byte is in
/// and hashes to `sha256` (PROTOCOL.md, "Inputs").
struct input_put {
  static constexpr const char* wire_name = "input_put";
  std::string sha256;
  uint64_t offset = 0;
  uint64_t total = 0;
  msgpack::type::raw_ref data;  ///< zero-copy view; valid while the frame lives
  VIDLINE_MSGPACK_MAP(sha256, offset, total, data)
};

/// node -> client: the answer to an input_put. `done`: the node holds the input, verified
/// (now, or before: nothing was rewritten). Otherwise `next` is the offset the node wants
/// next (0: start over), or `error` says why it refused.
struct input_put_reply {
  static constexpr const char* wire_name = "input_put_reply";
  std::string sha256;
  bool done = false;
  uint64_t next = 0;
  std::string error;
  VIDLINE_MSGPACK_MAP(sha256, done, next, error)
};

// -- client (CLI) <-> coordinator --------------------------------------------------------

/// One shot of a shot list (`vidline run --jobs FILE`): `takes` jobs of one prompt and size,
/// seeds seed, seed+1, ...; `priority`: higher is dispatched first among the run's queued jobs.
struct shot {
  std::string prompt;
  uint32_t width = 0;
  uint32_t height = 0;
  uint32_t seconds = 0;
  uint64_t seed = 0;
  uint32_t takes = 1;
  std::string name;        ///< output stem ("" = job-<index>-<seed>)
  int32_t priority = 0;
  std::string reference;         ///< reference image's absolute path on the submitting host
                                 ///< (informational; "" = none, or given by digest only)
  std::string reference_sha256;  ///< its contents' SHA-256 (hex): an input the coordinator
                                 ///< holds (uploaded first: input_put, PUT /v1/inputs)
  std::string negative_prompt;   ///< "" = the backend's default
  std::string workflow;          ///< "" = the backend's default workflow
  std::vector<param_value> params;  ///< as given (checked and defaulted by the coordinator)
  std::vector<job_input> inputs;    ///< named inputs; `reference` above is inputs.reference
  std::string sequence;          ///< a sequence this shot is the next part of ("" = none)
  VIDLINE_MSGPACK_MAP(prompt, width, height, seconds, seed, takes, name, priority, reference,
                     reference_sha256, negative_prompt, workflow, params, inputs, sequence)
};

/// A video a collection folder holds (`vidline run --collect DIR`, DIR/index.jsonl) that the
/// client found at its name with its SHA-256: a job whose key is `key` may reuse it.
struct collected_output {
  std::string key;            ///< the job key its index line names
  std::string output_sha256;  ///< the file's SHA-256, verified by the client
  uint64_t bytes = 0;
  std::string file;           ///< its name in the folder
  std::string decoder;        ///< the decoder that made it (its backend says what kind of video)
  std::string run_id;         ///< the run and job that made it, as its line says
  uint32_t index = 0;
  VIDLINE_MSGPACK_MAP(key, output_sha256, bytes, file, decoder, run_id, index)
};

/// CLI -> coordinator: start a run. Either uniform (prompt, size, count seeds from seed) or
/// a shot list (`shots` not empty; then prompt, width, height, seconds, count and seed must
/// be empty/0: a coordinator older than `shots` refuses such a submit for its count 0).
struct submit_run {
  static constexpr const char* wire_name = "submit_run";
  std::string mode;
  std::string prompt;
  std::string reference;
  uint32_t width = 0;
  uint32_t height = 0;
  uint32_t seconds = 0;
  uint32_t count = 0;
  uint64_t seed = 0;
  std::string request_id;  ///< idempotency key chosen by the client: a retried submit
                           ///< returns the run it already made
  std::vector<shot> shots;  ///< a shot list (see above); empty = the uniform form
  std::string reference_sha256;  ///< the uniform form's reference contents' SHA-256 ("" = none)
  int32_t priority = 0;    ///< the run's place in the queue: higher goes first (default 0)
  bool rerender = false;   ///< render every job even where an output with its key exists
  /// Videos of the client's collection folder, verified there: a job whose key matches one
  /// (and that no output the cluster holds matches) reuses it.
  std::vector<collected_output> collected;
  VIDLINE_MSGPACK_MAP(mode, prompt, reference, width, height, seconds, count, seed,
                     request_id, shots, reference_sha256, priority, rerender, collected)
};

/// coordinator -> CLI.
struct submit_reply {
  static constexpr const char* wire_name = "submit_reply";
  std::string run_id;
  std::string error;
  VIDLINE_MSGPACK_MAP(run_id, error)
};

/// The `code` of an error reply to a client: why, in a word a program can test.
namespace reply_code {
inline constexpr const char* no_such_run = "no_such_run";  ///< the coordinator has no such run
inline constexpr const char* too_large = "too_large";      ///< the answer would exceed max_frame_bytes
} // namespace reply_code

/// CLI -> coordinator: the status of a run ("" = the latest run): its jobs from index
/// `offset`, at most `limit` of them (0 = all the rest; a query without them asks for all).
struct status_query {
  static constexpr const char* wire_name = "status_query";
  std::string run_id;
  uint32_t offset = 0;
  uint32_t limit = 0;
  VIDLINE_MSGPACK_MAP(run_id, offset, limit)
};

/// coordinator -> CLI: the status contract's JSON, as text.
struct status_reply {
  static constexpr const char* wire_name = "status_reply";
  std::string json;
  std::string error;
  std::string code;  ///< with an error, what kind for a program (reply_code; "" = other)
  VIDLINE_MSGPACK_MAP(json, error, code)
};

/// CLI -> coordinator: finish a run's failed jobs, redoing only the missing stages.
struct resume_run {
  static constexpr const char* wire_name = "resume_run";
  std::string run_id;
  VIDLINE_MSGPACK_MAP(run_id)
};

/// coordinator -> CLI.
struct resume_reply {
  static constexpr const char* wire_name = "resume_reply";
  std::string run_id;
  uint32_t reopened = 0;     ///< failed jobs put back to work
  std::string state;         ///< the run's state afterwards
  std::string error;
  std::string code;          ///< with an error, what kind for a program (reply_code)
  VIDLINE_MSGPACK_MAP(run_id, reopened, state, error, code)
};

/// CLI -> any node: stop cleanly (used by `vidline demo` and `vidline stop`).
struct shutdown_request {
  static constexpr const char* wire_name = "shutdown";
  std::string reason;
  VIDLINE_MSGPACK_MAP(reason)
};

// -- client (CLI) <-> coordinator: the queue (runs, cancel, submit) ----------------------

/// CLI -> coordinator: list the runs it holds (`vidline runs`).
struct runs_query {
  static constexpr const char* wire_name = "runs_query";
  bool all = false;        ///< finished runs too (else only the open ones and the newest 20)
  VIDLINE_MSGPACK_MAP(all)
};

/// coordinator -> CLI: a JSON array, one object per run (docs/cli.md, `vidline runs`).
struct runs_reply {
  static constexpr const char* wire_name = "runs_reply";
  std::string json;
  std::string error;
  std::string code;        ///< with an error, what kind (reply_code)
  VIDLINE_MSGPACK_MAP(json, error, code)
};

/// CLI -> coordinator: stop a run, or one of its jobs (`vidline cancel RUN [--job I]`).
struct cancel_run {
  static constexpr const char* wire_name = "cancel_run";
  std::string run_id;
  bool one_job = false;    ///< only job `index`
  uint32_t index = 0;
  VIDLINE_MSGPACK_MAP(run_id, one_job, index)
};

/// coordinator -> CLI.
struct cancel_reply {
  static constexpr const char* wire_name = "cancel_reply";
  std::string run_id;
  uint32_t cancelled = 0;  ///< jobs that were unfinished and are now cancelled
  uint32_t in_flight = 0;  ///< of them, stages stopped on their worker
  std::string state;       ///< the run's state afterwards
  std::string error;
  std::string code;        ///< with an error, what kind (reply_code)
  VIDLINE_MSGPACK_MAP(run_id, cancelled, in_flight, state, error, code)
};

/// CLI -> coordinator: add jobs to an open run (`vidline submit RUN ...`): `count` jobs of
/// this prompt and size, seeds from `seed`, queued behind the run's others.
struct submit_jobs {
  static constexpr const char* wire_name = "submit_jobs";
  std::string run_id;
  std::string prompt;
  std::string reference;
  uint32_t width = 0;
  uint32_t height = 0;
  uint32_t seconds = 0;
  uint32_t count = 0;
  uint64_t seed = 0;
  std::string request_id;  ///< idempotency key: a retried submit adds nothing twice
  std::string reference_sha256;  ///< added with inputs: an input the coordinator holds
                                 ///< (uploaded first), "" = none or `reference` only
  std::vector<shot> shots;       ///< the shot form (as in submit_run); empty = the fields above
  VIDLINE_MSGPACK_MAP(run_id, prompt, reference, width, height, seconds, count, seed,
                     request_id, reference_sha256, shots)
};

/// coordinator -> CLI.
struct submit_jobs_reply {
  static constexpr const char* wire_name = "submit_jobs_reply";
  std::string run_id;
  uint32_t first_index = 0;  ///< the index of the first job added
  uint32_t count = 0;        ///< jobs added
  std::string error;
  std::string code;          ///< with an error, what kind (reply_code)
  VIDLINE_MSGPACK_MAP(run_id, first_index, count, error, code)
};

} // namespace vidline::msg
