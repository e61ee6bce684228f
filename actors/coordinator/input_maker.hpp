#pragma once
/// The coordinator's shell makes the inputs of shots that follow shots (fx_make_input,
/// actors/coordinator/graph.hpp): frame k of the source's video, stored as an input by its
/// SHA-256 in <data_dir>/inputs/ like an uploaded image, so the sampling host pulls it as
/// it pulls a reference (nodes/data/inputs.hpp).
///
/// - a sim video (its decoder's backend is `sim`): the sim contract's frame(V, k), from the
///   video's digest alone (docs/sim-contract.md, "Frames and sequences of sim videos"),
///   made at once on the actor's thread;
/// - any other video: decoded with ffmpeg (a process through the one spawner), after
///   ffprobe counted its frames and found frame k among them, on the maker's own thread,
///   which answers the actor later (msg::input_made). A video uploaded to this host as an
///   input (by its SHA-256: `vidline run --collect DIR` uploads the real videos of its
///   folder that other shots take frames from) is read there. A video its decoder made on this
///   host is read where it lies; one made on another host is first pulled from that host
///   by its SHA-256 (video_fetch: over the host's bus, as `vidline run --collect` pulls it,
///   verified, fsynced and renamed) into <data_dir>/inputs/videos/<sha256>, and taken from
///   there again by every later frame of it.
///
/// A latent handed over (`{"from": NAME, "latent": true}`, fx_make_input::latent): the
/// source's latent itself, copied from this host's latents when it was sampled here, else
/// pulled from the host that sampled it (latent_fetch, verified as a decoder verifies it),
/// into <data_dir>/inputs/<sha256>; always on the maker's thread.
///
/// Failures handled, each answered as the input's error (the machine fails the job that
/// waits on it, naming the source; `vidline resume` asks again):
/// - the source's host down or silent: the fetch gives up after its bound (6 requests of
///   max(1 s, knobs.transfer_timeout_ms) unanswered), naming the host;
/// - the host no longer has the video (removed), or sends bytes of another digest: nothing
///   is kept, the host and digest named;
/// - ffprobe or ffmpeg failing, hanging (60 s each) or finding no such frame;
/// - the same input asked again while it is being made (the machine re-asks an unanswered
///   input): ignored, one answer comes;
/// - a coordinator stopped mid-fetch: the part file is started over by the next ask (the
///   machine asks every unanswered input again after a restart).

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>

#include "actors/context.hpp"
#include "actors/coordinator/scheduler.hpp"

namespace vidline::actors::coordinator {

/// Pulls the video of SHA-256 `sha256` that a decoder published on `host` into `dest`: ""
/// once it is there (verified, fsynced, renamed), else why not. Blocking, bounded.
using video_fetch = std::function<std::string(const std::string& host, const std::string& sha256,
                                              const std::string& dest)>;

/// Where the coordinator keeps the videos of other hosts it took frames from:
/// <data_dir>/inputs/videos/<sha256> (swept as inputs are, after input_retention_s unused).
std::string input_video_dir(const context& ctx);

/// Makes inputs; real videos on a thread of its own. Its methods are the actor's.
class input_maker {
public:
  /// Called on the maker's thread with each input made off the actor's.
  using answer_fn = std::function<void(ev_input_made)>;

  /// `fetch_latent` pulls a latent the same way (from the host that sampled it).
  input_maker(context ctx, video_fetch fetch, answer_fn answer, video_fetch fetch_latent = {});
  /// Waits for the input being made (bounded: one fetch, two tool runs); drops the rest.
  ~input_maker();
  input_maker(const input_maker&) = delete;
  input_maker& operator=(const input_maker&) = delete;

  /// The input at once (a sim video), or none: it is made on the maker's thread and
  /// answered through answer_fn (nothing more when it is being made already).
  std::optional<ev_input_made> ask(const fx_make_input& fx);

private:
  using key = std::tuple<std::string, uint32_t, std::string>;  ///< (run, job, input)
  void loop();

  context ctx_;
  video_fetch fetch_;
  video_fetch fetch_latent_;
  answer_fn answer_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<fx_make_input> queue_;
  std::set<key> asked_;  ///< queued or being made
  bool stop_ = false;
  std::thread thread_;
};

/// Makes the input on the caller's thread (blocking for a real video: its fetch and
/// decode); the answer for the machine (its `error` set when it could not).
ev_input_made make_input(const context& ctx, const fx_make_input& fx,
                                const video_fetch& fetch = {},
                                const video_fetch& fetch_latent = {});

/// The backend type ("sim", "exec", ...) of decoder `name` in the config ("" unknown).
std::string decoder_backend_type(const config::cluster& c, const std::string& name);

} // namespace vidline::actors::coordinator
