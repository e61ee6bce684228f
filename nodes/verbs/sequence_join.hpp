#pragma once
/// Joining a sequence's parts into one video (docs/shots.md, "Sequences"), where its parts
/// were collected: sim videos into the sim contract's sequence file (`vidline-sim-sequence
/// 1` and one `part <SHA-256>` line per part); real videos with ffmpeg's concat demuxer,
/// without re-encoding (`-c copy`), when ffprobe finds one codec, size and frame rate in
/// every part (else refused, naming the part that differs). The joined file is written
/// next to its name and renamed into place once whole.

#include <string>
#include <vector>

namespace vidline::nodes::verbs {

/// Joins `parts` (files, in order; `part_sha256s` their digests) into `dest`. "" when
/// joined, else why not (nothing is left at `dest`).
std::string join_sequence(bool sim, const std::vector<std::string>& parts,
                          const std::vector<std::string>& part_sha256s, const std::string& dest);

} // namespace vidline::nodes::verbs
