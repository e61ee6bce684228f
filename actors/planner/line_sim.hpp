#pragma once
/// A whole line on a virtual clock: the coordinator's scheduler, every pool's and decoder's
/// state machine, unchanged, wired by a simulated network, with stage times from a timing
/// model. The planner (`vidline plan`) and the deterministic simulation tests run on it.
///
/// A pool that starts sampling takes its GPUs from the pools sharing them: their models are
/// unloaded, and their next job is cold (switching layouts, 8 vs 4+4, costs a model load).
/// A pool holds one model: a job of another model than the loaded one is cold too (a switch).
///
/// Faults (seeded): messages dropped, duplicated, delayed and reordered; pools and decoders
/// crashed (their state lost, a new epoch). After every event the invariants are checked:
/// the decoder holds at most 1 pending latent, a job reaches a final state at most once,
/// a job's journaled progress never goes backwards, and a job's video is published (a
/// decoder's commit) at most once, beyond a decoder crash that lost a published result.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "actors/coordinator/scheduler.hpp"

namespace vidline::actors::planner {

/// How long a sampling attempt takes, or that it runs out of memory after `seconds`.
struct sample_time {
  double seconds = 0;
  bool out_of_memory = false;
};

/// Stage times of the line being simulated (run-clock seconds).
struct timing {
  /// Sampling on a pool of `kind`; `cold` for the pool's first job and a model switch.
  std::function<sample_time(const std::string& kind, const msg::job_spec&, bool cold)> sample;
  /// Conditioning on the encoder of `host` (paid once per prompt and host).
  std::function<double(const std::string& host)> conditioning;
  /// Moving a latent of `bytes` from the sampling host to the decoder.
  std::function<double(const std::string& decoder_kind, uint64_t bytes)> handoff;
  /// The same, knowing where the latent lies and where the decoder runs; used instead of
  /// `handoff` when set (a latent already on the decoder's host costs less).
  std::function<double(const std::string& from_host, const std::string& decoder_host,
                       const std::string& decoder_kind, uint64_t bytes)>
    handoff_between;
  /// Decoding on a decoder of `kind`.
  std::function<double(const std::string& kind, const msg::job_spec&)> decode;
  /// Latent size of a job.
  std::function<uint64_t(const msg::job_spec&)> latent_bytes;
};

/// Seeded faults. All probabilities per message or per event.
struct faults {
  uint64_t seed = 1;
  double drop = 0;          ///< a message is lost
  double duplicate = 0;     ///< a message arrives twice
  double max_delay_s = 0;   ///< extra random delay per message (reorders them)
  double crash = 0;         ///< after an event, a random pool or decoder crashes
  double status_interval_s = 5;  ///< periodic status reports (only when faults are on)
};

/// What else the simulation does besides running the line.
struct sim_options {
  /// After every coordinator step, compare the scheduler's index with a rebuilt one
  /// (coordinator::check_index); a difference is a violation. Costly: for tests.
  bool check_index = false;
  /// Record the wall time of every coordinator step in result::step_seconds.
  bool time_steps = false;
  /// Check every job after every event up to this many jobs; above it, only the jobs the
  /// coordinator persisted in that step (every change to a job is persisted).
  std::size_t full_check_jobs = 5000;
  /// Record every stage of every job in result::spans (4 per job). Off for a large plan
  /// that keeps only its summary.
  bool record_spans = true;
};

/// One stage of one job as it happened in the simulation.
struct stage_span {
  std::string lane;   ///< pool or decoder name
  std::string stage;  ///< "conditioning" | "sampling" | "handoff" | "decode"
  uint32_t job = 0;
  double start = 0;
  double end = 0;
};

struct result {
  coordinator::run run;                    ///< the run as the coordinator finished it
  std::vector<stage_span> spans;
  uint64_t events = 0;
  std::vector<std::string> violations;  ///< invariant breaches (empty = none)
  bool finished = false;                ///< every job reached a final state
  double end_time = 0;
  std::vector<double> step_seconds;     ///< wall time per coordinator step (time_steps)
  std::vector<coordinator::run> others;       ///< simulate_runs: the runs after the first, in order
};

/// Runs `r` (jobs filled in, mode set) on a line whose coordinator state is `s` (from
/// coordinator::initial_state), pools and decoders placed on the hosts `s` names.
/// `max_time` bounds the virtual clock (a run that cannot finish ends there).
result simulate(coordinator::state s, coordinator::run r, const timing& t, const faults& f = {},
                double max_time = 1e9, const sim_options& o = {});

/// Several runs submitted together at time 0, in this order (distinct ids): the line
/// shares its pools among them (the queue) and goes on until every one is finished or
/// max_time. result::run is the first (the invariants are checked on it), result::others
/// the rest.
result simulate_runs(coordinator::state s, std::vector<coordinator::run> rs, const timing& t,
                     const faults& f = {}, double max_time = 1e9, const sim_options& o = {});

} // namespace vidline::actors::planner
