// The Gloo baseline of bench/allreduce: gloo::allreduce (ring, float, sum) over Gloo's TCP
// transport, timed exactly as the ring is. Writes {bytes: seconds per call} to --out (rank 0).

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  int rank = 0, size = 1, runs = 5;
  std::uint64_t min = 4096, max = 256 << 20;
  std::string dir, out;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--rank") rank = std::stoi(argv[i + 1]);
    else if (a == "--size") size = std::stoi(argv[i + 1]);
    else if (a == "--dir") dir = argv[i + 1];
    else if (a == "--min") min = std::stoull(argv[i + 1]);
    else if (a == "--max") max = std::stoull(argv[i + 1]);
    else if (a == "--runs") runs = std::stoi(argv[i + 1]);
    else if (a == "--out") out = argv[i + 1];
  }
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto store = gloo::rendezvous::FileStore(dir);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->connectFullMesh(store, device);

  nlohmann::json result = nlohmann::json::object();
  std::vector<float> data(max / 4);
  int status = 0;
  const auto allreduce = [&](std::size_t count) {
    gloo::AllreduceOptions opts(context);
    opts.setOutput(data.data(), count);
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    gloo::allreduce(opts);
  };
  const auto barrier = [&] {
    gloo::BarrierOptions opts(context);
    gloo::barrier(opts);
  };
  for (std::uint64_t bytes = min; bytes <= max; bytes *= 4) {
    const std::size_t count = bytes / 4;
    for (std::size_t i = 0; i < count; ++i)
      data[i] = static_cast<float>(i % 97 + static_cast<std::size_t>(rank));
    allreduce(count);
    for (std::size_t i = 0; i < count; ++i)
      if (data[i] != static_cast<float>(size * static_cast<int>(i % 97) + size * (size - 1) / 2))
        status = 1;
    const int iters = static_cast<int>(std::clamp<std::uint64_t>((std::uint64_t{512} << 20) / bytes, 3, 2000));
    std::vector<double> times;
    for (int run = 0; run < runs + 1; ++run) {
      barrier();
      const auto t0 = std::chrono::steady_clock::now();
      for (int it = 0; it < iters; ++it)
        allreduce(count);
      if (run > 0)
        times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters);
    }
    std::sort(times.begin(), times.end());
    result[std::to_string(bytes)] = times[times.size() / 2];
  }
  if (rank == 0 && !out.empty())
    std::ofstream(out) << result.dump();
  return status;
}
