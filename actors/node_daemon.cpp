#include "actors/node_daemon.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "actors/agent_actor.hpp"
#include "actors/bridge.hpp"
#include "actors/checkpoint_actor.hpp"
#include "actors/leadership.hpp"
#include "actors/messages.hpp"
#include "actors/metrics.hpp"
#include "actors/status_board.hpp"
#include "actors/supervisor_actor.hpp"
#include "common/child_reaper.hpp"
#include "common/files.hpp"
#include "common/process.hpp"
#include "common/service_notify.hpp"
#include "storage/state_store.hpp"
#include "training/training_task.hpp"
#include "web/exposition.hpp"
#include "web/http_server.hpp"
#include "web/status_page.hpp"

namespace rekindle::actors {

namespace {

namespace fs = std::filesystem;

/// A stop signal taken by a handler: one delivered to a thread that does not block it (OpenBLAS
/// starts its threads before main(), with no signal blocked), which would otherwise end the
/// process at once instead of stopping it cleanly.
std::atomic<int> stop_signal{0};
extern "C" void on_stop_signal(int sig) { stop_signal.store(sig); }

/// A status older than this is from a supervisor that no longer runs here.
constexpr auto status_max_age = std::chrono::seconds{10};

/// The status for the page, with its loss curve as (step, loss) pairs.
nlohmann::json page_status(const job_status& job, const loss_curve& curve) {
  auto j = nlohmann::json(job);
  j.erase("losses");
  j.erase("step_seconds");
  j["loss_curve"] = curve;
  return j;
}

/// The daemon's HTTP endpoints: /metrics everywhere; the status page and its data where the
/// supervisor runs.
std::vector<web::route> http_routes(const node_context& ctx, const bridge& b, const status_board& board,
                                    std::chrono::steady_clock::time_point started) {
  std::vector<web::route> routes;
  routes.push_back({"/metrics", [&ctx, &b, &board, started] {
                      daemon_figures d;
                      d.node = ctx.node_name();
                      const auto job = board.latest(status_max_age);
                      d.role = job ? "supervisor" : "node";
                      d.epoch = b.epoch().value();
                      d.uptime_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
                      d.transport = b.stats();
                      d.stale_delivered = b.stale_delivered();
                      d.not_from_leader = b.not_from_leader();
                      d.refused = b.refused();
                      d.undeliverable = b.undeliverable();
                      return web::response{200, std::string{web::exposition::content_type}, render_metrics(d, job.get())};
                    }});
  auto not_here = [&ctx] {
    const auto where = ctx.supervisor_address();
    return web::response{404, "text/plain; charset=utf-8",
                         "this daemon (" + ctx.node_name() + ") does not run the job's supervisor" +
                             (where.empty() ? std::string{} : "; its daemon is at " + where) + "\n"};
  };
  routes.push_back({"/api/status", [&board, not_here] {
                      const auto job = board.latest(status_max_age);
                      if (!job)
                        return not_here();
                      return web::response{200, "application/json", page_status(*job, *board.curve()).dump()};
                    }});
  routes.push_back({"/api/events", [&board, not_here] {
                      if (!board.latest(status_max_age))
                        return not_here();
                      return web::response{200, "application/json", nlohmann::json(board.events()).dump()};
                    }});
  routes.push_back({"/", [&board, not_here] {
                      if (!board.latest(status_max_age))
                        return not_here();
                      return web::response{200, "text/html; charset=utf-8", std::string{web::status_page_html()}};
                    }});
  return routes;
}

}  // namespace

web::access http_access(const config::security_spec& s) {
  if (s.token.empty())
    return {};
  if (s.readonly_token.empty())
    return {"", "authentication is on (security.token_file) and no read-only token is configured: set "
                "security.readonly_token_file to open /metrics and the status page"};
  return {s.readonly_token, ""};
}

int run_node_daemon(daemon_options o) {
  // Stop signals are taken by sigtimedwait in this thread and SIGCHLD by the reaper
  // (common/child_reaper.hpp); every thread started below inherits the mask (worker processes
  // reset it).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigset_t blocked = stop_signals;
  sigaddset(&blocked, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &blocked, nullptr);
  struct sigaction stop_action {};
  stop_action.sa_handler = on_stop_signal;
  sigemptyset(&stop_action.sa_mask);
  sigaction(SIGTERM, &stop_action, nullptr);
  sigaction(SIGINT, &stop_action, nullptr);

  const auto node = o.spec.find_node(o.node);
  if (!node) {
    spdlog::error("node '{}' is not in {}", o.node, o.spec.source);
    return 3;
  }
  real_clock time;
  node_context ctx;
  ctx.spec = o.spec;
  ctx.config_path = o.config_path;
  ctx.node = *node;
  ctx.data_dir = o.data_dir ? fs::absolute(*o.data_dir) : o.spec.daemon.data_dir;
  ctx.node_dir = ctx.data_dir / o.node;
  ctx.time = &time;
  ctx.supervisor_override = o.supervisor;
  ctx.worker_binary = fs::read_symlink("/proc/self/exe").parent_path() / "rekindle-worker";
  std::error_code ec;
  fs::create_directories(ctx.node_dir, ec);
  if (!ec)  // made by an older version or by hand: other users keep out all the same
    fs::permissions(ctx.node_dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  if (ec) {
    spdlog::error("cannot create {}: {}", ctx.node_dir.string(), ec.message());
    return 3;
  }
  const bool is_supervisor = *node == o.spec.supervisor_node();
  fs::remove(ctx.node_dir / "job.done", ec);  // a previous run's

  caf::actor_system_config cfg;
  configure_actor_system(cfg, o.spec.daemon.actor_threads);
  caf::actor_system sys{cfg};

  const auto& me = o.spec.nodes.at(node->value());
  auto mo = messenger_options_for(o.spec, *node, "rekindled " + o.node);
  mo.listen_host = me.bind.empty() ? me.host : me.bind;
  mo.listen_port = o.port ? *o.port : me.port;
  mo.readonly_token = o.spec.security.readonly_token;
  auto b = bridge::start(sys, mo);
  if (!b) {
    spdlog::error("cannot start the transport: {}", b.error().message());
    return 3;
  }
  ctx.bridge = b->get();
  ctx.address = me.host + ":" + std::to_string((*b)->port());
  supervisor_link link{**b};
  ctx.supervisor = &link;
  (void)write_file_atomically(ctx.node_dir / "daemon.addr", ctx.address + "\n");
  spdlog::info("rekindled {} listening on {}{}{}", o.node, ctx.address,
               me.bind.empty() ? std::string{} : " (bound to " + me.bind + ")", is_supervisor ? " (supervisor)" : "");

  status_board board;
  ctx.board = &board;
  std::unique_ptr<web::http_server> http;
  if (o.spec.daemon.http) {
    web::server_options ho;
    ho.host = !o.spec.daemon.http_host.empty() ? o.spec.daemon.http_host : mo.listen_host;
    ho.port = o.spec.daemon.http_port;
    ho.who = http_access(o.spec.security);
    auto started = web::http_server::start(ho, http_routes(ctx, **b, board, std::chrono::steady_clock::now()));
    if (!started) {
      spdlog::error("{} (daemon.http_port; daemon.http = false turns HTTP off)", started.error().message());
      return 3;
    }
    http = std::move(*started);
    const auto where = ho.host + ":" + std::to_string(http->port());
    (void)write_file_atomically(ctx.node_dir / "http.addr", where + "\n");
    spdlog::info("http on {}: /metrics{}", where, is_supervisor || ctx.with_standby() ? ", the status page at /" : "");
  }

  // Snapshot slots: last run's leftovers go, then one per local rank, sized for the largest state.
  const auto prefix = storage::snapshot_slot::name_prefix(ctx.node_dir, o.spec.job.name);
  (void)storage::snapshot_slot::remove_with_prefix(prefix);
  std::vector<storage::snapshot_slot> slots;
  const auto capacity = training::snapshot_capacity(o.spec);
  for (std::uint32_t i = 0; i < ctx.max_local_ranks(); ++i) {
    auto slot = storage::snapshot_slot::create(ctx.slot_name(i), capacity);
    if (!slot) {
      spdlog::error("cannot create snapshot slot {}: {}", i, slot.error().message());
      return 3;
    }
    slots.push_back(std::move(*slot));
  }

  caf::actor supervisor;
  if (is_supervisor && !ctx.with_standby()) {
    auto store = storage::state_store::open(ctx.node_dir / "state", {.clk = &time});
    if (!store) {
      spdlog::error("cannot open the state store: {}", store.error().message());
      return 3;
    }
    supervisor = sys.spawn<supervisor_actor>(&ctx, std::move(*store));
    (void)write_file_atomically(ctx.data_dir / "supervisor.addr", ctx.address + "\n");
  }
  auto checkpoint = sys.spawn<checkpoint_actor>(&ctx, std::move(slots));
  auto agent = sys.spawn<agent_actor>(&ctx, checkpoint);
  // With a standby, etcd decides which daemon runs the supervisor (docs/RELIABILITY.md).
  std::unique_ptr<leadership> leader;
  if (ctx.with_standby())
    leader = std::make_unique<leadership>(sys, ctx, agent);
  const bool candidate = is_supervisor || o.node == o.spec.cluster.standby;

  // Ready: the transport listens, the slots exist, the actors run (systemd's Type=notify).
  if (auto n = notify_service_manager("READY=1\nSTATUS=node " + o.node + " listening on " + ctx.address +
                                      "\nMAINPID=" + std::to_string(::getpid()));
      !n.ok())
    spdlog::warn("{}", n.message());

  // The reaper: worker processes are reported the moment they end, and it ends with the daemon.
  auto reaper = child_reaper::start(
      [&](pid_t pid, int status) { caf::anon_send(agent, child_exited{pid, status, now_ns(time)}); });
  int exit_code = 0;
  if (!reaper) {
    spdlog::error("{}", reaper.error().message());
    exit_code = 3;
  }

  // Run until a stop signal, or the job's end.
  while (reaper) {
    timespec wait{0, 200'000'000};
    int sig = sigtimedwait(&stop_signals, nullptr, &wait);
    if (sig <= 0)
      sig = stop_signal.load();
    if (sig == SIGTERM || sig == SIGINT) {
      spdlog::info("rekindled {} stops on signal {}", o.node, sig);
      (void)notify_service_manager("STOPPING=1");
      break;
    }
    if (o.exit_when_done) {
      std::ifstream report(ctx.data_dir / "report.json");
      if (report && (ctx.with_standby() ? candidate : is_supervisor)) {
        std::string text((std::istreambuf_iterator<char>(report)), std::istreambuf_iterator<char>());
        exit_code = text.find("\"state\": \"failed\"") != std::string::npos ? 1 : 0;
        std::this_thread::sleep_for(std::chrono::milliseconds{300});
        break;
      }
      if (!(ctx.with_standby() ? candidate : is_supervisor)) {
        if (fs::exists(ctx.data_dir / "report.json"))
          break;
        // The agent heard the job end from the supervisor (hosts that share no data folder).
        if (std::ifstream done(ctx.node_dir / "job.done"); done) {
          std::string state;
          done >> state;
          exit_code = state == "failed" ? 1 : 0;
          break;
        }
      }
    }
  }
  if (http)
    http->stop();  // its routes read the bridge and the board
  leader.reset();  // stops its supervisor, if it runs one, and gives up the lease
  if (supervisor)
    caf::anon_send_exit(supervisor, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(agent, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(checkpoint, caf::exit_reason::user_shutdown);
  (*b)->shutdown();
  spdlog::info("rekindled {} ends; {}", o.node, (*b)->fence_summary());
  sys.await_all_actors_done();
  // A node check or a stack capture still running sends to the actor system: it stays until they end.
  if (!wait_for_agent_threads(std::chrono::seconds{60}))
    spdlog::warn("rekindled {}: a node check or stack capture did not end within 60 s", o.node);
  if (reaper)
    reaper->reset();
  for (std::uint32_t i = 0; i < ctx.max_local_ranks(); ++i)
    (void)storage::snapshot_slot::remove(ctx.slot_name(i));
  return exit_code;
}

}  // namespace rekindle::actors
