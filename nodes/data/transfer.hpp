#pragma once
/// The data plane: latents pulled by the receiver in chunks over the bus (docs/dataplane.md).
///
/// The receiver (latent_fetcher) keeps `chunk_window` latent_fetch requests of
/// `chunk_bytes` in flight. Two disk threads work on the chunks in order, as a pipeline:
/// the writer writes each to `dest + ".part"` straight from the received frame (kept
/// alive until hashed) and hands it to the hasher, which hashes it while the writer goes
/// on with the next one; after the last chunk the hasher compares the SHA-256 with the
/// digest it was given: a match is fsynced and renamed to `dest`, a mismatch deletes the
/// part file. The bus's I/O thread only does the bookkeeping, so a slow disk never delays
/// heartbeats; chunks received but not yet hashed count against the window, so memory
/// stays within chunk_window x chunk_bytes per transfer. The sender (latent_server) answers each
/// request from `latent_dir/<sha256>.latent`, reading the bytes straight into the
/// outgoing frame. Neither sees a socket.
///
/// Resuming: every `part_sync_bytes` written, and when a transfer fails for a transient
/// reason, the hasher fsyncs the part file and records in `dest + ".part.state"` how many
/// bytes of it are durable and their SHA-256. The next fetch into `dest` (after a link
/// cut, or in a restarted process) re-hashes that prefix, checks it against the record
/// and asks only for the rest. A prefix that does not verify ends the fetch `corrupt`
/// (the part is deleted; the next attempt starts from zero). Bytes past the recorded
/// length are never trusted.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "common/sha256.hpp"
#include "config/knobs.hpp"
#include "messages/messages.hpp"

namespace vidline::nodes::data {

/// The first envelope id (and transfer id) of a sender's boot: its start time in
/// microseconds since the Unix epoch, so a restarted sender's ids continue above those of
/// its previous boot.
uint64_t first_envelope_id();

/// How a latent fetch ended.
enum class fetch_outcome {
  ok,         ///< the file is at dest_path, its SHA-256 verified, fsynced
  corrupt,    ///< the bytes did not hash (or size) as expected; nothing at dest_path
  not_found,  ///< the source host has no such latent
  transient,  ///< timeout, peer down or restarted, local I/O error, bus stopping: retry
};

/// "ok", "corrupt", "not_found", "transient" (msg::outcome's words where they exist).
const char* to_string(fetch_outcome o);

/// The result of one fetch_latent.
struct fetch_result {
  fetch_outcome outcome = fetch_outcome::transient;
  std::string error;       ///< human-readable reason when not ok
  uint64_t bytes = 0;      ///< bytes written to dest_path (0 unless ok)
  double elapsed_ms = 0;   ///< from the request to the verified, renamed file
};

/// Called once per fetch, on the bus's I/O thread.
using fetch_callback = std::function<void(const fetch_result&)>;

/// The error a latent_chunk carries when the source has no such latent.
inline constexpr const char* latent_not_found = "not found";

/// Bytes of a frame taken by everything but a chunk's data (envelope, chunk fields).
/// knobs.chunk_bytes + this must fit in knobs.max_frame_bytes.
inline constexpr uint32_t chunk_frame_overhead_bytes = 4096;

/// The receiving side of latent transfers. Not thread-safe: one owner thread (the bus's).
class latent_fetcher {
public:
  /// Sends one request to `host`; false when it could not be queued (peer unreachable).
  using send_fn = std::function<bool(const std::string& host, const msg::latent_fetch&)>;
  /// Runs a task on the owner thread later (how the disk worker hands results back).
  using post_fn = std::function<void(std::function<void()>)>;
  /// The owner's monotonic clock, in ms (the same one tick() is given).
  using clock_fn = std::function<int64_t()>;

  latent_fetcher(const config::knobs& knobs, send_fn send, post_fn post, clock_fn now_ms);
  ~latent_fetcher();
  latent_fetcher(const latent_fetcher&) = delete;
  latent_fetcher& operator=(const latent_fetcher&) = delete;

  /// Starts pulling latent `sha256_hex` (`bytes` long) from `host` into `dest_path`,
  /// resuming from a durable part a previous fetch left. `callback` is called exactly
  /// once, on the owner thread (possibly before this returns), after the part file is
  /// renamed, kept (transient: made durable for the next try) or removed.
  /// `kind` is the requests' latent_fetch::kind ("" = a latent, "input" = an input).
  void start(const std::string& host, const std::string& sha256_hex, uint64_t bytes,
             const std::string& dest_path, fetch_callback callback,
             const std::string& kind = "");

  /// A chunk arrived from `from`. Its data is written in place: `owner` keeps the memory
  /// it points into alive until then. False when no running transfer expects it (late,
  /// or from the wrong host).
  bool on_chunk(const std::string& from, const msg::latent_chunk& chunk,
                std::shared_ptr<const void> owner);

  /// Ends transfers that received nothing for knobs.transfer_timeout_ms (transient).
  void tick(int64_t now_ms);

  /// When tick() may next end a transfer; none when no transfer is waiting.
  std::optional<int64_t> next_deadline() const;

  /// Ends every transfer from `host` as transient (it went down or restarted).
  void fail_host(const std::string& host, const std::string& why);

  /// Ends every running transfer as transient and waits for the disk worker, which posts
  /// the last results. Starts after this fail at once.
  void shutdown();

  /// Transfers receiving chunks now.
  std::size_t running() const { return running_.size(); }

  /// Bytes fetches skipped so far because a durable part already held them.
  uint64_t resumed_bytes() const { return resumed_bytes_; }

private:
  struct part_file;  ///< the disk side of one transfer: the worker's alone once queued
  struct transfer;   ///< the network side: the owner thread's
  struct disk_job;

  bool issue_requests(transfer& t);
  void finish(uint64_t id, fetch_outcome outcome, std::string error);
  void on_opened(uint64_t id, uint64_t resume_at);
  void on_written(uint64_t id);
  void queue(disk_job job);
  void queue_verify(transfer& t);
  void writer_loop();
  void hasher_loop();
  void open_file(disk_job& job);
  void write_chunk(disk_job& job);
  void hash_chunk(disk_job& job);
  void sync_part(part_file& f);
  void close_file(disk_job& job);

  config::knobs knobs_;
  send_fn send_;
  post_fn post_;
  clock_fn now_ms_;
  uint64_t next_transfer_id_ = 1;
  std::map<uint64_t, transfer> running_;
  std::set<std::string> busy_dests_;  ///< until the callback: one fetch per path at a time
  bool shut_down_ = false;
  uint64_t resumed_bytes_ = 0;

  /// A disk thread and the jobs waiting for it, done in the order queued.
  struct stage {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<disk_job> jobs;
    bool stop = false;  ///< end once `jobs` is empty
    std::thread thread;

    void push(disk_job job);
    /// The next job; false once stopped and drained.
    bool pop(disk_job& job);
    void stop_and_join();
  };
  stage writer_;  ///< opens part files and writes chunks, then hands each job on
  stage hasher_;  ///< hashes, records durable prefixes, verifies and renames or removes
};

/// The serving side: answers latent_fetch requests from this host's latent directory.
class latent_server {
public:
  /// Returns `size` writable bytes inside the outgoing frame for the reply's body. May be
  /// called again (the last call's bytes are sent), e.g. when a read fails half-way.
  using body_allocator = std::function<char*(std::size_t size)>;

  /// `latent_dir` holds `<sha256>.latent` files; requests for more than
  /// `max_chunk_bytes` are refused. `corrupt_every_nth_chunk` (tests only; 0 = off) flips
  /// one byte of every nth data chunk served, to exercise the receiver's verification.
  latent_server(std::string latent_dir, uint32_t max_chunk_bytes,
                uint32_t corrupt_every_nth_chunk = 0);

  /// Also serves requests of kind "output" (a finished video, for `vidline run --collect`)
  /// from `<output_dir>/<sha256>` (the decoder's hard links, docs/shots.md). Empty = none.
  void set_output_dir(std::string output_dir) { output_dir_ = std::move(output_dir); }

  /// Also serves requests of kind "input" (a reference image a sampling host pulls) from
  /// `<input_dir>/<sha256>` (nodes/data/inputs.hpp). Empty = none.
  void set_input_dir(std::string input_dir) { input_dir_ = std::move(input_dir); }

  /// Answers one request with a latent_chunk body written through `alloc`: the data, or
  /// an error ("not found", "bad sha256", ...). True when data was served.
  bool serve(const msg::latent_fetch& request, const body_allocator& alloc);

private:
  std::string latent_dir_;
  std::string output_dir_;
  std::string input_dir_;
  uint32_t max_chunk_bytes_;
  uint32_t corrupt_every_nth_chunk_;
  uint64_t served_ = 0;
};

} // namespace vidline::nodes::data
