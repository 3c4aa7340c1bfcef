// rekindle shell: the operator's interactive session. Each line is one `rekindle` command line,
// run by a fresh command-line parser with the shell's connection options as defaults, so the
// shell and one-shot commands can never disagree. libedit gives line editing, history and
// completion of commands, options, rank numbers and node names.

#include <editline/readline.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <set>

#include "apps/rekindle/commands.hpp"
#include "common/text.hpp"

namespace rekindle::apps {

namespace {

// Commands that change or stall the job, with the question the shell asks first.
const std::map<std::string, std::string, std::less<>>& destructive() {
  static const std::map<std::string, std::string, std::less<>> m{
      {"kill", "kill the rank's process"},
      {"hang", "stall the whole job until the rank is replaced"},
      {"slow", "hold back every rank of the job"},
      {"fail", "kill the node's daemon and every rank on it"},
      {"partition", "cut the two nodes off from each other"},
      {"throttle", "slow the link between the two nodes"},
      {"drain", "move every rank off the node"},
      {"scale", "restart every rank in a world of a new size"},
      {"rebalance", "restart the epoch with new micro-batch shares"},
      {"stop", "end the job"},
      {"replay", "inject every fault of the trace into the job"},
  };
  return m;
}

// ---- completion ----------------------------------------------------------------------------------

struct completion_state {
  std::vector<std::string> candidates;
  std::size_t next = 0;
  // The job's ranks and nodes, refreshed when older than a few seconds.
  std::vector<std::string> ranks, nodes;
  std::chrono::steady_clock::time_point fetched{};
};

completion_state& completion() {
  static completion_state s;
  return s;
}

void refresh_names() {
  auto& s = completion();
  const auto now = std::chrono::steady_clock::now();
  if (now - s.fetched < std::chrono::seconds{5})
    return;
  s.fetched = now;
  if (auto names = ranks_and_nodes()) {
    s.ranks = std::move(names->first);
    s.nodes = std::move(names->second);
  }
}

// What may come at word `index` after `before` (the words so far).
std::vector<std::string> candidates_for(const std::vector<std::string>& before, const std::string& text) {
  int ignored = 0;
  auto app = make_app(ignored);
  std::vector<std::string> out;
  if (before.empty()) {
    out = command_names(*app);
    out.erase(std::remove(out.begin(), out.end(), "shell"), out.end());
    out.insert(out.end(), {"help", "exit"});
    return out;
  }
  if (before[0] == "help" && before.size() == 1)
    return command_names(*app);
  CLI::App* cmd = nullptr;
  try {
    cmd = app->get_subcommand(before[0]);
    // A nested command: `checkpoint now`, `trace convert`.
    if (before.size() > 1 && cmd->get_subcommands([](const CLI::App*) { return true; }).size() > 0)
      cmd = cmd->get_subcommand(before[1]);
  } catch (const CLI::Error&) {
    if (cmd == nullptr)
      return out;
  }
  if (!text.empty() && text[0] == '-') {
    for (const auto* opt : cmd->get_options())
      for (const auto& name : opt->get_lnames())
        out.push_back("--" + name);
    return out;
  }
  const auto& last = before.back();
  if (last == "rank" && before.size() == 2) {
    refresh_names();
    return completion().ranks;
  }
  if ((last == "node" && before.size() == 2) || ((before[0] == "partition" || before[0] == "throttle") && before.size() == 2)) {
    refresh_names();
    return completion().nodes;
  }
  if (before.size() == 1) {
    const std::string c = before[0];
    if (c == "kill" || c == "hang" || c == "slow")
      return {"rank"};
    if (c == "fail" || c == "drain")
      return {"node"};
    if (c == "partition" || c == "throttle") {
      refresh_names();
      return completion().nodes;
    }
    for (auto* sub : cmd->get_subcommands([](const CLI::App*) { return true; }))
      out.push_back(sub->get_name());
  }
  return out;
}

char* next_candidate(const char* text, int state) {
  auto& s = completion();
  if (state == 0)
    s.next = 0;
  const std::size_t n = std::strlen(text);
  while (s.next < s.candidates.size()) {
    const auto& c = s.candidates[s.next++];
    if (c.compare(0, n, text) == 0)
      return strdup(c.c_str());
  }
  return nullptr;
}

char** complete(const char* text, int start, int /*end*/) {
  rl_attempted_completion_over = 1;  // never file names
  auto words = split_shell_words(std::string{rl_line_buffer, static_cast<std::size_t>(std::max(start, 0))});
  completion().candidates = candidates_for(words ? *words : std::vector<std::string>{}, text);
  return rl_completion_matches(text, next_candidate);
}

// ---- the loop ------------------------------------------------------------------------------------

std::string history_file() {
  if (const char* f = std::getenv("REKINDLE_HISTORY"); f != nullptr && *f != '\0')
    return f;
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
    return std::string{home} + "/.rekindle_history";
  return {};
}

void on_interrupt(int) { stop_requested() = true; }

void print_help(CLI::App& app) {
  std::cout << "Commands (help COMMAND for its options; Tab completes; exit or Ctrl-D leaves):\n";
  for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == "shell")
      continue;
    auto what = sub->get_description();
    if (const auto cut = what.find_first_of(".\n("); cut != std::string::npos && cut > 20)
      what = what.substr(0, cut);
    if (what.size() > 90)
      what = what.substr(0, 87) + "...";
    std::cout << "  " << std::string(what.empty() ? "" : sub->get_name()) << std::string(12 - std::min<std::size_t>(11, sub->get_name().size()), ' ')
              << what << "\n";
  }
}

// Runs one line; returns its exit status, or -1 to leave the shell.
int run_line(const std::string& line, bool interactive, int last) {
  auto words = split_shell_words(line);
  if (!words) {
    std::cerr << "rekindle: " << words.error().message() << "\n";
    return 2;
  }
  if (words->empty())
    return last;
  const auto& command = (*words)[0];
  if (command == "exit" || command == "quit")
    return -1;
  int exit_code = 0;
  auto app = make_app(exit_code);
  auto names = command_names(*app);
  names.erase(std::remove(names.begin(), names.end(), "shell"), names.end());
  if (command == "help" || command == "?") {
    if (words->size() == 1) {
      print_help(*app);
      return 0;
    }
    words->erase(words->begin());
    words->push_back("--help");
  } else if (std::find(names.begin(), names.end(), command) == names.end()) {
    names.insert(names.end(), {"help", "exit"});
    std::cerr << "rekindle: unknown command '" << command << "'" << did_you_mean(command, names)
              << "; 'help' lists the commands\n";
    return 2;
  }
  const bool yes = std::find(words->begin(), words->end(), "--yes") != words->end();
  const bool asking_help = std::find(words->begin(), words->end(), "--help") != words->end() ||
                           std::find(words->begin(), words->end(), "-h") != words->end();
  if (const auto d = destructive().find(command); d != destructive().end() && !yes && !asking_help && interactive) {
    std::string question;
    for (const auto& w : *words)
      question += (question.empty() ? "" : " ") + w;
    question += ": this will " + d->second + ". Go ahead? [y/N] ";
    char* answer = readline(question.c_str());
    const bool go = answer != nullptr && (answer[0] == 'y' || answer[0] == 'Y');
    std::free(answer);
    if (!go) {
      std::cout << "not done\n";
      return 0;
    }
    words->push_back("--yes");
  }
  // CLI11 takes the words last first.
  std::vector<std::string> args(words->rbegin(), words->rend());
  stop_requested() = false;
  try {
    app->parse(args);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    return app->exit(e) == 0 ? 0 : 2;
  }
  std::cout.flush();
  return exit_code;
}

}  // namespace

std::atomic<bool>& stop_requested() {
  static std::atomic<bool> flag{false};
  return flag;
}

int run_shell(const connection_defaults& d) {
  set_connection_defaults(d);
  const bool interactive = isatty(STDIN_FILENO) != 0;
  struct sigaction sa{};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  int last = 0;
  if (!interactive) {
    // A script: one command per line, no prompt; the status of the last command.
    for (std::string line; std::getline(std::cin, line);) {
      const int r = run_line(line, false, last);
      if (r < 0)
        break;
      last = r;
    }
    return last;
  }
  rl_readline_name = "rekindle";
  rl_attempted_completion_function = complete;
  rl_completion_append_character = ' ';
  const auto history = history_file();
  using_history();
  stifle_history(1000);
  if (!history.empty())
    (void)read_history(history.c_str());
  std::cout << "rekindle shell: 'help' lists the commands, Tab completes, exit or Ctrl-D leaves.\n";
  for (;;) {
    char* raw = readline("rekindle> ");
    if (raw == nullptr) {
      if (stop_requested().exchange(false)) {
        std::cout << "\n";
        continue;
      }
      std::cout << "\n";
      break;
    }
    std::string line{raw};
    std::free(raw);
    if (trim(line).empty())
      continue;
    add_history(line.c_str());
    if (!history.empty())
      (void)write_history(history.c_str());
    const int r = run_line(line, true, last);
    if (r < 0)
      break;
    last = r;
  }
  return last;
}

void add_shell_command(CLI::App& app, int& exit_code) {
  auto d = std::make_shared<connection_defaults>();
  auto* cmd = app.add_subcommand("shell", "The interactive shell: line editing, history (~/.rekindle_history or "
                                          "$REKINDLE_HISTORY), Tab completion of commands, ranks and nodes, "
                                          "confirmation of destructive commands; from a pipe, one command per line");
  cmd->add_option("--config", d->config, "The cluster configuration (default: the embedded local.toml)");
  cmd->add_option("--connect", d->connect, "host:port of the supervisor's daemon (default: from the configuration)");
  cmd->add_option("--token-file", d->token_file, "Token to present (default: security.token_file)");
  cmd->add_option("--data-dir", d->data_dir, "Overrides daemon.data_dir when looking for the supervisor's address");
  cmd->add_option("--retries", d->retries, "Attempts to reach an unreachable supervisor (default 3)")
      ->check(CLI::Range(1, 100));
  cmd->callback([d, &exit_code] { exit_code = run_shell(*d); });
}

}  // namespace rekindle::apps
