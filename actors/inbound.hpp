#pragma once
/// Checks of what arrives from outside the node, before an actor acts on it. Anything on
/// the LAN can reach a node's port, so an order's names may be hostile: they become file
/// names (receipts, work and log directories, outputs), argv of backend commands and
/// journal records. Pure: no I/O.
///
/// - Orders (sample_order, decode_order) are refused unless every name is a safe name
///   (names::is_safe_name), every digest 64 lowercase hex digits, the prompt valid UTF-8
///   within knobs.max_prompt_bytes, the size within the bounds a submit is held to, and
///   the reference, if any, an absolute path without "..".
/// - Results and status reports (sample_result, decode_result, pool_status,
///   decoder_status) are repaired rather than refused: their free text is made valid
///   UTF-8 and their durations finite and non-negative, so that the journal's JSON can
///   always be written and read back (a NaN is written as null, which does not read back
///   as a number).
/// - A verdict to index (verdict_index) is refused unless its names are safe and its video
///   lies in the run's output directory (check_verdict).

#include <string>

#include "config/knobs.hpp"
#include "messages/messages.hpp"
#include "messages/review.hpp"

namespace vidline::actors::inbound {

/// Longest reference path accepted (PATH_MAX).
inline constexpr std::size_t max_reference_bytes = 4096;

/// "" when `path` is acceptable as a job's reference image path: empty, or absolute
/// without ".." parts or a trailing '/', at most max_reference_bytes, valid UTF-8 without
/// control characters. Otherwise why not. (It may still name any file the pool's host can
/// read: see docs/security.md.)
std::string check_reference(const std::string& path);

/// "" when the size of a job is acceptable: width and height positive multiples of 8, at
/// most 8192; seconds 1..3600 (the bounds of `vidline run`). Otherwise why not.
std::string check_size(uint32_t width, uint32_t height, uint32_t seconds);

/// "" when a job's shot fields are acceptable: negative prompt valid UTF-8 within
/// max_prompt_bytes; workflow, model, param and input names safe names; param types known
/// and texts valid UTF-8; input digests 64 hex digits and paths as check_reference.
std::string check_shot_fields(const msg::job_spec& j, const config::knobs& k);

/// "" when a job from an order is acceptable (see the file comment); otherwise why not.
std::string check_job(const msg::job_spec& j, const config::knobs& k);

/// "" when an order is acceptable; otherwise why not.
std::string check_order(const msg::sample_order& o, const config::knobs& k);
std::string check_order(const msg::decode_order& o, const config::knobs& k);

/// "" when a verdict to write into the run index under `outputs_dir` (a host's
/// <data_dir>/outputs) is acceptable: its run id a safe name, its video exactly
/// `outputs_dir`/<run id>/<a safe file name>, its digest 64 lowercase hex digits, the
/// verdict "accepted" or "rejected", a revision from 1 and a finite time. Otherwise why not:
/// the names become the index file's path, so nothing in the message steers it elsewhere.
std::string check_verdict(const msg::verdict_index& v, const std::string& outputs_dir);

/// Makes a report safe to journal (see the file comment).
void repair(msg::sample_result& r);
void repair(msg::decode_result& r);
void repair(msg::pool_status& s);
void repair(msg::decoder_status& s);

} // namespace vidline::actors::inbound
