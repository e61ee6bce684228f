#include "actors/latents/sweep.hpp"

namespace vidline::actors::latents {

namespace {

double limit_of(leftover k, const sweep_limits& l) {
  switch (k) {
  case leftover::part: return l.part_s;
  case leftover::work_dir: return l.work_dir_s;
  case leftover::conditioning: return l.conditioning_s;
  case leftover::output_blob: return l.output_blob_s;
  case leftover::receipt: return l.receipt_s;
  case leftover::input: return l.input_s;
  }
  return 0;
}

} // namespace

const char* leftover_name(leftover k) {
  switch (k) {
  case leftover::part: return "part";
  case leftover::work_dir: return "work_dir";
  case leftover::conditioning: return "conditioning";
  case leftover::output_blob: return "output_blob";
  case leftover::receipt: return "receipt";
  case leftover::input: return "input";
  }
  return "?";
}

sweep_result sweep(const std::vector<listed>& entries, const sweep_limits& limits) {
  sweep_result r;
  for (auto& e : entries) {
    const double limit = limit_of(e.kind, limits);
    if (limit <= 0 || e.idle_s < limit)
      continue;
    if (e.kind == leftover::output_blob && e.links > 1)
      continue;  // its named video is still there: the blob costs no bytes
    r.remove.push_back(e.path);
    r.bytes += e.bytes;
    ++r.counts[static_cast<int>(e.kind)];
  }
  return r;
}

} // namespace vidline::actors::latents
