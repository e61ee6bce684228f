#pragma once
/// Dispatch policies that look ahead, and the names every policy goes by.
///
/// `auto` decides, each time a pool of its mode is free, whether that pool takes the next
/// queued job now. It reasons about *slots*: the times at which each pool would finish one
/// more job of the run (video written: conditioning wait, cold or warm sampling, handoff and
/// decode), the first after what the pool runs now, then one warm sampling time apart.
///
/// - **Earliest finish.** The run's Q queued jobs are alike, so the best the line can do is
///   fill the Q earliest slots. A free pool takes a job when its next slot is among them,
///   i.e. when the other pools cannot finish all Q jobs before it would finish this one.
///   Otherwise it stays idle: that is how a slow source is left out at the end of a batch.
/// - **Layouts.** Pools that share GPUs (8 x T10 vs 2 x 4 x T10) form a group; a layout is a
///   largest set of them that can run together. When a pool of a group is free, auto
///   estimates when the batch would end under each layout (a pool whose GPUs are still busy
///   starts when they are free, cold: switching costs a model load) and keeps the current
///   layout unless another ends the batch sooner by a margin.
/// - **Sizes.** A run of several sizes is asked size by size. A free pool that is the only
///   one of the line as it runs that holds some queued size keeps to that size once taking
///   another job would end it after the rest of the queue (`reserved`).
/// - **Decoders.** A slot includes handoff and decode on the mode's best decoder; a batch
///   cannot end before the decoders have worked through every remaining latent. A sampled
///   latent goes to the decoder that would finish it first, queue included, and waits for
///   a faster decoder's credit rather than take a slow one's.
///
/// Pure like the machine: everything comes from the state, `now` and `stage_estimates`.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "actors/coordinator/scheduler.hpp"

namespace vidline::actors::coordinator {

/// Expected stage times (run-clock seconds), for policies that look ahead.
class stage_estimates {
public:
  virtual ~stage_estimates() = default;
  /// Sampling seconds of `j` on a pool of `kind`, cold (model load first) or warm;
  /// nullopt when the job does not fit that kind.
  virtual std::optional<double> sampling(const std::string& kind, const msg::job_spec& j,
                                         bool cold) const = 0;
  /// Conditioning seconds of a prompt `host`'s encoder has not conditioned yet.
  virtual double conditioning(const std::string& host) const = 0;
  /// Seconds to move `j`'s latent from `from_host` to decoder `d`.
  virtual double handoff(const std::string& from_host, const decoder_view& d,
                         const msg::job_spec& j) const = 0;
  /// Decode + mux seconds of `j` on decoder `d`.
  virtual double decode(const decoder_view& d, const msg::job_spec& j) const = 0;
};

/// Knobs of the auto policy.
struct auto_tuning {
  double switch_margin = 0.02;   ///< a layout change must end the batch this much sooner
  double switch_margin_s = 1.0;  ///< ... and by at least this many seconds
  std::size_t exact_pools = 64;  ///< up to this many pools, batch ends are counted slot by
                                 ///< slot; above, estimated as a fluid (cheaper, approximate)
  std::size_t max_group = 12;    ///< larger conflict groups are not searched for layouts
  std::size_t queue_jobs = 64;   ///< with this many jobs queued or fewer (and up to
                                 ///< exact_pools pools), a batch end also puts the latents
                                 ///< through the decoders one by one (their queue counted)
};

/// The auto policy (see the file comment).
class auto_policy : public dispatch_policy {
public:
  explicit auto_policy(std::shared_ptr<const stage_estimates> est, auto_tuning t = {});
  const char* name() const override { return "auto"; }
  std::optional<assignment> next(const dispatch_view& v) const override;
  /// The decoder that would write the video first: after the latents it holds or has on
  /// the way, plus handoff and decode. When that decoder has no credit now, the job waits
  /// for it (a slow decoder with room can be the later finish).
  decoder_view* pick_decoder(const state& s, const run& r, const job& j,
                             const std::vector<decoder_view*>& decoders,
                             double now) const override;
  std::optional<double> expected_sampling(const std::string& kind, const msg::job_spec& j,
                                          bool cold) const override {
    return est_->sampling(kind, j, cold);
  }

private:
  /// next() for a batch of `Q` alike queued jobs led by `head_index`: `members` (in index
  /// order), or every queued job of the run when nullptr.
  std::optional<assignment> next_of(const dispatch_view& v, uint32_t head_index, std::size_t Q,
                                    const std::vector<uint32_t>* members) const;
  /// Assignment `a` (a job of size classes[taken]) or, when the free pool is the only one
  /// of the line as it runs that holds some queued size and taking `a` would end that size
  /// after the line is through the rest, that size's lowest job instead (a reservation).
  std::optional<assignment> reserved(const dispatch_view& v, const assignment& a,
                                     const std::vector<std::vector<uint32_t>>& classes,
                                     std::size_t taken) const;
  struct mode_consts;
  /// Per pool of a mode, what does not change while a run of one size is dispatched.
  const mode_consts& consts(const state& s, const std::string& mode,
                            const msg::job_spec& spec) const;

  std::shared_ptr<const stage_estimates> est_;
  auto_tuning t_;
  /// (mode, width, height, seconds, model) -> its constants. A cache of pure lookups; the
  /// policy is used from one thread (the coordinator's, or one plan's).
  mutable std::map<std::tuple<std::string, uint32_t, uint32_t, uint32_t, std::string>,
                   std::shared_ptr<const mode_consts>> cache_;
};

/// The names a mode may give its policy.
inline constexpr const char* policy_names[] = {"in_turn", "first_free", "auto"};

/// A policy by name; "auto" needs `est`. nullptr for an unknown name (or auto without est).
std::shared_ptr<const dispatch_policy> make_policy(const std::string& name,
                                                   std::shared_ptr<const stage_estimates> est);

} // namespace vidline::actors::coordinator
