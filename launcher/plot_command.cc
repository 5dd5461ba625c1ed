// `psformer plot RUN_DIR [--out FILE.png] [--size WxH]`: one PNG of a run's metrics.jsonl, drawn by
// gnuplot (Debian's gnuplot-nox): training and validation loss, validation BLEU (or accuracy when
// the run has no BLEU), learning rate with tokens/s, and the step time split stacked
// (compute, push, wait, pull).
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <utility>

#include "common/interrupt_cleanup.h"
#include "common/metrics_log.h"
#include "common/write_file.h"
#include "launcher/command_line.h"

extern char** environ;

namespace psformer {
namespace {

namespace fs = std::filesystem;

constexpr int kMinPlotSide = 64;     // pixels: room for the axes' labels
constexpr int kMaxPlotSide = 16384;  // pixels

double Field(const MetricsRecord& r, const std::string& key, double otherwise = NAN) {
  auto it = r.find(key);
  return it == r.end() ? otherwise : it->second;
}

// A temporary directory in $TMPDIR (or /tmp), removed with the object; error() says why none
// could be made.
class ScratchDir {
 public:
  ScratchDir() {
    const char* tmpdir = std::getenv("TMPDIR");
    const bool from_environment = tmpdir != nullptr && *tmpdir != '\0';
    const std::string parent = from_environment ? tmpdir : "/tmp";
    std::string pattern = (fs::path(parent) / "psformer-plot-XXXXXX").string();
    if (mkdtemp(pattern.data()) != nullptr) {
      path_ = pattern;
      RegisterTemporary(path_);
    } else {
      const int error = errno;
      error_ = "cannot make a temporary directory in " + parent + (from_environment ? " ($TMPDIR)" : "") + ": " +
               std::strerror(error) + "; set TMPDIR to a writable directory";
    }
  }
  ~ScratchDir() {
    if (!path_.empty()) RemoveTemporary(path_);
  }
  const fs::path& path() const { return path_; }
  const std::string& error() const { return error_; }

 private:
  fs::path path_;
  std::string error_;
};

// `text` as a gnuplot single-quoted string, where '' stands for one quote.
std::string Quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += (c == '\'' ? std::string("''") : std::string(1, c));
  return out + "'";
}

// The gnuplot script that draws plot.png from the data files train.dat (step loss lr tokens/s compute push wait pull,
// times per step) and valid.dat (step loss nll accuracy bleu).
// `steps`: the first and last step drawn; one step alone gets a range around it (gnuplot
// refuses an empty one).
std::string Script(const std::string& title, int width, int height, bool have_valid, bool have_bleu,
                   std::pair<double, double> steps) {
  std::ostringstream s;
  s << "set terminal pngcairo size " << width << "," << height << " font 'sans,10'\n";
  if (steps.first == steps.second) s << "set xrange [" << steps.first - 1 << ":" << steps.second + 1 << "]\n";
  s << "set output 'plot.png'\n"
    << "set datafile missing 'nan'\n"
    << "set multiplot layout 2,2 title " << Quoted(title) << " noenhanced\n"  // "my_run" is no subscript
    << "set grid\nset xlabel 'step'\nset key top right\n"
    << "set title 'loss per target token'\n"
    << "plot 'train.dat' using 1:2 with lines lw 2 title 'train (label-smoothed)'";
  if (have_valid) {
    s << ", 'valid.dat' using 1:2 with linespoints lw 2 title 'valid (label-smoothed)'"
      << ", 'valid.dat' using 1:3 with linespoints lw 2 title 'valid NLL'";
  }
  s << "\n";
  if (have_valid) {
    s << "set title 'validation " << (have_bleu ? "BLEU" : "accuracy") << "'\n"
      << "plot 'valid.dat' using 1:" << (have_bleu ? 5 : 4) << " with linespoints lw 2 notitle\n";
  } else {
    s << "set title 'validation (none yet)'\nunset key\nplot [0:1][0:1] 2 notitle\nset key top right\n";
  }
  s << "set title 'learning rate and throughput'\nset ylabel 'learning rate'\nset y2label 'tokens/s'\n"
    << "set ytics nomirror\nset y2tics\nset format y '%.1e'\n"
    << "plot 'train.dat' using 1:3 with lines lw 2 axes x1y1 title 'lr', "
    << "'train.dat' using 1:4 with lines lw 2 axes x1y2 title 'tokens/s'\n"
    << "unset y2tics\nunset y2label\nset ytics mirror\nset format y '%g'\nset ylabel 'seconds'\n"
    << "set title 'time per step'\nset key top left\nset style fill solid 0.6 noborder\n"
    << "plot 'train.dat' using 1:($5+$6+$7+$8) with filledcurves x1 title 'pull', "
    << "'' using 1:($5+$6+$7) with filledcurves x1 title 'wait', "
    << "'' using 1:($5+$6) with filledcurves x1 title 'push', "
    << "'' using 1:5 with filledcurves x1 title 'compute'\n"
    << "unset multiplot\n";
  return s.str();
}

// Checks what gnuplot drew (`drawn`: a PNG it may have left empty or cut short when its file
// system filled up), then writes it to `out` with the one result writer (common/write_file.h).
Status DeliverPlot(const fs::path& drawn, const fs::path& out) {
  std::ifstream in(drawn, std::ios::binary);
  const std::string png((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  static const char kPngMagic[] = "\x89PNG\r\n\x1a\n";
  if (png.empty()) return Status::IoError("gnuplot wrote an empty " + drawn.string() + " (is its file system full?)");
  if (png.size() < 8 || png.compare(0, 8, kPngMagic, 8) != 0) {
    return Status::IoError("gnuplot's " + drawn.string() + " is not a PNG (it does not begin with the PNG signature)");
  }
  // A PNG ends with its IEND chunk; one cut short by a full disk does not.
  if (png.size() < 20 || png.compare(png.size() - 8, 4, "IEND") != 0) {
    return Status::IoError("gnuplot's " + drawn.string() + " is cut short (no IEND chunk; is its file system full?)");
  }
  return WriteFileAtomically(out.string(), png);
}

// Runs gnuplot on `script` in `dir`; its messages are in the returned error.
Status RunGnuplot(const fs::path& dir, const fs::path& script) {
  const std::string messages = (dir / "gnuplot.err").string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, messages.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  // gnuplot runs in `dir` (the script names its files relative to it), started without a shell,
  // which would read a quote in $TMPDIR's path as the end of a word.
  posix_spawn_file_actions_addchdir_np(&actions, dir.c_str());
  const std::string script_path = script.string();
  const char* argv[] = {"gnuplot", script_path.c_str(), nullptr};
  pid_t pid = -1;
  // Ended by a stop of this command (common/interrupt_cleanup.h): a SIGTERM to psformer plot
  // alone left gnuplot drawing on, unwatched, into a directory the stop had removed.
  const int spawned = SpawnChild(
      [&](pid_t* child) {
        return posix_spawnp(child, "gnuplot", &actions, nullptr, const_cast<char**>(argv), environ);
      },
      &pid);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned == ENOENT) {
    return Status::NotFound("gnuplot is not installed (apt-get install gnuplot-nox; scripts/setup installs it)");
  }
  if (spawned != 0) return Status::IoError(std::string("cannot start gnuplot: ") + std::strerror(spawned));
  int wait_status = 0;
  WaitForChild(pid, &wait_status);
  std::ifstream in(messages);
  const std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
    // Its last line says what failed ("plot.gp" line 20: ...); the lines before echo the script.
    std::string last;
    std::istringstream lines(said);
    for (std::string line; std::getline(lines, line);) {
      if (line.find_first_not_of(" \t^") != std::string::npos) last = line;
    }
    if (last.empty()) {
      last = WIFEXITED(wait_status) ? "exit status " + std::to_string(WEXITSTATUS(wait_status))
                                    : "killed by signal " + std::to_string(WTERMSIG(wait_status));
    }
    return Status::Internal("gnuplot failed: " + last);
  }
  return Status::Ok();
}

}  // namespace

int RunPlotCommand(const Args& args) {
  po::options_description options("plot options");
  // clang-format off
  options.add_options()
      ("run-dir", po::value<std::string>()->required(), "the run directory (also the first positional argument)")
      ("out", po::value<std::string>(), "the PNG to write (default RUN_DIR/plot.png)")
      ("size", po::value<std::string>()->default_value("1200x800"), "width x height in pixels");
  // clang-format on
  po::positional_options_description positional;
  positional.add("run-dir", 1);
  ParsedOptions parsed = ParseOptions("plot", "RUN_DIR [--out FILE.png] [--size WxH]", args, options, &positional);
  if (parsed.exit_status) return *parsed.exit_status;
  RemoveTemporariesOnInterrupt("plot");  // a stop leaves no unfinished file
  // A console that goes away (`2>&1 | head -1`) ends no plot halfway, its scratch files left.
  KeepRunningWhenTheConsoleCloses();
  const fs::path run_dir = parsed.values["run-dir"].as<std::string>();
  const fs::path out = fs::absolute(parsed.values.count("out") ? fs::path(parsed.values["out"].as<std::string>())
                                                               : run_dir / "plot.png");
  const std::string size = parsed.values["size"].as<std::string>();
  std::smatch m;
  if (!std::regex_match(size, m, std::regex("([0-9]+)x([0-9]+)"))) {
    return ReportError("plot", "--size " + size + ": expected WIDTHxHEIGHT in pixels, e.g. 1200x800", kExitUsage);
  }
  // Cairo refuses a side above 32767 ("Cairo is unhappy"), and far less is already a poster; a
  // side below kMinPlotSide leaves no room for the axes' labels.
  auto side = [](const std::string& digits) { return digits.size() > 6 ? kMaxPlotSide + 1 : std::stoi(digits); };
  const int width = side(m[1].str()), height = side(m[2].str());
  if (width < kMinPlotSide || height < kMinPlotSide || width > kMaxPlotSide || height > kMaxPlotSide) {
    return ReportError("plot",
                       "--size " + size + ": each side must be from " + std::to_string(kMinPlotSide) + " to " +
                           std::to_string(kMaxPlotSide) + " pixels",
                       kExitUsage);
  }

  // An earlier plot is replaced (the same command, run again), a user's file of another kind not.
  if (const Status usable =
          CheckReplaceable("--out", out.string(), std::string_view("\x89PNG\r\n\x1a\n", 8), "PNG image");
      !usable.ok()) {
    return ReportError("plot", usable);
  }
  const fs::path metrics_path = run_dir / "metrics.jsonl";
  if (!fs::exists(metrics_path)) {
    return ReportError("plot", run_dir.string() + " has no metrics.jsonl: not a run directory, or no step logged yet");
  }
  std::vector<std::string> unreadable;
  auto metrics = ReadMetricsFile(metrics_path.string(), &unreadable);
  if (!metrics.ok()) return ReportError("plot", metrics.status());
  for (const std::string& line : unreadable) std::cerr << "psformer plot: warning: " << line << "\n";
  ScratchDir scratch;
  if (scratch.path().empty()) return ReportError("plot", scratch.error());
  std::ofstream train(scratch.path() / "train.dat"), valid(scratch.path() / "valid.dat");
  int train_lines = 0, valid_lines = 0;
  bool have_bleu = false;
  double previous_step = 0;
  std::pair<double, double> steps{INFINITY, -INFINITY};
  int stepless = 0;
  for (const MetricsRecord& r : *metrics) {
    const double step = Field(r, "step");
    if (!std::isfinite(step) || step < 0) {
      ++stepless;  // nothing to place it at
      continue;
    }
    if (r.count("loss")) {
      steps = {std::min(steps.first, step), std::max(steps.second, step)};
      // The time fields sum over the steps since the line before.
      const double steps = std::max(1.0, step - previous_step);
      previous_step = step;
      train << step << " " << Field(r, "loss") << " " << Field(r, "lr", 0) << " " << Field(r, "tokens_per_s", 0);
      for (const char* key : {"compute_s", "push_s", "wait_s", "pull_s"}) train << " " << Field(r, key, 0) / steps;
      train << "\n";
      ++train_lines;
    }
    if (r.count("valid_loss")) {
      valid << step << " " << Field(r, "valid_loss") << " " << Field(r, "valid_nll_loss") << " "
            << Field(r, "valid_accuracy") << " " << Field(r, "valid_bleu") << "\n";
      have_bleu = have_bleu || r.count("valid_bleu");
      ++valid_lines;
    }
  }
  train.close();
  valid.close();
  if (!train || !valid) return ReportError("plot", "cannot write the data files in " + scratch.path().string());
  if (stepless > 0) {
    std::cerr << "psformer plot: warning: " << metrics_path.string() << ": " << stepless
              << " line(s) without a step of 0 or more skipped\n";
  }
  if (train_lines == 0)
    return ReportError("plot", metrics_path.string() + " has no training step yet: nothing to plot");
  const std::string title = "psformer run " + run_dir.filename().string();
  const fs::path script = scratch.path() / "plot.gp";
  std::ofstream(script) << Script(title, width, height, valid_lines > 0, have_bleu, steps);
  const Status plotted = RunGnuplot(scratch.path(), script);
  if (!plotted.ok()) return ReportError("plot", plotted);
  RemoveDeadWritersTemporaryFiles(out.string());  // of a plot killed midway
  if (Status written = DeliverPlot(scratch.path() / "plot.png", out); !written.ok())
    return ReportError("plot", written);
  std::cout << "wrote " << out.string() << " (" << width << "x" << height << ", " << train_lines << " training and "
            << valid_lines << " validation points)\n";
  return 0;
}

}  // namespace psformer
