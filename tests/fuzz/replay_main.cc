// Replays fuzz inputs without libFuzzer: every file named on the command line
// (or found in a directory named there) goes once through the fuzz target.
// Built with any compiler, so the committed corpus and the regression inputs
// of past findings run in every build (test fuzz.replay).
#include <dirent.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv);
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool read_all(const std::string& path, std::vector<uint8_t>* out) {
  FILE* f = fopen(path.c_str(), "rb");
  if (!f) return false;
  uint8_t buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out->insert(out->end(), buf, buf + n);
  fclose(f);
  return true;
}

// False if `path` does not exist: a misspelt or moved directory must not
// make the replay pass without replaying anything.
bool collect(const std::string& path, std::vector<std::string>* files) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return false;
  if (!S_ISDIR(st.st_mode)) {
    files->push_back(path);
    return true;
  }
  DIR* d = opendir(path.c_str());
  if (!d) return false;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") collect(path + "/" + name, files);
  }
  closedir(d);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    if (!collect(argv[i], &files)) {
      fprintf(stderr, "fuzz_replay: cannot read %s\n", argv[i]);
      return 2;
    }
  }
  if (files.empty()) {
    fprintf(stderr, "fuzz_replay: no inputs\n");
    return 2;
  }
  for (const auto& f : files) {
    std::vector<uint8_t> data;
    if (!read_all(f, &data)) {
      fprintf(stderr, "fuzz_replay: cannot read %s\n", f.c_str());
      return 2;
    }
    fprintf(stderr, "fuzz_replay: %s (%zu bytes)\n", f.c_str(), data.size());
    LLVMFuzzerTestOneInput(data.data(), data.size());
  }
  printf("%zu passed, 0 failed\n", files.size());
  return 0;
}
