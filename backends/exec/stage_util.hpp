#pragma once
/// Pieces the `exec`, `worker` and `comfyui` backends share: how a failure becomes a stage_result,
/// how an out-of-memory error is recognised, how devices are handed to a GPU program, how
/// a product is checked, and the encoder that hands the prompt text on unchanged.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/backend.hpp"

namespace vidline::backends::exec {

/// A result that is not ok.
stage_result failed(const char* outcome, std::string error, double elapsed_s);

/// `text` made safe for a one-line message in JSON and logs: valid UTF-8 kept, other
/// bytes and control characters (but tab) shown as '?', newlines as " | ", at most
/// `max_bytes` bytes (cut at a character boundary, "..." appended when cut).
std::string printable(std::string_view text, std::size_t max_bytes = 600);

/// The last `max_bytes` of a file ("" when it cannot be read).
std::string file_tail(const std::string& path, std::size_t max_bytes);

/// Texts that mean the GPU ran out of memory, as PyTorch (CUDA and ROCm) and the HIP
/// runtime print them.
const std::vector<std::string>& default_capacity_patterns();

/// The first of `patterns` found in `text`, or nullopt.
std::optional<std::string> find_pattern(std::string_view text,
                                        const std::vector<std::string>& patterns);

/// Environment variables that give a program exactly `devices` of `vendor`:
/// nvidia: CUDA_VISIBLE_DEVICES=<indices> and CUDA_DEVICE_ORDER=PCI_BUS_ID (the order
/// nvidia-smi shows); amd: ROCR_VISIBLE_DEVICES=<indices> and HIP_VISIBLE_DEVICES=0..n-1
/// (HIP numbers what ROCr lets through from 0); intel: ZE_AFFINITY_MASK=<indices>;
/// anything else, or no devices: none.
std::vector<std::pair<std::string, std::string>> device_variables(
  const std::string& vendor, const std::vector<std::string>& devices);

/// Every variable device_variables may set, for any vendor (to drop inherited values).
const std::vector<std::string>& device_variable_names();

/// Size and digest of a stage's product.
struct product {
  uint64_t bytes = 0;
  std::string sha256;
};

/// The product at `path` when it is a non-empty regular file; otherwise nullopt and
/// `why` says what is wrong with it.
std::optional<product> check_product(const std::string& path, std::string& why);

/// The end of a stage whose program says it left its product at `product`: the product is
/// checked (check_product), fsynced and moved durably to `output_path`, and the result is
/// ok with its size and digest; `fatal` "<claim> but <what is wrong><where>" when there is
/// no product (running it again will not help), `transient` when it cannot be moved.
stage_result commit_product(const std::string& product, const std::string& output_path,
                            const std::string& claim, const std::string& where,
                            double elapsed_s);

/// A decoder's guard before it runs anything: nullopt when the latent at `latent_path`
/// hashes to `latent_sha256`; otherwise the failed result (`fatal` for a malformed digest,
/// `transient` when it cannot be read, `corrupt` when it hashes to something else).
std::optional<stage_result> check_latent(const std::string& who, const std::string& latent_path,
                                         const std::string& latent_sha256);

/// Frames of a clip: seconds x fps + offset (the 8k+1 frame counts of video models come
/// from offset 1 at 24 fps: 5 s -> 121).
uint32_t frames_for(uint32_t seconds, uint32_t fps, uint32_t offset);

/// Where per-job logs of a backend go when its options name no directory: beside the
/// node's own log (<data>/logs/backends) when `work_dir` is one of the node's
/// <data>/work/<attempt> directories, else <work_dir>/logs.
std::string default_log_dir(const std::string& work_dir);

/// The attempt a stage runs under: the last component of its work directory (the actors
/// name work directories after attempt ids), or "" when there is none.
std::string attempt_of(const std::string& work_dir);

/// An encoder whose conditioning is the prompt text itself, for backends whose sampling
/// program or workflow encodes the prompt on its own. Takes no time worth counting.
std::unique_ptr<encoder_backend> make_prompt_encoder(std::string who);

} // namespace vidline::backends::exec
