#include "cli_hygiene.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include "core/error.h"
#include "core/limits.h"

namespace sf::cli {

namespace {

constexpr int kUsageExit = 2;

void add_limits_to(CLI::App& cmd) {
  if (cmd.get_option_no_throw("--max-memory") == nullptr)
    cmd.add_option_function<std::string>(
           "--max-memory",
           [](const std::string& text) {
             limits::set_memory_budget(limits::parse_byte_size(text, "--max-memory"));
           },
           "Memory budget for tensors, e.g. 512M or 4G (default: half of physical RAM)")
        ->type_name("SIZE");
  if (CLI::Option* threads = cmd.get_option_no_throw("--threads"))
    threads->check(CLI::Range(0, limits::kMaxThreads));
  // Counts mean what they say: 0 or a negative number is a mistake, never "everything".
  for (const char* name : {"--limit", "--train-limit", "--test-limit", "--count", "--top",
                           "--runs", "--checkpoint-every", "--calib-count", "--batch", "--epochs"})
    if (CLI::Option* count = cmd.get_option_no_throw(name))
      count->check(at_least(std::string(name) == "--epochs" ? 0 : 1));
  if (CLI::Option* warmup = cmd.get_option_no_throw("--warmup")) warmup->check(at_least(0));
  for (CLI::App* sub : cmd.get_subcommands({})) add_limits_to(*sub);
}

// CLI11's messages, on one line.
std::string one_line(std::string text) {
  for (char& c : text)
    if (c == '\n' || c == '\r') c = ' ';
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

int report(const std::string& message) {
  std::fprintf(stderr, "slimflow: error: %s\n", one_line(message).c_str());
  return kUsageExit;
}

}  // namespace

CLI::Validator at_least(int64_t minimum) {
  return CLI::Validator(
      [minimum](std::string& text) -> std::string {
        int64_t value = 0;
        if (!CLI::detail::lexical_cast(text, value)) return "'" + text + "' is not an integer";
        if (value < minimum) return fmt::format("must be at least {}, got {}", minimum, value);
        return "";
      },
      fmt::format("INT>={}", minimum));
}

void add_common_limits(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands({})) add_limits_to(*sub);
}

int parse_or_report(CLI::App& app, int argc, char** argv) {
  std::vector<std::string> names;
  for (CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
  if (argc > 1 && argv[1][0] != '-' &&
      std::find(names.begin(), names.end(), argv[1]) == names.end()) {
    return report(fmt::format("unknown command '{}' (commands: {}; see slimflow --help)", argv[1],
                              fmt::join(names, ", ")));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    const std::vector<CLI::App*> chosen = app.get_subcommands();
    const std::string help =
        chosen.empty() ? "slimflow --help" : "slimflow " + chosen[0]->get_name() + " --help";
    return report(fmt::format("{} (see {})", e.what(), help));
  } catch (const Error& e) {
    return report(e.what());
  }
  return -1;
}

}  // namespace sf::cli
