#pragma once
/// Sampling checkpoints, inside the scheduler (docs/reliability.md, "Checkpoints"). A
/// sampler saves its state at a step boundary; the pool stores the file in its host's
/// latent store under its SHA-256 and reports it (pool_status::checkpoints,
/// sample_result::checkpoints). The coordinator journals the newest checkpoints_kept of
/// each job; when a sampling attempt ends without a latent (host lost, worker crashed,
/// lease expired, a transient error, preempted) the next attempt on a pool of the same
/// kind resumes from the newest one whose host is up, so a fault costs the steps since
/// that checkpoint instead of the whole stage. Out of memory (`capacity`) moves the job to
/// a bigger kind, which starts from step 0 (checkpoint_floor). A checkpoint that did not
/// verify where it was to be resumed (sample_result::bad_checkpoint) is dropped and the one
/// before it used. Once the job's latent is made its checkpoints are released (removed).
///
///     saved --report--> kept (journaled) --attempt lost--> resumed from
///       |                  |                                  |
///       +-- older than the kept ones: released                +-- bad digest: dropped
///                          +--------- latent made / job ended: released

#include <cstddef>
#include <string>
#include <vector>

#include "actors/coordinator/scheduler.hpp"

namespace vidline::actors::coordinator {

/// Checkpoints kept per job: the newest, and the one before it in case the newest does
/// not verify.
inline constexpr std::size_t checkpoints_kept = 2;

/// Notes checkpoint `c`, saved by job `j`'s attempt on a pool of `kind`, when it is newer
/// than those kept (returns true: the job is to be journaled). Checkpoints pushed out are
/// released on their hosts (fx_release).
bool note_checkpoint(job& j, const msg::checkpoint_ref& c, const std::string& kind,
                     std::vector<effect>& fx);

/// Where job `j`'s next attempt on pool `p` goes on from: the newest kept checkpoint of
/// p's kind (of an attempt at or after checkpoint_floor) whose host is up or is p's own;
/// step 0 = from the start.
msg::checkpoint_ref resume_point(const state& s, const job& j, const pool_view& p);

/// The newest kept checkpoint of `j` lies on a host that is down now (nullptr: none, or
/// its host is up).
const kept_checkpoint* checkpoint_on_down_host(const state& s, const job& j);

/// Drops the checkpoint `sha256` of `j` (it did not verify); released where it lies.
void drop_checkpoint(job& j, const std::string& sha256, std::vector<effect>& fx);

/// Releases every kept checkpoint of `j` (its latent is made, or it ended) and forgets
/// them.
void release_checkpoints(job& j, std::vector<effect>& fx);

/// The job moves to another pool kind from step 0 (out of memory): its checkpoints are
/// released and those of attempts before `next_attempt` never resumed from.
void restart_from_zero(job& j, uint64_t next_attempt, std::vector<effect>& fx);

/// When the sampling work of `j`'s current attempt that a resume keeps was saved (run
/// clock): the time of the newest checkpoint that attempt saved, -1 = none (all of the
/// attempt's sampling is done again).
double kept_until(const state& s, const job& j);

/// What to do with a checkpoint a host reports holding (latent_held with checkpoint_step):
/// true = release it. Keeps those of jobs that may still resume (queued, sampling, waiting,
/// failed) that are kept or newer than the kept ones; adopts one the job's last attempt
/// saved that no report brought (`j` journaled: `changed` set).
bool release_held_checkpoint(state& s, job* j, const msg::latent_held& l,
                             const std::string& host, bool& changed, std::vector<effect>& fx);

} // namespace vidline::actors::coordinator
