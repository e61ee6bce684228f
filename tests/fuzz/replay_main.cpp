// Runs a libFuzzer target's harness (tests/fuzz/fuzz_*.cpp) over files, without libFuzzer:
// built with the project's compiler into the main build, launch/test replays every
// committed seed through each harness, so a harness that no longer compiles or a seed that
// now breaks a property fails the suite. Fuzzing itself (clang, sanitizers, new inputs):
// launch/fuzz.
//
//   fuzz_replay_<target> PATH...   each PATH a file, or a directory whose files are read
//                                  (not recursively); exits 0 after all ran, 2 when a path
//                                  cannot be read or none holds a file. A property the
//                                  harness checks aborts the process (the seed is named
//                                  on stderr before it runs).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool replay(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fuzz replay: cannot read %s\n", file.c_str());
    return false;
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::fprintf(stderr, "fuzz replay: %s (%zu bytes)\n", file.c_str(), bytes.size());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return true;
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
    return 2;
  }
  std::size_t ran = 0;
  for (int i = 1; i < argc; ++i) {
    std::error_code ec;
    std::filesystem::path p(argv[i]);
    if (std::filesystem::is_directory(p, ec)) {
      std::vector<std::filesystem::path> files;
      for (auto& e : std::filesystem::directory_iterator(p, ec))
        if (e.is_regular_file())
          files.push_back(e.path());
      if (ec) {
        std::fprintf(stderr, "fuzz replay: cannot list %s: %s\n", p.c_str(), ec.message().c_str());
        return 2;
      }
      std::sort(files.begin(), files.end());
      for (auto& f : files) {
        if (!replay(f))
          return 2;
        ++ran;
      }
    } else {
      if (!replay(p))
        return 2;
      ++ran;
    }
  }
  if (ran == 0) {
    std::fprintf(stderr, "fuzz replay: no file in the paths given\n");
    return 2;
  }
  std::printf("fuzz replay: %zu inputs, every property held\n", ran);
  return 0;
}
