#pragma once
/// Every timing constant, retry limit and restart intensity of vidline, in one place, each
/// with its unit and advice. The config's "knobs" object overrides any of them by name;
/// test clusters shorten the timings (tests/support/cluster.hpp, tests/chaos/harness.hpp)
/// but do not randomise them. Times marked "run clock" are in the backend's (possibly
/// simulated) seconds; the rest are real time.

#include <cstdint>

namespace vidline::config {

/// Restart intensity of one kind of supervised actor: more than `max_restarts` within
/// `period_s` and the supervisor gives up and the node exits (a service manager restarts it).
struct restart_policy {
  int max_restarts = 5;     ///< restarts; 3-10 is reasonable
  double period_s = 30.0;   ///< seconds
};

struct knobs {
  // -- liveness (real time) --
  int heartbeat_interval_ms = 1000;   ///< ms between heartbeats to every peer; 500-2000
  int heartbeat_misses = 3;           ///< missed beats before a peer is declared down; 3-5
  int reconnect_min_ms = 100;         ///< first reconnect delay; ZeroMQ doubles it
  int reconnect_max_ms = 5000;        ///< reconnect backoff ceiling
  int status_interval_ms = 500;       ///< ms between pool/decoder status reports
  int order_resend_ms = 2000;         ///< an order not seen in a status after this is resent
  /// A stage order's lease, ms on each side's own monotonic clock: renewed by every status
  /// report the coordinator answers. The coordinator moves a stage elsewhere only after
  /// it expired; a worker past it commits nothing until the coordinator confirms the
  /// attempt (docs/reliability.md, "Leases"). More than 2 x status_interval_ms; about the
  /// liveness window (heartbeat_interval_ms x heartbeat_misses) is reasonable.
  int lease_ms = 3000;

  // -- stages (run clock) --
  double sample_timeout_s = 3600;     ///< run-clock s a sampling attempt may take
  double decode_timeout_s = 1800;     ///< run-clock s a decoding attempt may take
  int max_attempts = 3;               ///< tries of one stage of one job (transient failures)
  int handoff_retries = 3;            ///< corrupt transfers of one latent before the job fails
  /// A stage that failed transiently (a full disk, a backend that crashed or hung) waits
  /// before it is ordered again: retry_backoff_ms after its first failure in a row,
  /// doubling with each further one, at most retry_backoff_max_ms (real time); its pool or
  /// decoder takes other jobs meanwhile. 0 = retry at once. With the defaults 3 attempts
  /// span at least 3 s, 8 attempts over 2 minutes: a disk full for a few seconds no longer
  /// spends every attempt of the jobs sampled meanwhile.
  int retry_backoff_ms = 1000;
  int retry_backoff_max_ms = 60000;   ///< the longest backoff; at least retry_backoff_ms
  /// Model affinity: a pool keeps to the model it holds while jobs of it are queued; a job
  /// of another model passed over meanwhile goes once it has waited this long (real
  /// seconds). -1 = one warm sampling stage of that job (the auto policy's estimate; 600 s
  /// under in_turn and first_free).
  int model_wait_s = -1;
  /// Sampling checkpoints (docs/reliability.md, "Checkpoints"): a sampler that can saves
  /// its state every this many run-clock seconds at a step boundary, so a fault costs the
  /// steps since the last checkpoint instead of the whole stage. A checkpoint is about a
  /// latent's size (tens of MB): written, hashed and fsynced in well under a second, so at
  /// 60 s it costs under 1% of a stage.
  double checkpoint_interval_s = 60;
  /// The progress watchdog: a sampler that reports its steps and has reported none for this
  /// many run-clock seconds (from its start, then from each step; so more than the slowest
  /// model load plus one step) is hung: it is stopped and the job resumes from its newest
  /// checkpoint, instead of holding its GPUs until sample_timeout_s. 0 = off.
  int stall_timeout_s = 900;
  /// Preemption: a queued job whose run's priority exceeds a sampling job's by at least
  /// this asks it to checkpoint and stop at its next step; the preempted job resumes later
  /// from its checkpoint. 0 = never (the default); 10 is reasonable beside the default
  /// priority 0 of `vidline run`.
  int preempt_priority_gap = 0;

  // -- data plane --
  uint32_t chunk_bytes = 1u << 20;    ///< bytes per latent chunk; 256 KiB-4 MiB
  int chunk_window = 4;               ///< chunks in flight per transfer; memory = window x chunk
  int transfer_timeout_ms = 5000;     ///< no chunk for this long: the fetch is retried
  /// How often a host with a collect_dir asks the coordinator for videos to collect (real
  /// time); a finished run whose videos could not all be fetched is tried again after 10 x
  /// this. 1000-30000 is reasonable.
  int collect_interval_ms = 5000;
  /// Bytes a receiver writes between two fsyncs of its part file (each one records how far
  /// the part is durable, so a retry resumes there); 0 = only when a transfer fails. Small
  /// values cost an fsync per few chunks; 4-64 MiB is reasonable.
  uint64_t part_sync_bytes = 16ull << 20;
  /// Seconds a latent stays on a host after its job was decoded before it is removed;
  /// 0 = at once. (A failed job's latent stays: `vidline resume` decodes it.) Retained latents still count against the budget.
  int latent_retention_s = 0;
  /// Bytes of latents one host may hold (sampled and waiting to move, received and waiting
  /// to decode, retained). At or past it the host's pools stop taking jobs until it drains.
  /// At least one latent plus one per pool of the host; 0 = no budget.
  uint64_t latent_budget_bytes = 16ull << 30;
  /// Leftovers a host sheds when untouched this long (seconds; 0 = kept for ever;
  /// actors/latents/sweep.hpp): part files of abandoned fetches, conditioning no job has
  /// used, videos' SHA-256 links whose named file was taken away, stage receipts.
  int stale_part_s = 3600;
  int conditioning_retention_s = 86400;
  int output_blob_retention_s = 7 * 86400;
  int receipt_retention_s = 7 * 86400;
  int input_retention_s = 7 * 86400;  ///< a reference image unused this long

  // -- limits on input from outside --
  uint32_t max_frame_bytes = 8u << 20;   ///< bytes in one ZeroMQ frame
  uint32_t max_prompt_bytes = 64u << 10; ///< bytes of prompt text
  uint32_t max_jobs_per_run = 100000;    ///< jobs one run may hold
  uint32_t max_runs = 10000;             ///< unfinished runs the coordinator keeps
  /// Bytes of prompt text the coordinator holds for unfinished runs, counted once per
  /// job (each job carries its prompt): bounds its memory and journal, which
  /// max_jobs_per_run x max_prompt_bytes (6.25 GiB by default) alone does not.
  uint64_t max_queued_prompt_bytes = 1ull << 30;

  // -- retention (real time; docs/reliability.md, "Retention") --
  /// Seconds a finished run (every job succeeded, failed for good or cancelled) stays in
  /// the coordinator's memory after it finished; then only the journal holds it (status,
  /// runs, wait and resume read it there). 0 = forgotten at the next tick.
  int finished_run_memory_s = 3600;
  /// Seconds a finished run's records stay in the journal after it finished; then they are
  /// deleted and the file's free pages given back (incremental vacuum). 0 = kept forever.
  /// At least finished_run_memory_s (a run leaves the memory before the journal).
  int journal_keep_finished_s = 7 * 86'400;

  // -- supervision --
  restart_policy pool_restarts{5, 30};
  restart_policy decoder_restarts{5, 30};
  restart_policy encoder_restarts{5, 30};
  restart_policy coordinator_restarts{3, 30};

  // -- logs --
  /// A node's log, <data_dir>/logs/node.log, rotates when it would pass this many bytes
  /// (10 MiB; 4 KiB-4 GiB): a node keeps at most log_file_bytes x (log_files + 1) of log.
  uint32_t log_file_bytes = 10u << 20;
  int log_files = 5;  ///< rotated files kept besides node.log (node.1.log the newest); 1-1000

  // -- GPU telemetry and health (docs/config.md, "GPU telemetry") --
  /// ms between two readings of every GPU of a host (NVML or amdgpu sysfs); 500-5000.
  int gpu_sample_interval_ms = 1000;
  /// Seconds a card may stay above its slowdown temperature before its pools and decoders
  /// are drained (no new orders).
  int gpu_hot_s = 30;
  /// Seconds a sick card must stay healthy again before they take orders again.
  int gpu_recover_s = 60;
  /// GiB of a pool's card another program may hold before `vidline preflight` refuses it.
  double gpu_foreign_memory_gib = 1.0;
};

} // namespace vidline::config
