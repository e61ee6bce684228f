#pragma once
/// What a host's data directory may shed: the leftovers no live work owns. A pure rule
/// over a listing; the latents actor lists the directory now and then and removes what the
/// rule names. Latents themselves are the store machine's (store_machine.hpp).
///
/// | leftover                                   | removed when untouched for    |
/// |--------------------------------------------|-------------------------------|
/// | latents/*.part, *.part.state (a fetch whose| `stale_part_s`                |
/// |   job went elsewhere or was given up),     |                               |
/// |   *.quarantined (corrupt), a .job note     |                               |
/// |   without its latent                       |                               |
/// | work/<attempt>/ (a stage whose process died| twice the longest stage       |
/// |   with the node)                           |   timeout (a live stage ends  |
/// |                                            |   by its timeout)             |
/// | conditioning/*.cond (touched on each use)  | `conditioning_retention_s`    |
/// | outputs/.by-sha256/<sha> whose named video | `output_blob_retention_s`     |
/// |   was taken away (one link left)           |                               |
/// | receipts/... (a job's stage record)        | `receipt_retention_s`         |
/// | inputs/<sha256> (a reference image, touched| `input_retention_s`           |
/// |   on each use and each time it is served)  |                               |
///
/// A limit of 0 keeps that kind for ever (work directories have no knob).

#include <cstdint>
#include <string>
#include <vector>

namespace vidline::actors::latents {

enum class leftover { part, work_dir, conditioning, output_blob, receipt, input };

/// One entry of the listing.
struct listed {
  std::string path;
  leftover kind = leftover::part;
  double idle_s = 0;      ///< seconds since it (or, for a directory, anything in it) changed
  uint64_t links = 1;     ///< hard links (output blobs: 1 = its named video is gone)
  uint64_t bytes = 0;
};

struct sweep_limits {
  double part_s = 3600;
  double work_dir_s = 7200;
  double conditioning_s = 86400;
  double output_blob_s = 604800;
  double receipt_s = 604800;
  double input_s = 604800;
};

struct sweep_result {
  std::vector<std::string> remove;  ///< paths, in listing order
  uint64_t bytes = 0;               ///< what they hold
  int counts[6] = {0, 0, 0, 0, 0, 0};  ///< removals by kind (index: leftover)
};

/// The entries past their limit.
sweep_result sweep(const std::vector<listed>& entries, const sweep_limits& limits);

const char* leftover_name(leftover k);

} // namespace vidline::actors::latents
