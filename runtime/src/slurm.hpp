// srun's variables, read as torchrun's are (docs/launching.md): SLURM_PROCID is the rank,
// SLURM_NTASKS the world size, the first host of SLURM_STEP_NODELIST (SLURM_JOB_NODELIST
// outside a step) the coordinator's host, and its port --port, or one derived from
// SLURM_JOB_ID. Tasks that listen (servers) take the port after it plus SLURM_LOCALID on
// their own node (SLURMD_NODENAME), so the tasks sharing a host never collide.
// Internal to runtime/src (options.cpp).
#pragma once

#include <map>
#include <string>

#include <caf/error.hpp>

#include "troupe/options.hpp"

namespace troupe {

// Adds the raw values srun's variables give (the same names torchrun's use, plus
// "slurm-node" and "slurm-local-id"), unless SLURM_PROCID is unset or torchrun's RANK is set.
// `port` is --port's value (empty: derived). errc::bad_configuration for variables that do not
// parse.
caf::error collect_slurm(const env_lookup& env, const std::string& port,
                         std::map<std::string, std::string>& values);

}  // namespace troupe
