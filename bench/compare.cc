#include "compare.h"

#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "harness/args.h"
#include "harness/plot.h"
#include "harness/report.h"
#include "harness/sysinfo.h"
#include "subprocess.h"
#include "workloads/workload.h"

namespace lazybench {

namespace fs = std::filesystem;

std::string describe_allocators(const std::vector<AllocatorSpec>& allocators) {
  std::string out;
  for (const auto& a : allocators) {
    if (!out.empty()) out += ", ";
    out += a.name + " (" + (a.preload.empty() ? "no preload" : a.preload);
    for (const auto& [k, v] : a.env) out += ", " + k + "=" + v;
    out += ")";
  }
  return out;
}

EnvChanges child_env(const std::string& preload, const std::vector<std::pair<std::string, std::string>>& vars) {
  EnvChanges env;
  env["LD_PRELOAD"] = preload.empty() ? std::nullopt : std::optional<std::string>(preload);
  for (const auto& [k, v] : vars) env[k] = v;
  return env;
}

namespace {

// Runs argv with `env`; stdout is captured, stderr goes to log_path, stdin
// is /dev/null.  Kills the child after timeout_s.
SpawnResult spawn_child(const std::vector<std::string>& argv, EnvChanges env, const std::string& log_path,
                        double timeout_s) {
  SpawnOptions o;
  o.env = std::move(env);
  o.stderr_to = SpawnOptions::Stderr::kFile;
  o.stderr_path = log_path;
  o.timeout_s = timeout_s;
  return spawn(argv, o);
}

std::string expected_detection(const AllocatorSpec& spec) {
  if (!spec.builtin) return {};
  if (spec.name.rfind("jemalloc-", 0) == 0) return "jemalloc";
  if (spec.name.rfind("lazymalloc-", 0) == 0) return "lazymalloc";
  return spec.name;
}

std::string join(const std::vector<std::string>& v, const char* sep = " ") {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

bool write_file(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  return static_cast<bool>(f);
}

// Runs gnuplot on a script; returns "" or an error.
std::string run_gnuplot(const std::string& gnuplot, const fs::path& script, const fs::path& log) {
  const auto out = spawn_child({gnuplot, script.string()}, child_env("", {}), log.string(), 60);
  return out.ok() ? std::string() : "gnuplot " + out.status_text() + " (see " + log.string() + ")";
}

// Removes what an earlier compare wrote into `dir` (and only that), so a
// report never shows a stale plot or log next to new results.
void remove_previous_outputs(const fs::path& dir) {
  std::error_code ec;
  for (const char* name : {"results.md", "results.csv", "throughput.svg", "throughput.dat", "throughput.gp",
                           "phases-memory.svg", "phases-memory.gp"})
    fs::remove(dir / name, ec);
  for (const auto& [sub, ext] : {std::pair<const char*, const char*>{"logs", ".log"}, {"series", ".tsv"}}) {
    if (!fs::is_directory(dir / sub, ec)) continue;
    for (const auto& entry : fs::directory_iterator(dir / sub, ec))
      if (entry.is_regular_file(ec) && entry.path().extension() == ext) fs::remove(entry.path(), ec);
  }
}

}  // namespace

std::string find_lazymalloc_library(const std::string& cli, std::string* tried) {
  std::vector<std::string> candidates;
  if (!cli.empty()) {
    candidates.push_back(cli);
  } else {
    if (const char* env = std::getenv("LAZYMALLOC_LIB"); env && *env) {
      candidates.emplace_back(env);
    } else {
#ifdef LAZYMALLOC_DEFAULT_LIB
      candidates.emplace_back(LAZYMALLOC_DEFAULT_LIB);
#endif
#ifdef LAZYMALLOC_INSTALLED_LIB
      candidates.emplace_back(LAZYMALLOC_INSTALLED_LIB);
#endif
      const std::string exe = self_exe();
      if (!exe.empty()) candidates.push_back((fs::path(exe).parent_path() / "liblazymalloc.so").string());
    }
  }
  if (tried) *tried = join(candidates, ", ");
  for (const auto& c : candidates) {
    if (::access(c.c_str(), R_OK) == 0) {
      std::error_code ec;
      const auto abs = fs::absolute(c, ec);
      return ec ? c : abs.string();
    }
  }
  return {};
}


std::optional<std::vector<AllocatorSpec>> resolve_allocators(const std::vector<std::string>& names,
                                                             const std::string& lib, const char* who,
                                                             std::vector<std::string>* skipped) {
  std::string tried;
  const std::string lazymalloc_lib = find_lazymalloc_library(lib, &tried);
  std::vector<AllocatorSpec> allocators;
  const auto dirs = peer_library_dirs();
  for (const auto& name : names) {
    auto spec = parse_allocator(name, lazymalloc_lib);
    if (!spec) {
      std::cerr << who << ": unknown allocator '" << name << "' (known: " << join(known_allocator_names(), ", ")
                << "; or NAME=/path/to/lib.so)\n";
      return std::nullopt;
    }
    if (spec->name != "glibc") {
      const std::string wanted = spec->preload;
      spec->preload = resolve_preload(spec->preload, dirs);
      if (spec->preload.empty()) {
        const std::string why = spec->name == "lazymalloc"
                                    ? "liblazymalloc.so not found (tried: " + (tried.empty() ? "nothing" : tried) + ")"
                                    : wanted + " not found";
        std::cerr << spec->name << ": not installed, skipped (" << why << ")\n";
        skipped->push_back(spec->name + ": " + why);
        continue;
      }
    }
    allocators.push_back(std::move(*spec));
  }
  return allocators;
}

std::string find_in_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (!path) return {};
  std::string p(path);
  std::size_t start = 0;
  while (start <= p.size()) {
    std::size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    const std::string dir = p.substr(start, end - start);
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return {};
}

bool apply_alloc_env(std::vector<AllocatorSpec>& allocators, const std::vector<std::string>& names,
                     const std::vector<std::string>& items, const char* who) {
  for (const auto& item : items) {
    const auto colon = item.find(':');
    const auto assignment = colon == std::string::npos ? std::nullopt : parse_assignment(item.substr(colon + 1));
    if (!assignment) {
      std::cerr << who << ": --alloc-env wants ALLOCATOR:VAR=VALUE, got '" << item << "'\n";
      return false;
    }
    const std::string target = item.substr(0, colon);
    bool found = false;
    for (auto& a : allocators)
      if (a.name == target) {
        a.env.push_back(*assignment);
        found = true;
      }
    if (!found && std::find(names.begin(), names.end(), target) == names.end()) {
      std::cerr << who << ": --alloc-env for allocator '" << target << "' that is not compared\n";
      return false;
    }
  }
  return true;
}

std::optional<std::vector<AllocatorSpec>> allocators_to_run(const std::string& list, const std::string& lib,
                                                            const std::vector<std::string>& alloc_env,
                                                            const char* who, std::vector<std::string>* skipped) {
  const auto names = list.empty() ? default_allocator_names() : split_list(list);
  auto resolved = resolve_allocators(names, lib, who, skipped);
  if (!resolved || !apply_alloc_env(*resolved, names, alloc_env, who)) return std::nullopt;
  if (resolved->empty()) {
    std::cerr << who << ": nothing to run\n";
    return std::nullopt;
  }
  return resolved;
}

int compare_command(const CompareOptions& opt) {
  if (opt.reps < 1) {
    std::cerr << "lazybench compare: --reps must be >= 1\n";
    return 2;
  }
  // Workloads.
  std::vector<const WorkloadInfo*> workloads;
  if (opt.workloads.empty()) {
    for (const auto& w : workload_registry())
      if (w.headline) workloads.push_back(&w);
  } else {
    for (const auto& name : opt.workloads) {
      if (name == "all") {
        for (const auto& w : workload_registry())
          if (w.in_all && std::find(workloads.begin(), workloads.end(), &w) == workloads.end())
            workloads.push_back(&w);
        continue;
      }
      if (name.find_first_of("*?[") != std::string::npos) {
        // A pattern ('idle-release-*'): every workload whose name matches, listed or not in `all`.
        std::size_t matched = 0;
        for (const auto& w : workload_registry()) {
          if (::fnmatch(name.c_str(), w.name.c_str(), 0) != 0) continue;
          ++matched;
          if (std::find(workloads.begin(), workloads.end(), &w) == workloads.end()) workloads.push_back(&w);
        }
        if (matched == 0) {
          std::cerr << "lazybench compare: no workload matches '" << name << "' (see lazybench --list)\n";
          return 2;
        }
        continue;
      }
      const WorkloadInfo* w = find_workload(name);
      if (!w) {
        std::cerr << "lazybench compare: unknown workload '" << name << "' (see lazybench --list)\n";
        return 2;
      }
      if (std::find(workloads.begin(), workloads.end(), w) == workloads.end()) workloads.push_back(w);
    }
  }
  // Extra arguments per workload.
  std::map<std::string, std::vector<std::string>> extra;
  for (const auto& item : opt.extra_args) {
    const auto eq = item.find('=');
    const auto words = eq == std::string::npos ? std::nullopt : split_words(item.substr(eq + 1));
    if (!words) {
      std::cerr << "lazybench compare: --args wants WORKLOAD=ARGS or all=ARGS, got '" << item << "'\n";
      return 2;
    }
    const std::string key = item.substr(0, eq);
    if (key != "all" && !find_workload(key)) {
      std::cerr << "lazybench compare: --args for unknown workload '" << key << "'\n";
      return 2;
    }
    auto& v = extra[key];
    v.insert(v.end(), words->begin(), words->end());
  }

  // Allocators.
  std::vector<std::string> skipped;
  auto resolved = allocators_to_run(opt.allocators, opt.lib, opt.alloc_env, "lazybench compare", &skipped);
  if (!resolved) return 2;
  std::vector<AllocatorSpec> allocators = std::move(*resolved);
  if (workloads.empty()) {
    std::cerr << "lazybench compare: nothing to run\n";
    return 2;
  }
  std::vector<std::string> allocator_names;
  for (const auto& a : allocators) allocator_names.push_back(a.name);

  const fs::path out_dir = opt.out_dir;
  std::error_code ec;
  remove_previous_outputs(out_dir);
  fs::create_directories(out_dir / "logs", ec);
  fs::create_directories(out_dir / "series", ec);
  if (ec) {
    std::cerr << "lazybench compare: cannot create " << out_dir << ": " << ec.message() << '\n';
    return 2;
  }
  const std::string exe = self_exe();
  const std::string load_before = load_average();
  const auto compare_start = Clock::now();
  const std::size_t total = workloads.size() * allocators.size() * static_cast<std::size_t>(opt.reps);
  std::size_t index = 0;
  std::vector<RunRecord> records;
  std::map<std::string, std::string> args_used;  // workload -> argument text, for the report
  std::vector<std::pair<std::string, std::string>> phases_series;

  for (const WorkloadInfo* w : workloads) {
    std::vector<std::string> wargs = opt.quick ? w->quick_args : w->compare_args;
    for (const char* key : {"all", w->name.c_str()}) {
      if (const auto it = extra.find(key); it != extra.end()) wargs.insert(wargs.end(), it->second.begin(), it->second.end());
    }
    args_used[w->name] = join(wargs);
    for (int rep = 1; rep <= opt.reps; ++rep) {
      for (std::size_t k = 0; k < allocators.size(); ++k) {
        // Rotate the order each repetition so no allocator always runs first.
        const AllocatorSpec& a = allocators[(k + static_cast<std::size_t>(rep - 1)) % allocators.size()];
        ++index;
        const std::string stem = w->name + "." + a.name + ".rep" + std::to_string(rep);
        std::vector<std::string> argv = {exe, "run", w->name};
        argv.insert(argv.end(), wargs.begin(), wargs.end());
        std::string series_path;
        if (!w->series_option.empty()) {
          series_path = fs::absolute(out_dir / "series" / (stem + ".tsv")).string();
          argv.push_back(w->series_option);
          argv.push_back(series_path);
        }
        std::fprintf(stderr, "[%zu/%zu] %s under %s rep %d ... ", index, total, w->name.c_str(), a.name.c_str(), rep);
        std::fflush(stderr);
        const fs::path log = out_dir / "logs" / (stem + ".log");
        const auto child = spawn_child(argv, child_env(a.preload, a.env), log.string(), opt.timeout_s);
        RunRecord rec;
        rec.workload = w->name;
        rec.allocator = a.name;
        rec.rep = rep;
        rec.elapsed_s = child.elapsed_s;
        rec.args = join(std::vector<std::string>(argv.begin() + 3, argv.end()));
        rec.status = child.status_text();
        if (child.ok()) {
          std::string err;
          rec.result = find_result(child.out, &err);
          if (rec.result) {
            rec.ok = true;
            const std::string expect = expected_detection(a);
            rec.allocator_mismatch = !expect.empty() && rec.result->allocator != expect;
          } else {
            rec.status = "no result: " + err;
          }
        }
        if (rec.ok) {
          const auto& m = rec.result->metric;
          const std::string warning =
              rec.allocator_mismatch ? " WARNING: the child reports allocator " + rec.result->allocator : "";
          std::fprintf(stderr, "%s %s (%.1f s)%s\n", format_si(m.value).c_str(), m.unit.c_str(), child.elapsed_s,
                       warning.c_str());
          if (!series_path.empty() && rep == 1) phases_series.emplace_back(a.name, series_path);
        } else {
          std::fprintf(stderr, "FAILED: %s (log: %s)\n", rec.status.c_str(), log.c_str());
        }
        records.push_back(std::move(rec));
      }
    }
  }

  // Report.
  std::vector<WorkloadSummary> summaries;
  for (const WorkloadInfo* w : workloads) summaries.push_back(summarize_workload(w->name, allocator_names, records));
  std::size_t failures = 0;
  for (const auto& r : records)
    if (!r.ok) ++failures;

  std::string plots_note;
  std::vector<std::string> plot_files;
  if (opt.plots) {
    const std::string gnuplot = find_in_path("gnuplot");
    if (gnuplot.empty()) {
      plots_note = "gnuplot not found: no plots (install gnuplot-nox).";
    } else {
      const fs::path dir = fs::absolute(out_dir);
      write_file(dir / "throughput.dat", throughput_data(summaries, allocator_names));
      write_file(dir / "throughput.gp",
                 throughput_script((dir / "throughput.dat").string(), (dir / "throughput.svg").string(),
                                   allocator_names.size(), throughput_floor(summaries)));
      std::string err = run_gnuplot(gnuplot, dir / "throughput.gp", dir / "logs" / "gnuplot-throughput.log");
      if (err.empty()) plot_files.push_back("throughput.svg");
      else plots_note += err + " ";
      if (!phases_series.empty()) {
        write_file(dir / "phases-memory.gp", phases_memory_script(phases_series, (dir / "phases-memory.svg").string()));
        err = run_gnuplot(gnuplot, dir / "phases-memory.gp", dir / "logs" / "gnuplot-phases.log");
        if (err.empty()) plot_files.push_back("phases-memory.svg");
        else plots_note += err;
      }
    }
  }

  std::string md = "# lazybench results\n\n";
  md += "- Date: " + local_timestamp() + "\n";
  md += "- Machine: " + machine_description() + "\n";
  md += "- Load average (1/5/15 min) before: " + load_before + ", after: " + load_average() +
        " (other work on the machine competes with the runs; see user+sys against wall time)\n";
  md += "- Duration: " + format_fixed(seconds_since(compare_start), 0) + " s\n";
  md += "- Command: `" + opt.command_line + "`\n";
  md += "- Repetitions: " + std::to_string(opt.reps) +
        " per allocator, interleaved (each repetition runs every allocator once, starting one allocator later)\n";
  md += "- Allocators: " + describe_allocators(allocators) + "\n";
  for (const auto& s : skipped) md += "- Skipped: " + s + "\n";
  md += "- Workload arguments" + std::string(opt.quick ? " (--quick sizing)" : "") + ":\n";
  for (const WorkloadInfo* w : workloads) {
    std::string fixed = join(w->fixed_args);
    md += "  - " + w->name + ": `" + (fixed.empty() ? "" : fixed + " ") + args_used[w->name] + "`\n";
  }
  if (failures) md += "- **" + std::to_string(failures) + " run(s) failed**; see the status column of results.csv and logs/\n";
  md += "\n## Overview\n\n" + render_overview(summaries, allocator_names);
  md += "\n## Per workload\n\nvs glibc / vs best other: the median's speedup (> 1.00x = better) against glibc and "
        "against the best other allocator. user/sys/minflt cover the measured part of the run; peak RSS is "
        "the whole process's. (!) = the child did not detect the preloaded allocator.\n\n";
  for (const auto& s : summaries) md += render_detail(s) + "\n";
  if (!plot_files.empty()) {
    md += "## Plots\n\n";
    for (const auto& f : plot_files) md += "![" + f + "](" + f + ")\n\n";
  }
  if (!plots_note.empty()) md += "Plots: " + plots_note + "\n\n";
  md += "Raw runs: results.csv. Child stderr (allocator statistics, errors): logs/.\n";

  const bool wrote = write_file(out_dir / "results.md", md) && write_file(out_dir / "results.csv", render_csv(records));
  std::cout << md << std::flush;
  std::cerr << "\nReport: " << (out_dir / "results.md").string() << ", raw runs: " << (out_dir / "results.csv").string()
            << '\n';
  if (!plot_files.empty()) {
    std::cerr << "Plots:";
    for (const auto& f : plot_files) std::cerr << ' ' << (out_dir / f).string();
    std::cerr << '\n';
  }
  if (!plots_note.empty()) std::cerr << "Plots: " << plots_note << '\n';
  if (!wrote) {
    std::cerr << "lazybench compare: could not write the report into " << out_dir << '\n';
    return 1;
  }
  return failures ? 1 : 0;
}

}  // namespace lazybench
