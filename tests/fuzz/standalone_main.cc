// A stand-in for libFuzzer's main, linked into the fuzz harnesses in the
// default (gcc, no sanitizer) build so `bazel test //...` runs every harness.
//
// It takes the subset of libFuzzer's command line that run_fuzzer.sh passes
// (-max_total_time=N, -runs=N, -seed=N, directories or files), so the same
// test script drives both builds. It replays every seed file, then feeds the
// harness random mutations of the seeds (bit flips, byte overwrites, inserts,
// erases, truncations, splices of two seeds) until the time or run budget is
// spent. No coverage feedback: this is a smoke test that the harness and the
// code under it survive the seeds and their near neighbours; the real search
// happens under --config=fuzz.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) __attribute__((weak));

namespace {

using Bytes = std::vector<uint8_t>;

void ReadInputs(const std::string& path, std::vector<Bytes>* out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(path, ec)) {
      if (e.is_regular_file()) files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());  // same order every run
    for (const auto& f : files) ReadInputs(f, out);
    return;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  out->emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void Run(const Bytes& input) {
  // A copy in a buffer of exactly its size, so reads past the end are at
  // least as likely to fault here as under libFuzzer.
  std::unique_ptr<uint8_t[]> copy(new uint8_t[input.size() + 1]);
  if (!input.empty()) std::memcpy(copy.get(), input.data(), input.size());
  LLVMFuzzerTestOneInput(copy.get(), input.size());
}

Bytes Mutate(const std::vector<Bytes>& seeds, std::mt19937_64& rng) {
  Bytes b = seeds[rng() % seeds.size()];
  int edits = 1 + rng() % 4;
  for (int i = 0; i < edits; ++i) {
    size_t pos = b.empty() ? 0 : rng() % b.size();
    switch (rng() % 7) {
      case 0:  // flip a bit
        if (!b.empty()) b[pos] ^= uint8_t(1u << (rng() % 8));
        break;
      case 1:  // overwrite a byte, favouring the values that break parsers
        if (!b.empty()) {
          static const uint8_t kInteresting[] = {0, 1, 0x7f, 0x80, 0xff, '"', ':', '{', '\n'};
          b[pos] = rng() % 2 ? uint8_t(rng()) : kInteresting[rng() % sizeof(kInteresting)];
        }
        break;
      case 2:  // insert a random byte
        b.insert(b.begin() + pos, uint8_t(rng()));
        break;
      case 3:  // erase a run
        if (!b.empty()) b.erase(b.begin() + pos, b.begin() + std::min(b.size(), pos + 1 + rng() % 8));
        break;
      case 4:  // truncate
        b.resize(pos);
        break;
      case 5: {  // splice in part of another seed
        const Bytes& other = seeds[rng() % seeds.size()];
        if (other.empty()) break;
        size_t from = rng() % other.size();
        size_t n = 1 + rng() % (other.size() - from);
        b.insert(b.begin() + pos, other.begin() + from, other.begin() + from + n);
        break;
      }
      case 6:  // duplicate a run (repeated fields, nested messages)
        if (!b.empty()) {
          size_t n = 1 + rng() % std::min<size_t>(b.size() - pos, 16);
          Bytes run(b.begin() + pos, b.begin() + pos + n);
          b.insert(b.begin() + pos, run.begin(), run.end());
        }
        break;
    }
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  double max_seconds = 5;
  long long max_runs = -1;
  uint64_t seed = 1;
  std::vector<Bytes> seeds;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("-max_total_time=", 0) == 0) {
      max_seconds = std::atof(a.c_str() + 16);
    } else if (a.rfind("-runs=", 0) == 0) {
      max_runs = std::atoll(a.c_str() + 6);
    } else if (a.rfind("-seed=", 0) == 0) {
      seed = std::strtoull(a.c_str() + 6, nullptr, 10);
    } else if (a.rfind("-", 0) == 0) {
      // Other libFuzzer flags mean nothing here.
    } else {
      ReadInputs(a, &seeds);
    }
  }
  seeds.emplace_back();  // the empty input is always worth a try
  for (const Bytes& s : seeds) Run(s);
  std::mt19937_64 rng(seed);
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(max_seconds);
  long long runs = 0;
  while ((max_runs < 0 || runs < max_runs) && std::chrono::steady_clock::now() < end) {
    Run(Mutate(seeds, rng));
    ++runs;
  }
  std::printf("standalone fuzz driver: %zu seeds, %lld mutated runs, no crash\n", seeds.size(),
              runs);
  return 0;
}
