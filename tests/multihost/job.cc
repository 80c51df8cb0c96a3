#include "tests/multihost/job.h"

#include <algorithm>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/testing/multiprocess.h"

namespace tessera::testing {

Env JobEnv(Env env) {
  env.push_back({"TESSERA_JOB_SECRET", "the job's secret across hosts"});
  env.push_back({"TESSERA_LOG_LEVEL", "INFO"});
  return env;
}

std::unique_ptr<Job> Job::Launched(NetworkHosts& hosts, int nproc, std::vector<std::string> command,
                                   Env env, std::string master, std::vector<std::string> extra_args,
                                   std::function<Env(int host)> host_env) {
  if (master.empty()) master = hosts.address(0);
  env = JobEnv(std::move(env));
  const std::string port = std::to_string(FreeLoopbackPort());
  auto job = std::unique_ptr<Job>(new Job);
  for (int host = 0; host < hosts.size(); ++host) {
    std::vector<std::string> args = {"--nnodes",         std::to_string(hosts.size()),
                                     "--node_rank",      std::to_string(host),
                                     "--nproc_per_node", std::to_string(nproc),
                                     "--master_addr",    master,
                                     "--master_port",    port};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    args.insert(args.end(), command.begin(), command.end());
    Env own = env;
    if (host_env) {
      for (auto& entry : host_env(host)) own.push_back(entry);
    }
    job->processes_.push_back(std::make_unique<Launcher>(args, hosts.On(host, own)));
  }
  return job;
}

std::unique_ptr<Job> Job::Direct(NetworkHosts& hosts, std::vector<std::string> command,
                                 const std::function<Env(int, const std::string&)>& env_of) {
  const std::string port = std::to_string(FreeLoopbackPort());
  auto job = std::unique_ptr<Job>(new Job);
  for (int host = 0; host < hosts.size(); ++host) {
    std::vector<std::string> argv = hosts.On(host, JobEnv(env_of(host, port)));
    for (const auto& arg : command) argv.push_back(arg == "{port}" ? port : arg);
    job->processes_.push_back(std::make_unique<ObservedProcess>(argv));
  }
  return job;
}

std::vector<int> Job::Finish(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<int> codes;
  for (auto& process : processes_) {
    codes.push_back(process->Finish(std::max(deadline - absl::Now(), absl::Seconds(1))));
  }
  return codes;
}

std::string Job::output() const {
  std::string all;
  for (size_t host = 0; host < processes_.size(); ++host) {
    absl::StrAppend(&all, "---- host ", host, " ----\n", processes_[host]->output());
  }
  return all;
}

std::set<std::string> Fingerprints(Job& job, int hosts, int steps) {
  std::vector<int> all;
  for (int host = 0; host < hosts; ++host) all.push_back(host);
  return Fingerprints(job, all, steps);
}

std::set<std::string> Fingerprints(Job& job, const std::vector<int>& hosts, int steps) {
  std::set<std::string> found;
  const std::regex line(absl::StrCat("parameters ([0-9a-f]+) after ", steps, " steps"));
  for (int host : hosts) {
    std::smatch match;
    const std::string& out = job.on(host).output();
    found.insert(std::regex_search(out, match, line) ? match[1].str() : "none");
  }
  return found;
}

}  // namespace tessera::testing
