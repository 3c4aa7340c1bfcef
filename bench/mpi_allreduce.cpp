// The Open MPI baseline of bench/allreduce: MPI_Allreduce (in place, float, sum) timed exactly as
// the ring is. Started by `allreduce` through mpirun; writes {bytes: seconds per call} to --out.

#include <mpi.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::uint64_t min = 4096, max = 256 << 20;
  int runs = 5;
  std::string out;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--min") min = std::stoull(argv[i + 1]);
    else if (a == "--max") max = std::stoull(argv[i + 1]);
    else if (a == "--runs") runs = std::stoi(argv[i + 1]);
    else if (a == "--out") out = argv[i + 1];
  }
  nlohmann::json result = nlohmann::json::object();
  std::vector<float> data(max / 4);
  int status = 0;
  for (std::uint64_t bytes = min; bytes <= max; bytes *= 4) {
    const int count = static_cast<int>(bytes / 4);
    for (int i = 0; i < count; ++i)
      data[static_cast<std::size_t>(i)] = static_cast<float>(i % 97 + rank);
    MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < count; ++i)
      if (data[static_cast<std::size_t>(i)] != static_cast<float>(size * (i % 97) + size * (size - 1) / 2))
        status = 1;
    const int iters = static_cast<int>(std::clamp<std::uint64_t>((std::uint64_t{512} << 20) / bytes, 3, 2000));
    std::vector<double> times;
    for (int run = 0; run < runs + 1; ++run) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      for (int it = 0; it < iters; ++it)
        MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      if (run > 0)
        times.push_back((MPI_Wtime() - t0) / iters);
    }
    std::sort(times.begin(), times.end());
    result[std::to_string(bytes)] = times[times.size() / 2];
  }
  if (rank == 0 && !out.empty())
    std::ofstream(out) << result.dump();
  MPI_Finalize();
  return status;
}
