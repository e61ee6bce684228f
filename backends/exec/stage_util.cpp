#include "backends/exec/stage_util.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <sys/stat.h>

#include "common/files.hpp"
#include "common/sha256.hpp"

namespace vidline::backends::exec {

stage_result failed(const char* outcome, std::string error, double elapsed_s) {
  stage_result r;
  r.outcome = outcome;
  r.error = std::move(error);
  r.elapsed_s = elapsed_s;
  return r;
}

namespace {

/// Length of the valid UTF-8 sequence at the start of `s` (0 when it is not one).
std::size_t utf8_length(std::string_view s) {
  auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  auto cont = [&](std::size_t i) { return i < s.size() && (b(i) & 0xC0) == 0x80; };
  unsigned char c = b(0);
  if (c < 0x80)
    return 1;
  if (c >= 0xC2 && c <= 0xDF)
    return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2))
      return 0;
    if ((c == 0xE0 && b(1) < 0xA0) || (c == 0xED && b(1) > 0x9F))  // overlong, surrogates
      return 0;
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3))
      return 0;
    if ((c == 0xF0 && b(1) < 0x90) || (c == 0xF4 && b(1) > 0x8F))
      return 0;
    return 4;
  }
  return 0;
}

} // namespace

std::string printable(std::string_view text, std::size_t max_bytes) {
  std::string out;
  bool cut = false;
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t n = utf8_length(text.substr(i));
    std::string_view piece;
    std::string replacement;
    if (n == 0) {
      replacement = "?";
      n = 1;
    } else if (n == 1) {
      char c = text[i];
      if (c == '\n')
        replacement = " | ";
      else if (c == '\r')
        replacement = "";
      else if (c == '\t')
        replacement = "\t";
      else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F)
        replacement = "?";
      else
        replacement = std::string(1, c);
    } else {
      replacement = std::string(text.substr(i, n));
    }
    if (out.size() + replacement.size() > max_bytes) {
      cut = true;
      break;
    }
    out += replacement;
    i += n;
  }
  // Trim a trailing separator left by a final newline.
  while (out.size() >= 3 && out.compare(out.size() - 3, 3, " | ") == 0)
    out.resize(out.size() - 3);
  if (cut)
    out += "...";
  return out;
}

std::string file_tail(const std::string& path, std::size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return {};
  in.seekg(0, std::ios::end);
  auto size = static_cast<std::size_t>(std::max<std::streamoff>(0, in.tellg()));
  std::size_t n = std::min(size, max_bytes);
  in.seekg(static_cast<std::streamoff>(size - n));
  std::string s(n, '\0');
  in.read(s.data(), static_cast<std::streamsize>(n));
  s.resize(static_cast<std::size_t>(in.gcount()));
  return s;
}

const std::vector<std::string>& default_capacity_patterns() {
  static const std::vector<std::string> p{
    "OutOfMemoryError",          // torch.OutOfMemoryError / torch.cuda.OutOfMemoryError
    "CUDA out of memory",        // PyTorch's CUDA allocator
    "HIP out of memory",         // PyTorch's allocator on ROCm
    "hipErrorOutOfMemory",       // the HIP runtime
    "CUDA error: out of memory", // a CUDA call outside the allocator
    "CUBLAS_STATUS_ALLOC_FAILED",
  };
  return p;
}

std::optional<std::string> find_pattern(std::string_view text,
                                        const std::vector<std::string>& patterns) {
  for (auto& p : patterns)
    if (!p.empty() && text.find(p) != std::string_view::npos)
      return p;
  return std::nullopt;
}

std::vector<std::pair<std::string, std::string>> device_variables(
  const std::string& vendor, const std::vector<std::string>& devices) {
  if (devices.empty())
    return {};
  std::string list, renumbered;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    list += (i ? "," : "") + devices[i];
    renumbered += (i ? "," : "") + std::to_string(i);
  }
  if (vendor == "nvidia")
    return {{"CUDA_VISIBLE_DEVICES", list}, {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"}};
  if (vendor == "amd")
    return {{"ROCR_VISIBLE_DEVICES", list}, {"HIP_VISIBLE_DEVICES", renumbered}};
  if (vendor == "intel")
    return {{"ZE_AFFINITY_MASK", list}};
  return {};
}

const std::vector<std::string>& device_variable_names() {
  static const std::vector<std::string> n{"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
                                          "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                                          "GPU_DEVICE_ORDINAL",   "ZE_AFFINITY_MASK"};
  return n;
}

std::optional<product> check_product(const std::string& path, std::string& why) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) {
    why = "no output at " + path;
    return std::nullopt;
  }
  if (!S_ISREG(st.st_mode)) {
    why = "output " + path + " is not a regular file";
    return std::nullopt;
  }
  if (st.st_size == 0) {
    why = "output " + path + " is empty";
    return std::nullopt;
  }
  product p;
  p.sha256 = sha256_file_hex(path, &p.bytes);
  if (p.sha256.empty()) {
    why = "output " + path + " cannot be read";
    return std::nullopt;
  }
  return p;
}

uint32_t frames_for(uint32_t seconds, uint32_t fps, uint32_t offset) {
  uint64_t f = uint64_t{seconds} * fps + offset;
  return f > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(f);
}

std::string default_log_dir(const std::string& work_dir) {
  std::filesystem::path w(work_dir);
  if (w.has_parent_path() && w.parent_path().filename() == "work" &&
      w.parent_path().has_parent_path())
    return (w.parent_path().parent_path() / "logs" / "backends").string();
  return (w / "logs").string();
}

std::string attempt_of(const std::string& work_dir) {
  std::string name = std::filesystem::path(work_dir).filename().string();
  return files::is_plain_name(name) ? name : std::string();
}

namespace {

/// Conditioning = the prompt text, written atomically.
class prompt_encoder final : public encoder_backend {
public:
  explicit prompt_encoder(std::string who) : who_(std::move(who)) {}

  stage_result encode(const std::string& prompt, const stage_env& env) override {
    auto start = std::chrono::steady_clock::now();
    auto elapsed = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    if (env.output_path.empty())
      return failed(msg::outcome::fatal, who_ + ": no output path", 0);
    if (env.cancel != nullptr && env.cancel->load())
      return failed(msg::outcome::transient, "cancelled", 0);
    try {
      files::write_atomic(env.output_path, prompt);
    } catch (const std::exception& e) {
      return failed(msg::outcome::transient, who_ + ": " + e.what(), elapsed());
    }
    stage_result r;
    r.outcome = msg::outcome::ok;
    r.sha256 = to_hex(sha256_of(prompt));
    r.bytes = prompt.size();
    r.elapsed_s = elapsed();
    return r;
  }

private:
  std::string who_;
};

} // namespace

std::unique_ptr<encoder_backend> make_prompt_encoder(std::string who) {
  return std::make_unique<prompt_encoder>(std::move(who));
}

stage_result commit_product(const std::string& product, const std::string& output_path,
                            const std::string& claim, const std::string& where,
                            double elapsed_s) {
  std::string why;
  auto prod = check_product(product, why);
  if (!prod)
    return failed(msg::outcome::fatal, claim + " but " + why + where, elapsed_s);
  try {
    files::make_dirs(files::parent_of(output_path));
    files::fsync_file(product);
    if (product != output_path)
      files::rename_durable(product, output_path);
  } catch (const std::exception& e) {
    return failed(msg::outcome::transient, claim + ", but: " + e.what(), elapsed_s);
  }
  stage_result r;
  r.outcome = msg::outcome::ok;
  r.sha256 = prod->sha256;
  r.bytes = prod->bytes;
  r.elapsed_s = elapsed_s;
  return r;
}

std::optional<stage_result> check_latent(const std::string& who, const std::string& latent_path,
                                         const std::string& latent_sha256) {
  if (!is_sha256_hex(latent_sha256))
    return failed(msg::outcome::fatal,
                  who + ": expected latent digest is not 64 lowercase hex digits", 0);
  // Never decode bytes we were not meant to: the product would look fine and be wrong.
  std::string got = sha256_file_hex(latent_path);
  if (got.empty())
    return failed(msg::outcome::transient, who + ": cannot read latent " + latent_path, 0);
  if (got != latent_sha256)
    return failed(msg::outcome::corrupt,
                  who + ": latent " + latent_path + " hashed to " + got + ", expected " +
                    latent_sha256 + "; nothing decoded",
                  0);
  return std::nullopt;
}

} // namespace vidline::backends::exec
