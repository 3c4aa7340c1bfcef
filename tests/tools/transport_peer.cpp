// A messenger in its own process, for multi-process tests.
//
//   transport_peer --token TOKEN --port-file FILE [--name NAME] [--peer-timeout-ms T]
//
// Listens on 127.0.0.1, writes its port to FILE (atomically), and echoes every frame back to its
// sender until killed.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "transport/messenger.hpp"

using namespace rekindle;
using namespace rekindle::transport;

int main(int argc, char** argv) {
  messenger_options options;
  options.listen_host = "127.0.0.1";
  options.net_devices = "lo";
  options.name = "transport_peer";
  std::string port_file;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&] { return std::string{i + 1 < argc ? argv[++i] : ""}; };
    if (a == "--token") options.token = next();
    else if (a == "--port-file") port_file = next();
    else if (a == "--name") options.name = next();
    else if (a == "--peer-timeout-ms") options.peer_timeout = std::chrono::milliseconds{std::stol(next())};
    else {
      std::fprintf(stderr, "transport_peer: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  messenger* self = nullptr;
  auto m = messenger::start(options, {.on_frame = [&self](const peer_info& from, frame&& f) {
                                        self->send(from.id, std::move(f));
                                      }});
  if (!m) {
    std::fprintf(stderr, "transport_peer: %s\n", m.error().to_string().c_str());
    return 3;
  }
  self = m->get();
  const auto tmp = port_file + ".tmp";
  std::ofstream(tmp) << (*m)->port() << "\n";
  std::filesystem::rename(tmp, port_file);
  for (;;)
    pause();
}
