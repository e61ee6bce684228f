#pragma once
/// A job's input (its reference image) made present and verified on the sampling host
/// before its backend runs (nodes/data/inputs.hpp says where inputs come from).

#include <atomic>
#include <cstdint>
#include <string>

#include "actors/context.hpp"

namespace vidline::actors {

/// How ensure_input ended.
struct input_ready {
  std::string path;     ///< the verified local copy (<data_dir>/inputs/<sha256>), when ok
  std::string error;    ///< why not: the stage fails transient and is tried again
  bool fetched = false; ///< pulled from the source host now
};

/// Makes input `sha256` (`bytes` long) present at <data_dir>/inputs/<sha256> and verified:
/// a copy there whose SHA-256 matches is used; one that does not is removed and pulled
/// again; a missing one is pulled from `source_host` (the coordinator's host, where it was
/// uploaded) through ctx.out, verified by the receiver. On the source host itself the file
/// is the uploaded one. Blocks the calling (worker) thread until done or `*cancel` is set.
/// One call per input at a time in a process: pools of one host share a copy.
input_ready ensure_input(const context& ctx, const std::string& source_host,
                         const std::string& sha256, uint64_t bytes,
                         const std::atomic<bool>* cancel);

} // namespace vidline::actors
