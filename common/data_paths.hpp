#pragma once
/// Where latents, inputs and outputs lie under a host's data directory: the one place that
/// spells these paths. The actors (through actors/context.hpp), the data plane
/// (nodes/data/) and the node take them from here, so a file written by one is found by
/// the others. Pure string work, no I/O (a state machine may include it).
///
///   <data>/latents/<sha256>.latent          a latent, by its digest
///   <data>/latents/<sha256>.job             the job that sampled it (for the retention sweep)
///   <data>/outputs/<run id>/<file>          a run's videos, as its decoder names them
///   <data>/outputs/.by-sha256/<sha256>      every published video, hard-linked by its digest
///   <data>/inputs/<sha256>                  an input (reference image), by its digest
///   <data>/inputs/videos/                   videos an input is cut from (the coordinator's)
///   <data>/work/, <data>/conditioning/      stage work folders, cached conditioning

#include <string>

namespace vidline::data_paths {

/// Folder names under the data directory.
inline constexpr const char* latents_subdir = "latents";
inline constexpr const char* outputs_subdir = "outputs";
inline constexpr const char* output_blobs_subdir = "outputs/.by-sha256";
inline constexpr const char* inputs_subdir = "inputs";
/// A latent file's extension; a latent's job record's.
inline constexpr const char* latent_ext = ".latent";
inline constexpr const char* latent_job_ext = ".job";

inline std::string latent_dir(const std::string& data_dir) {
  return data_dir + "/" + latents_subdir;
}
inline std::string output_dir(const std::string& data_dir) {
  return data_dir + "/" + outputs_subdir;
}
inline std::string output_blob_dir(const std::string& data_dir) {
  return data_dir + "/" + output_blobs_subdir;
}
inline std::string input_dir(const std::string& data_dir) {
  return data_dir + "/" + inputs_subdir;
}
inline std::string input_video_dir(const std::string& data_dir) {
  return input_dir(data_dir) + "/videos";
}
inline std::string work_dir(const std::string& data_dir) { return data_dir + "/work"; }
inline std::string conditioning_dir(const std::string& data_dir) {
  return data_dir + "/conditioning";
}

/// In a latent folder (latent_dir): the latent `sha256` and its job record.
inline std::string latent_file(const std::string& latent_dir, const std::string& sha256) {
  return latent_dir + "/" + sha256 + latent_ext;
}
inline std::string latent_job_file(const std::string& latent_dir, const std::string& sha256) {
  return latent_dir + "/" + sha256 + latent_job_ext;
}
/// Whether file name `name` (no folder) is a latent's: <64 hex characters>.latent; the
/// digest is its first 64 characters.
inline bool is_latent_file_name(const std::string& name) {
  return name.size() == 64 + 7 && name.compare(64, 7, latent_ext) == 0;
}

/// In a folder of files named by their digest (input_dir, output_blob_dir): file `sha256`.
inline std::string by_digest(const std::string& dir, const std::string& sha256) {
  return dir + "/" + sha256;
}

/// In an output folder (output_dir): run `run_id`'s folder.
inline std::string run_output_dir(const std::string& output_dir, const std::string& run_id) {
  return output_dir + "/" + run_id;
}

} // namespace vidline::data_paths
