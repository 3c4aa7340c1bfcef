// One rank of a ring communicator, for multi-process tests.
//
//   collective_peer --rank R --size N --dir DIR [--count ELEMS] [--iters K] [--timeout-ms T]
//                   [--chunk BYTES] [--forever]
//
// Joins a file rendezvous in DIR, then runs allreduce(sum) of COUNT floats K times (or until an
// error with --forever), checking every result against the exact expected value. Prints one line
// per event: "ready", "ok ITER", "error ITER MILLIS CODE MESSAGE" (MILLIS since the failing call
// started), "done". Exits 0 when every call succeeded, 3 on a collective error, 4 on a wrong result.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "transport/rendezvous.hpp"
#include "transport/ring_communicator.hpp"

using namespace rekindle;
using namespace rekindle::transport;

int main(int argc, char** argv) {
  int rank = -1, size = 0, iters = 10;
  std::size_t count = 1 << 16, chunk = 1 << 20;
  long timeout_ms = 10000;
  bool forever = false;
  std::string dir;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&] { return std::string{i + 1 < argc ? argv[++i] : ""}; };
    if (a == "--rank") rank = std::stoi(next());
    else if (a == "--size") size = std::stoi(next());
    else if (a == "--dir") dir = next();
    else if (a == "--count") count = std::stoull(next());
    else if (a == "--iters") iters = std::stoi(next());
    else if (a == "--timeout-ms") timeout_ms = std::stol(next());
    else if (a == "--chunk") chunk = std::stoull(next());
    else if (a == "--forever") forever = true;
    else {
      std::fprintf(stderr, "collective_peer: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  ring_options options;
  options.timeout = std::chrono::milliseconds{timeout_ms};
  options.chunk_size = chunk;
  options.net_devices = "lo";
  auto comm = ring_communicator::create(rank, size, options);
  if (!comm) {
    std::printf("error 0 0 %s\n", comm.error().to_string().c_str());
    return 3;
  }
  auto addresses = file_rendezvous(dir, rank, size, (*comm)->address(), std::chrono::seconds{60});
  if (!addresses) {
    std::printf("error 0 0 %s\n", addresses.error().to_string().c_str());
    return 3;
  }
  if (auto st = (*comm)->connect(*addresses); !st.ok()) {
    std::printf("error 0 0 %s\n", st.to_string().c_str());
    return 3;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  std::vector<float> data(count);
  for (int it = 0; forever || it < iters; ++it) {
    for (std::size_t i = 0; i < count; ++i)
      data[i] = static_cast<float>((i + static_cast<std::size_t>(it)) % 64 + static_cast<std::size_t>(rank));
    const auto start = std::chrono::steady_clock::now();
    auto st = (*comm)->allreduce(data.data(), count, dtype::f32, reduce_op::sum);
    if (!st.ok()) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
      std::printf("error %d %lld %s %s\n", it, static_cast<long long>(ms), std::string{to_string(st.code())}.c_str(),
                  st.message().c_str());
      std::fflush(stdout);
      return 3;
    }
    for (std::size_t i = 0; i < count; ++i) {
      const float expected = static_cast<float>(size * static_cast<int>((i + static_cast<std::size_t>(it)) % 64) +
                                                size * (size - 1) / 2);
      if (data[i] != expected) {
        std::printf("wrong %d element %zu: %g, expected %g\n", it, i, static_cast<double>(data[i]),
                    static_cast<double>(expected));
        return 4;
      }
    }
    if (it % 50 == 0 || !forever) {
      std::printf("ok %d\n", it);
      std::fflush(stdout);
    }
  }
  std::printf("done\n");
  return 0;
}
