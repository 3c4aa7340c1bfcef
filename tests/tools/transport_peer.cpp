// A messenger in its own process, for multi-process tests.
//
//   transport_peer --token TOKEN --port-file FILE [--name NAME] [--peer-timeout-ms T]
//   transport_peer --token TOKEN --connect PORT
//
// Listens on 127.0.0.1, writes its port to FILE (atomically), and echoes every frame back to its
// sender until killed. With --connect, connects to 127.0.0.1:PORT instead and sends frames to it
// until killed (tests kill it at any point of the connection).

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
  int connect_port = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&] { return std::string{i + 1 < argc ? argv[++i] : ""}; };
    if (a == "--token") options.token = next();
    else if (a == "--port-file") port_file = next();
    else if (a == "--name") options.name = next();
    else if (a == "--connect") connect_port = std::stoi(next());
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
  if (connect_port != 0) {
    options.listen_host.clear();
    auto p = (*m)->connect_blocking("127.0.0.1", static_cast<std::uint16_t>(connect_port), std::chrono::seconds{30});
    if (!p) {
      std::fprintf(stderr, "transport_peer: %s\n", p.error().to_string().c_str());
      return 4;
    }
    for (;;) {
      frame f;
      f.header.type = 1;
      f.payload = shared_bytes::copy_of("ping");
      (*m)->send(p->id, std::move(f));
      std::this_thread::sleep_for(std::chrono::milliseconds{1});
    }
  }
  const auto tmp = port_file + ".tmp";
  std::ofstream(tmp) << (*m)->port() << "\n";
  std::filesystem::rename(tmp, port_file);
  for (;;)
    pause();
}
