#pragma once
/// Verdicts in the run index, inside the scheduler. The run index lies beside the videos,
/// on the host of the decoder that made them (docs/shots.md, "Outputs and the run index");
/// a reviewer's verdict is given to the coordinator, which may run elsewhere. So a verdict
/// is carried there as other stage messages are, and as durably:
///
///   verdict given --journal (job: verdict, revision)--> verdict_index to the decoder
///        ^                                                      |
///        |   no answer by the decoder's next report             v
///        +--- after order_resend_s (or its host was down) <-- the decoder appends the
///                                                             line, answers verdict_indexed
///                                          answer of this revision --> journal (indexed)
///
/// Failures handled: the decoder's host down when the verdict is given (sent when the
/// decoder reports again, so a host that comes back gets it), the message or its answer
/// lost (sent again), the coordinator restarted (the journal holds the revision not
/// confirmed: sent at the decoder's first report), a resend overtaken by a later verdict
/// (the decoder writes no line of a lower revision than its index holds; an answer of an
/// older revision confirms nothing), a write that failed (answered `error`: sent again),
/// and a video whose line is not in that index (reused from another run's output, or
/// removed since: answered `no_line`, nothing more to do), a verdict the decoder refuses as
/// it came (answered `refused`, logged, not sent again). A run whose verdicts are not
/// confirmed stays in the state (retention waits for them). Pure: no clock, no I/O.

#include <set>
#include <string>
#include <vector>

#include "actors/coordinator/scheduler.hpp"

namespace vidline::actors::coordinator {

/// Whether job `j`'s verdict waits for its video's host: it has a video, a decoder that
/// made it, and a revision that host has not confirmed.
bool verdict_due(const job& j);

/// Keeps state_index::verdicts_due right for `j` (after its verdict or its answer changed).
void note_verdict(state& s, const job& j);

/// A verdict was recorded on `j` (a new verdict or take, so a new revision): journaled by
/// the caller, sent now when the decoder that made the video reports alive.
void verdict_given(state& s, job& j, double now, std::vector<effect>& fx);

/// Decoder `d` reported: the verdicts due on it not sent within order_resend_s go (again).
void send_due_verdicts(state& s, const decoder_view& d, double now, std::vector<effect>& fx);

/// The decoder's answer: its revision settled (indexed, no line to add it to, or refused)
/// is journaled and sent no more; an error is logged when it is new, and sent again.
void apply_verdict_indexed(state& s, const ev_verdict_indexed& e, double now,
                           std::vector<effect>& fx);

/// The runs with a verdict due on a decoder the state knows (retention keeps them).
std::set<std::string> runs_with_verdicts_due(const state& s);

} // namespace vidline::actors::coordinator
