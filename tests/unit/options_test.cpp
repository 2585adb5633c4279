// Unit tests of parse_launch_options (troupe/options.hpp) with a fake environment: defaults,
// flags in both forms, TROUPE_* variables, torchrun's variables, precedence, app flags and every
// rejection; plus parse_host_port and is_loopback.
#define BOOST_TEST_MODULE options
#include <boost/test/unit_test.hpp>

#include <map>
#include <set>

#include "expect_error.hpp"
#include "runtime/src/flag_table.hpp"
#include "troupe/options.hpp"

using namespace std::chrono_literals;
using troupe::app_flag;
using troupe::describe;
using troupe::errc;
using troupe::flag_settings;
using troupe::flag_table;
using troupe::launch_options;
using troupe::node_role;
using troupe::parse_widths;
using troupe::testing::fails_with;
using troupe::testing::succeeded;

namespace {

using env_map = std::map<std::string, std::string>;

troupe::env_lookup fake_env(env_map vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

caf::expected<launch_options> parse(const std::vector<std::string>& args, env_map env = {},
                                    const std::vector<app_flag>& app = {}) {
  return troupe::parse_launch_options(args, fake_env(std::move(env)), app);
}

// The environment torchrun gives one process, with a loopback master and a secret.
env_map torchrun(const std::string& rank, const std::string& world = "") {
  env_map env{{"MASTER_ADDR", "127.0.0.1"},
              {"MASTER_PORT", "29500"},
              {"RANK", rank},
              {"TROUPE_SECRET", "s3cret"}};
  if (!world.empty()) env["WORLD_SIZE"] = world;
  return env;
}

const std::vector<app_flag> app_flags = {
    {"data", "DIR", "data folder", "/usr/share/data"},
    {"hidden", "N", "hidden units", "128"},
    {"no-eval", "", "skip evaluation", ""},
};

}  // namespace

// -- defaults and flags -------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(defaults_without_flags_or_environment) {
  auto o = parse({});
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST((o->role == node_role::embedded));
  BOOST_TEST(o->listen.host == "127.0.0.1");
  BOOST_TEST(o->listen.port == 7600);
  BOOST_TEST(o->coordinators.at(0).host == "127.0.0.1");
  BOOST_TEST(o->coordinators.at(0).port == 7600);
  BOOST_TEST(o->secret.empty());
  BOOST_TEST(!o->insecure);
  BOOST_TEST(o->name.empty());
  BOOST_TEST(o->workers == 2u);
  BOOST_TEST(o->servers == 2u);
  BOOST_TEST(o->buckets == 0u);
  BOOST_TEST(o->epochs == 3u);
  BOOST_TEST(o->batch == 64u);
  BOOST_TEST(o->lr == 1e-3f);
  BOOST_TEST(std::string{to_string(o->optimizer)} == "adam");
  BOOST_TEST(o->momentum == 0.9f);
  BOOST_TEST(o->weight_decay == 0.0f);
  BOOST_TEST(o->seed == 1u);
  BOOST_TEST(o->report.empty());
  BOOST_TEST(o->threads == 0u);
  BOOST_TEST((o->level == troupe::log_level::info));
  BOOST_TEST(o->join_timeout.count() == 30);
  BOOST_TEST(o->request_timeout.count() == 30);
  BOOST_TEST(!o->help);
  BOOST_TEST(o->app.empty());
}

BOOST_AUTO_TEST_CASE(flags_with_separate_values) {
  auto o = parse({"--workers",         "4",        "--servers",      "3",
                  "--buckets",         "12",       "--epochs",       "5",
                  "--batch",           "32",       "--lr",           "0.01",
                  "--optimizer",       "sgd",      "--momentum",     "0.5",
                  "--weight-decay",    "0.0001",   "--seed",         "42",
                  "--report",          "out.json", "--threads",      "8",
                  "--log-level",       "debug",    "--join-timeout", "7",
                  "--request-timeout", "9",        "--name",         "alpha"});
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(o->workers == 4u);
  BOOST_TEST(o->servers == 3u);
  BOOST_TEST(o->buckets == 12u);
  BOOST_TEST(o->epochs == 5u);
  BOOST_TEST(o->batch == 32u);
  BOOST_TEST(o->lr == 0.01f);
  BOOST_TEST(std::string{to_string(o->optimizer)} == "sgd");
  BOOST_TEST(o->momentum == 0.5f);
  BOOST_TEST(o->weight_decay == 0.0001f);
  BOOST_TEST(o->seed == 42u);
  BOOST_TEST(o->report == "out.json");
  BOOST_TEST(o->threads == 8u);
  BOOST_TEST((o->level == troupe::log_level::debug));
  BOOST_TEST(o->join_timeout.count() == 7);
  BOOST_TEST(o->request_timeout.count() == 9);
  BOOST_TEST(o->name == "alpha");
}

BOOST_AUTO_TEST_CASE(flags_with_equals_values) {
  auto o = parse({"--workers=6", "--lr=0.5", "--listen=127.0.0.2:9000", "--name=a=b"});
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(o->workers == 6u);
  BOOST_TEST(o->lr == 0.5f);
  BOOST_TEST(o->listen.host == "127.0.0.2");
  BOOST_TEST(o->listen.port == 9000);
  BOOST_TEST(o->name == "a=b");  // only the first '=' separates name and value
}

BOOST_AUTO_TEST_CASE(equals_form_accepts_empty_value) {
  auto o = parse({"--report="});
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(o->report.empty());
}

BOOST_AUTO_TEST_CASE(roles_and_addresses_from_flags) {
  auto o = parse({"--role", "worker", "--coordinator", "10.1.2.3:7700", "--secret", "s"});
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST((o->role == node_role::worker));
  BOOST_TEST(o->coordinators.at(0).host == "10.1.2.3");
  BOOST_TEST(o->coordinators.at(0).port == 7700);
  BOOST_TEST(o->secret == "s");
}

BOOST_AUTO_TEST_CASE(each_role_name_parses) {
  const std::pair<const char*, node_role> cases[] = {{"coordinator", node_role::coordinator},
                                                     {"server", node_role::server},
                                                     {"worker", node_role::worker},
                                                     {"", node_role::embedded}};
  for (const auto& [text, expected] : cases) {
    auto o = parse({"--role", text, "--secret", "s"});
    BOOST_TEST_REQUIRE(succeeded(o), text);
    BOOST_TEST((o->role == expected), text);
  }
}

BOOST_AUTO_TEST_CASE(switch_takes_no_value) {
  // --insecure is a switch: the next argument is a flag of its own, not its value.
  auto o = parse({"--insecure", "--workers", "3"});
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(o->insecure);
  BOOST_TEST(o->workers == 3u);
}

BOOST_AUTO_TEST_CASE(help_skips_validation) {
  // A worker without a secret is invalid, but --help must still be answered.
  auto o = parse({"--help", "--role", "worker"});
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(o->help);
}

BOOST_AUTO_TEST_CASE(later_flag_wins) {
  auto o = parse({"--workers", "3", "--workers", "5"});
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(o->workers == 5u);
}

// -- environment --------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(troupe_environment_sets_options) {
  auto o = parse({}, {{"TROUPE_WORKERS", "8"},
                      {"TROUPE_WEIGHT_DECAY", "0.25"},
                      {"TROUPE_ROLE", "server"},
                      {"TROUPE_SECRET", "from-env"},
                      {"TROUPE_COORDINATOR", "192.168.1.5:8000"},
                      {"TROUPE_LOG_LEVEL", "warn"},
                      {"TROUPE_REQUEST_TIMEOUT", "3"}});
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(o->workers == 8u);
  BOOST_TEST(o->weight_decay == 0.25f);
  BOOST_TEST((o->role == node_role::server));
  BOOST_TEST(o->secret == "from-env");
  BOOST_TEST(o->coordinators.at(0).host == "192.168.1.5");
  BOOST_TEST(o->coordinators.at(0).port == 8000);
  BOOST_TEST((o->level == troupe::log_level::warn));
  BOOST_TEST(o->request_timeout.count() == 3);
}

BOOST_AUTO_TEST_CASE(environment_switch_values) {
  BOOST_TEST(parse({}, {{"TROUPE_INSECURE", "1"}})->insecure);
  BOOST_TEST(parse({}, {{"TROUPE_INSECURE", "true"}})->insecure);
  BOOST_TEST(!parse({}, {{"TROUPE_INSECURE", "0"}})->insecure);
  BOOST_TEST(!parse({}, {{"TROUPE_INSECURE", "false"}})->insecure);
}

BOOST_AUTO_TEST_CASE(flag_overrides_environment) {
  auto o = parse({"--workers", "7", "--secret", "flag"},
                 {{"TROUPE_WORKERS", "8"}, {"TROUPE_SECRET", "env"}});
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(o->workers == 7u);
  BOOST_TEST(o->secret == "flag");
}

BOOST_AUTO_TEST_CASE(bad_environment_value_is_an_error) {
  BOOST_TEST(fails_with(parse({}, {{"TROUPE_EPOCHS", "many"}}), errc::bad_configuration));
}

BOOST_AUTO_TEST_CASE(unrelated_environment_is_ignored) {
  auto o = parse({}, {{"WORKERS", "9"}, {"TROUPE_UNKNOWN_THING", "x"}});
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(o->workers == 2u);
}

// -- torchrun -----------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(torchrun_master_is_where_rank_zero_listens) {
  auto o = parse({}, torchrun("0"));
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(o->listen.host == "127.0.0.1");
  BOOST_TEST(o->listen.port == 29500);
  BOOST_TEST(o->coordinators.at(0).host == "127.0.0.1");
  BOOST_TEST(o->coordinators.at(0).port == 29500);
}

BOOST_AUTO_TEST_CASE(torchrun_master_is_what_other_ranks_join) {
  auto o = parse({}, torchrun("3"));
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(o->coordinators.at(0).host == "127.0.0.1");
  BOOST_TEST(o->coordinators.at(0).port == 29500);
}

BOOST_AUTO_TEST_CASE(a_server_listens_on_any_free_loopback_port_by_default) {
  auto o = parse({}, torchrun("1"));
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST((o->role == node_role::server));
  BOOST_TEST(o->listen.host == "127.0.0.1");
  BOOST_TEST(o->listen.port == 0);
  auto explicit_port = parse({"--role", "server", "--secret", "s", "--listen", "127.0.0.3:9000"});
  BOOST_TEST_REQUIRE(succeeded(explicit_port));
  BOOST_TEST(explicit_port->listen.port == 9000);
}

BOOST_AUTO_TEST_CASE(non_loopback_listen_for_a_server_needs_insecure) {
  BOOST_TEST(fails_with(parse({"--role", "server", "--secret", "s", "--listen", "10.0.0.1:0"}),
                        errc::bad_configuration));
  BOOST_TEST(succeeded(
      parse({"--role", "server", "--secret", "s", "--listen", "10.0.0.1:0", "--insecure"})));
}

BOOST_AUTO_TEST_CASE(torchrun_master_port_defaults_to_7600) {
  auto o = parse({}, {{"MASTER_ADDR", "127.0.0.5"}});
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(o->coordinators.at(0).host == "127.0.0.5");
  BOOST_TEST(o->coordinators.at(0).port == 7600);
  BOOST_TEST((o->role == node_role::embedded));  // no RANK: no role
}

BOOST_AUTO_TEST_CASE(torchrun_rank_zero_is_coordinator) {
  auto o = parse({}, torchrun("0"));
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST((o->role == node_role::coordinator));
}

BOOST_AUTO_TEST_CASE(torchrun_ranks_one_to_servers_are_servers) {
  for (const char* rank : {"1", "2"}) {
    auto o = parse({}, torchrun(rank));
    BOOST_TEST_REQUIRE(succeeded(o));
    BOOST_TEST((o->role == node_role::server), "rank " << rank);
  }
}

BOOST_AUTO_TEST_CASE(torchrun_ranks_after_servers_are_workers) {
  for (const char* rank : {"3", "4", "100"}) {
    auto o = parse({}, torchrun(rank));
    BOOST_TEST_REQUIRE(succeeded(o));
    BOOST_TEST((o->role == node_role::worker), "rank " << rank);
  }
}

BOOST_AUTO_TEST_CASE(torchrun_rank_uses_the_servers_flag) {
  auto o = parse({"--servers", "3"}, torchrun("3"));
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST((o->role == node_role::server));
  auto w = parse({"--servers", "1"}, torchrun("2"));
  BOOST_TEST_REQUIRE(succeeded(w));
  BOOST_TEST((w->role == node_role::worker));
}

BOOST_AUTO_TEST_CASE(torchrun_world_size_sets_workers) {
  auto o = parse({}, torchrun("4", "6"));  // 1 coordinator + 2 servers + 3 workers
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(o->workers == 3u);
}

BOOST_AUTO_TEST_CASE(torchrun_smallest_world_has_one_worker) {
  auto o = parse({}, torchrun("3", "4"));
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(o->workers == 1u);
}

BOOST_AUTO_TEST_CASE(torchrun_world_without_room_for_a_worker_is_an_error) {
  BOOST_TEST(fails_with(parse({}, torchrun("1", "3")), errc::bad_configuration));
}

BOOST_AUTO_TEST_CASE(torchrun_workers_flag_beats_world_size) {
  auto o = parse({"--workers", "5"}, torchrun("4", "6"));
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(o->workers == 5u);
}

BOOST_AUTO_TEST_CASE(torchrun_role_flag_beats_rank) {
  auto o = parse({"--role", "worker"}, torchrun("0"));
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST((o->role == node_role::worker));
}

BOOST_AUTO_TEST_CASE(troupe_environment_beats_torchrun) {
  env_map env = torchrun("0", "6");
  env["TROUPE_ROLE"] = "server";
  env["TROUPE_WORKERS"] = "9";
  env["TROUPE_LISTEN"] = "127.0.0.9:1234";
  auto o = parse({}, env);
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST((o->role == node_role::server));
  BOOST_TEST(o->workers == 9u);
  BOOST_TEST(o->listen.host == "127.0.0.9");
  BOOST_TEST(o->listen.port == 1234);
  BOOST_TEST(o->coordinators.at(0).port == 29500);  // still from MASTER_PORT
}

BOOST_AUTO_TEST_CASE(torchrun_bad_rank_is_an_error) {
  BOOST_TEST(fails_with(parse({}, torchrun("-1")), errc::bad_configuration));
  BOOST_TEST(fails_with(parse({}, torchrun("one")), errc::bad_configuration));
}

BOOST_AUTO_TEST_CASE(torchrun_bad_world_size_is_an_error) {
  BOOST_TEST(fails_with(parse({}, torchrun("3", "six")), errc::bad_configuration));
}

BOOST_AUTO_TEST_CASE(torchrun_non_loopback_master_needs_insecure_for_coordinator) {
  env_map env = torchrun("0");
  env["MASTER_ADDR"] = "10.0.0.1";
  BOOST_TEST(fails_with(parse({}, env), errc::bad_configuration));
  auto o = parse({"--insecure"}, env);
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(o->listen.host == "10.0.0.1");
}

// -- srun's variables ---------------------------------------------------------------------------

namespace {

// The environment srun gives task `rank` of `tasks` on nodes `nodes` (job 4242).
env_map srun(const std::string& rank, const std::string& tasks, const std::string& local = "0",
             const std::string& nodes = "localhost") {
  return env_map{{"SLURM_PROCID", rank},           {"SLURM_NTASKS", tasks},
                 {"SLURM_LOCALID", local},         {"SLURM_STEP_NODELIST", nodes},
                 {"SLURMD_NODENAME", "localhost"}, {"SLURM_JOB_ID", "4242"},
                 {"TROUPE_SECRET", "s3cret"}};
}

std::vector<std::string> hosts(const std::string& list) {
  auto h = troupe::expand_hostlist(list);
  return h ? *h : std::vector<std::string>{"(error)"};
}

}  // namespace

BOOST_AUTO_TEST_CASE(hostlists_expand_as_slurm_writes_them) {
  using v = std::vector<std::string>;
  BOOST_TEST((hosts("n01") == v{"n01"}));
  BOOST_TEST((hosts("n[01-04]") == v{"n01", "n02", "n03", "n04"}));
  BOOST_TEST((hosts("n[8-11],gpu3") == v{"n8", "n9", "n10", "n11", "gpu3"}));
  BOOST_TEST((hosts("n[1,3-4]") == v{"n1", "n3", "n4"}));
  BOOST_TEST((hosts("r[1-2]-n[01-02]") == v{"r1-n01", "r1-n02", "r2-n01", "r2-n02"}));
  BOOST_TEST((hosts("a,b[007-008]") == v{"a", "b007", "b008"}));
  for (const char* bad : {"n[01-04", "n]", "n[4-1]", "n[a-b]", "", "n[1-2],,m"})
    BOOST_TEST(!troupe::expand_hostlist(bad), bad);
}

BOOST_AUTO_TEST_CASE(srun_task_zero_coordinates_on_the_first_host) {
  auto o = parse({"--servers", "1"}, srun("0", "5", "0", "localhost,n[2-3]"));
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST((o->role == node_role::coordinator));
  BOOST_TEST(o->listen.host == "localhost");
  BOOST_TEST(o->listen.port == troupe::slurm_port_of_job(4242));
  BOOST_TEST(o->workers == 3u);  // 5 tasks: the coordinator, one server, three workers
}

BOOST_AUTO_TEST_CASE(srun_servers_take_the_ports_after_the_coordinators_by_local_id) {
  auto a = parse({"--servers", "2", "--port", "30000"}, srun("1", "6", "1"));
  auto b = parse({"--servers", "2", "--port", "30000"}, srun("2", "6", "2"));
  BOOST_TEST_REQUIRE(succeeded(a));
  BOOST_TEST_REQUIRE(succeeded(b));
  BOOST_TEST((a->role == node_role::server));
  BOOST_TEST(a->listen.port == 30002);
  BOOST_TEST(b->listen.port == 30003);
  BOOST_TEST(a->coordinators.at(0).port == 30000);
  auto w = parse({"--servers", "2", "--port", "30000"}, srun("3", "6", "3"));
  BOOST_TEST_REQUIRE(succeeded(w));
  BOOST_TEST((w->role == node_role::worker));
  BOOST_TEST(w->coordinators.at(0).host == "localhost");
}

BOOST_AUTO_TEST_CASE(srun_in_mode_dp_maps_as_torchrun) {
  auto o = parse({"--mode", "dp"}, srun("0", "3"));
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST((o->role == node_role::coordinator));
  BOOST_TEST(o->dp.coordinator_trains);
  BOOST_TEST(o->workers == 3u);
}

BOOST_AUTO_TEST_CASE(torchrun_and_flags_beat_srun) {
  env_map env = srun("2", "5");
  env["RANK"] = "0";
  env["MASTER_ADDR"] = "127.0.0.1";
  auto o = parse({}, env);
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST((o->role == node_role::coordinator));  // RANK, not SLURM_PROCID
  auto f = parse({"--coordinator", "127.0.0.7:9"}, srun("4", "5"));
  BOOST_TEST_REQUIRE(succeeded(f));
  BOOST_TEST(f->coordinators.at(0).host == "127.0.0.7");
}

BOOST_AUTO_TEST_CASE(srun_variables_that_do_not_parse_are_errors) {
  env_map env = srun("0", "5");
  env.erase("SLURM_STEP_NODELIST");
  BOOST_TEST(fails_with(parse({}, env), errc::bad_configuration));
  env = srun("0", "5", "0", "n[1-");
  BOOST_TEST(fails_with(parse({}, env), errc::bad_configuration));
  env = srun("0", "5");
  env.erase("SLURM_JOB_ID");
  BOOST_TEST(fails_with(parse({}, env), errc::bad_configuration));
  BOOST_TEST(succeeded(parse({"--port", "30000"}, env)));
  BOOST_TEST(fails_with(parse({"--servers", "1"}, srun("1", "5", "70")), errc::bad_configuration));
}

// -- rejections ---------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(unknown_flag_is_an_error) {
  BOOST_TEST(fails_with(parse({"--wrokers", "3"}), errc::bad_configuration));
}

BOOST_AUTO_TEST_CASE(positional_argument_is_an_error) {
  BOOST_TEST(fails_with(parse({"train"}), errc::bad_configuration));
  BOOST_TEST(fails_with(parse({"-w", "3"}), errc::bad_configuration));
}

BOOST_AUTO_TEST_CASE(missing_value_is_an_error) {
  BOOST_TEST(fails_with(parse({"--workers"}), errc::bad_configuration));
  BOOST_TEST(fails_with(parse({"--epochs", "2", "--secret"}), errc::bad_configuration));
}

BOOST_AUTO_TEST_CASE(bad_integer_is_an_error) {
  for (const char* text : {"abc", "", "4x", "-1", "1.5", " 4", "99999999999"})
    BOOST_TEST(fails_with(parse({"--workers", text}), errc::bad_configuration), "'" << text << "'");
}

BOOST_AUTO_TEST_CASE(bad_float_is_an_error) {
  for (const char* text : {"abc", "", "0.1x", "nan", "inf"})
    BOOST_TEST(fails_with(parse({"--lr", text}), errc::bad_configuration), "'" << text << "'");
}

BOOST_AUTO_TEST_CASE(bad_role_is_an_error) {
  BOOST_TEST(fails_with(parse({"--role", "boss", "--secret", "s"}), errc::bad_configuration));
  BOOST_TEST(fails_with(parse({"--role", "Worker", "--secret", "s"}), errc::bad_configuration));
}

BOOST_AUTO_TEST_CASE(bad_address_is_an_error) {
  BOOST_TEST(fails_with(parse({"--listen", "localhost"}), errc::bad_configuration));
  BOOST_TEST(fails_with(parse({"--coordinator", "host:port"}), errc::bad_configuration));
}

BOOST_AUTO_TEST_CASE(bad_log_level_is_an_error) {
  BOOST_TEST(fails_with(parse({"--log-level", "verbose"}), errc::bad_configuration));
}

BOOST_AUTO_TEST_CASE(out_of_range_values_are_errors) {
  BOOST_TEST(fails_with(parse({"--workers", "0"}), errc::bad_configuration));
  BOOST_TEST(fails_with(parse({"--servers", "0"}), errc::bad_configuration));
  BOOST_TEST(fails_with(parse({"--epochs", "0"}), errc::bad_configuration));
  BOOST_TEST(fails_with(parse({"--batch", "0"}), errc::bad_configuration));
  BOOST_TEST(fails_with(parse({"--lr", "0"}), errc::bad_configuration));
  BOOST_TEST(fails_with(parse({"--lr", "-0.1"}), errc::bad_configuration));
  BOOST_TEST(fails_with(parse({"--momentum", "1"}), errc::bad_configuration));
  BOOST_TEST(fails_with(parse({"--momentum", "-0.1"}), errc::bad_configuration));
  BOOST_TEST(fails_with(parse({"--optimizer", "RMS prop"}), errc::bad_configuration));
}

// A name that is not built in names an app's rule; run_app checks that the app has it.
BOOST_AUTO_TEST_CASE(optimizer_names_an_app_rule) {
  auto o = parse({"--optimizer", "adagrad"});
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST((o->optimizer == troupe::optimizer_config::kind::app));
  BOOST_TEST(optimizer_from(*o).rule == "adagrad");
  std::map<std::string, std::string> settings;
  for (auto& [name, value] : flag_settings(*o)) settings[name] = value;
  BOOST_TEST(settings["optimizer"] == "adagrad");
  auto built_in = parse({"--optimizer", "sgd"});
  BOOST_TEST_REQUIRE(succeeded(built_in));
  BOOST_TEST(optimizer_from(*built_in).rule.empty());
}

BOOST_AUTO_TEST_CASE(non_loopback_listen_for_coordinator_needs_insecure) {
  BOOST_TEST(
      fails_with(parse({"--role", "coordinator", "--secret", "s", "--listen", "0.0.0.0:7600"}),
                 errc::bad_configuration));
  BOOST_TEST(
      fails_with(parse({"--role", "coordinator", "--secret", "s", "--listen", "10.0.0.1:7600"}),
                 errc::bad_configuration));
}

BOOST_AUTO_TEST_CASE(non_loopback_listen_accepted_with_insecure) {
  auto o =
      parse({"--role", "coordinator", "--secret", "s", "--listen", "0.0.0.0:7600", "--insecure"});
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(o->insecure);
  BOOST_TEST(o->listen.host == "0.0.0.0");
}

BOOST_AUTO_TEST_CASE(a_tls_dir_is_checked_before_anything_connects) {
  auto o = parse({"--role", "worker", "--secret", "s", "--tls-dir", "/nonexistent-troupe-tls"});
  BOOST_TEST_REQUIRE(fails_with(o, errc::bad_configuration));
  BOOST_TEST(describe(o.error()).find("/nonexistent-troupe-tls/ca.pem is missing") !=
             std::string::npos);
  BOOST_TEST(succeeded(parse({}, {{"TROUPE_TLS_DIR", ""}})));
  auto from_env = parse({"--secret", "s"}, {{"TROUPE_TLS_DIR", "/nonexistent-troupe-tls"}});
  BOOST_TEST(fails_with(from_env, errc::bad_configuration));
}

BOOST_AUTO_TEST_CASE(unauthenticated_collectives_beside_tls_need_insecure_collectives) {
  auto gloo = parse({"--mode", "dp", "--collective", "gloo", "--tls-dir", "/nonexistent"});
  BOOST_TEST_REQUIRE(fails_with(gloo, errc::bad_configuration));
  const auto why = describe(gloo.error());
  BOOST_TEST(why.find("--collective actors") != std::string::npos, why);
  BOOST_TEST(why.find("--insecure-collectives") != std::string::npos, why);
  // With the switch, only the (missing) files are left to complain about.
  auto allowed = parse({"--mode", "dp", "--collective", "gloo", "--tls-dir", "/nonexistent",
                        "--insecure-collectives"});
  BOOST_TEST_REQUIRE(fails_with(allowed, errc::bad_configuration));
  BOOST_TEST(describe(allowed.error()).find("is missing") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(plain_metrics_are_served_on_loopback_only) {
  auto o = parse({"--role", "server", "--secret", "s", "--listen", "10.0.0.1:0", "--insecure",
                  "--metrics-port", "0"});
  BOOST_TEST_REQUIRE(fails_with(o, errc::bad_configuration));
  BOOST_TEST(describe(o.error()).find("--tls-dir") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_operator_secret_differs_from_the_cluster_secret) {
  BOOST_TEST(fails_with(parse({"--secret", "same", "--operator-secret", "same"}),
                        errc::bad_configuration));
  auto o = parse({}, {{"TROUPE_OPERATOR_SECRET", "other"}});
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(o->operator_secret == "other");
}

BOOST_AUTO_TEST_CASE(loopback_listen_for_coordinator_needs_no_insecure) {
  for (const char* listen : {"127.0.0.1:7600", "localhost:7600", "::1:7600"}) {
    auto o = parse({"--role", "coordinator", "--secret", "s", "--listen", listen});
    BOOST_TEST(succeeded(o), listen);
  }
}

BOOST_AUTO_TEST_CASE(non_loopback_listen_ignored_for_other_roles) {
  auto o = parse({"--role", "worker", "--secret", "s", "--listen", "10.0.0.1:7600"});
  BOOST_TEST(succeeded(o));
}

BOOST_AUTO_TEST_CASE(distributed_role_needs_a_secret) {
  for (const char* role : {"coordinator", "server", "worker"})
    BOOST_TEST(fails_with(parse({"--role", role}), errc::bad_configuration), role);
  BOOST_TEST(fails_with(parse({"--role", "worker", "--secret", ""}), errc::bad_configuration));
}

BOOST_AUTO_TEST_CASE(secret_from_environment_is_enough) {
  auto o = parse({"--role", "worker"}, {{"TROUPE_SECRET", "s"}});
  BOOST_TEST(succeeded(o));
}

BOOST_AUTO_TEST_CASE(embedded_needs_no_secret) {
  BOOST_TEST(succeeded(parse({})));
}

BOOST_AUTO_TEST_CASE(negative_timeout_is_an_error) {
  BOOST_TEST(fails_with(parse({"--join-timeout", "-5"}), errc::bad_configuration));
  BOOST_TEST(fails_with(parse({"--request-timeout", "-1"}), errc::bad_configuration));
}

BOOST_AUTO_TEST_CASE(switch_with_false_value_stays_off) {
  auto o = parse({"--insecure=false"});
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(!o->insecure);
}

// -- app flags ----------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(app_flags_have_their_defaults) {
  auto o = parse({}, {}, app_flags);
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(o->app_value("data") == "/usr/share/data");
  BOOST_TEST(o->app_value("hidden") == "128");
  BOOST_TEST(o->app_value("no-eval") == "");
}

BOOST_AUTO_TEST_CASE(app_flags_from_flags) {
  auto o = parse({"--data", "/tmp/d", "--hidden=64", "--no-eval"}, {}, app_flags);
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(o->app_value("data") == "/tmp/d");
  BOOST_TEST(o->app_value("hidden") == "64");
  BOOST_TEST(o->app_value("no-eval") == "true");
}

BOOST_AUTO_TEST_CASE(app_flags_from_environment) {
  auto o =
      parse({"--hidden", "32"}, {{"TROUPE_DATA", "/env/d"}, {"TROUPE_HIDDEN", "16"}}, app_flags);
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(o->app_value("data") == "/env/d");
  BOOST_TEST(o->app_value("hidden") == "32");
}

BOOST_AUTO_TEST_CASE(app_value_of_undeclared_flag_is_empty) {
  auto o = parse({}, {}, app_flags);
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(o->app_value("nope") == "");
}

BOOST_AUTO_TEST_CASE(app_flag_unknown_without_declaration) {
  BOOST_TEST(fails_with(parse({"--data", "/tmp/d"}), errc::bad_configuration));
}

BOOST_AUTO_TEST_CASE(app_flag_missing_value_is_an_error) {
  BOOST_TEST(fails_with(parse({"--data"}, {}, app_flags), errc::bad_configuration));
}

// -- parse_host_port and is_loopback ------------------------------------------------------------

BOOST_AUTO_TEST_CASE(host_port_parses) {
  auto hp = troupe::parse_host_port("example.org:8080");
  BOOST_TEST_REQUIRE(succeeded(hp));
  BOOST_TEST(hp->host == "example.org");
  BOOST_TEST(hp->port == 8080);
  BOOST_TEST(troupe::to_string(*hp) == "example.org:8080");
}

BOOST_AUTO_TEST_CASE(host_port_splits_at_last_colon) {
  auto hp = troupe::parse_host_port("::1:7600");
  BOOST_TEST_REQUIRE(succeeded(hp));
  BOOST_TEST(hp->host == "::1");
  BOOST_TEST(hp->port == 7600);
}

BOOST_AUTO_TEST_CASE(host_port_port_limits) {
  auto zero = troupe::parse_host_port("h:0");
  BOOST_TEST_REQUIRE(succeeded(zero));
  BOOST_TEST(zero->port == 0);
  auto max = troupe::parse_host_port("h:65535");
  BOOST_TEST_REQUIRE(succeeded(max));
  BOOST_TEST(max->port == 65535);
  BOOST_TEST(fails_with(troupe::parse_host_port("h:65536"), errc::bad_configuration));
}

BOOST_AUTO_TEST_CASE(host_port_rejections) {
  for (const char* text : {"", "host", ":80", "host:", "host:-1", "host:80x", "host:http"})
    BOOST_TEST(fails_with(troupe::parse_host_port(text), errc::bad_configuration),
               "'" << text << "'");
}

BOOST_AUTO_TEST_CASE(loopback_hosts) {
  for (const char* host : {"localhost", "127.0.0.1", "127.1.2.3", "::1"})
    BOOST_TEST(troupe::is_loopback(host), host);
}

BOOST_AUTO_TEST_CASE(non_loopback_hosts) {
  for (const char* host : {"", "0.0.0.0", "10.0.0.1", "128.0.0.1", "1.127.0.0", "::", "example.org",
                           "127.example.org"})
    BOOST_TEST(!troupe::is_loopback(host), host);
}

BOOST_AUTO_TEST_CASE(fault_tolerance_flags) {
  auto o = parse({"--replication", "2", "--servers", "3", "--checkpoint-dir", "/tmp/c",
                  "--checkpoint-every", "500", "--checkpoint-keep", "4", "--resume", "/tmp/c",
                  "--max-restarts", "5", "--restart-period-ms", "2000"});
  BOOST_TEST_REQUIRE(static_cast<bool>(o));
  BOOST_TEST(o->replication == 2u);
  BOOST_TEST(o->checkpoint_dir == "/tmp/c");
  BOOST_TEST(o->checkpoint_every == 500u);
  BOOST_TEST(o->checkpoint_keep == 4u);
  BOOST_TEST(o->resume == "/tmp/c");
  BOOST_TEST(o->max_restarts == 5u);
  BOOST_TEST(o->restart_period.count() == 2000);
  BOOST_TEST(parse({"--replication", "3", "--servers", "3"}).value().replication == 3u);
  BOOST_TEST(!parse({"--replication", "4", "--servers", "4"}));
  BOOST_TEST(!parse({"--replication", "3", "--servers", "2"}));
  BOOST_TEST(!parse({"--replication", "2", "--servers", "1"}));
  BOOST_TEST(!parse({"--replication", "0"}));
  BOOST_TEST(!parse({"--checkpoint-keep", "1"}));
  BOOST_TEST(!parse({"--restart-period-ms", "0"}));
}

BOOST_AUTO_TEST_CASE(a_standby_coordinator_and_its_bounds) {
  auto o = parse({"--role", "coordinator", "--standby-of", "127.0.0.1:7600", "--listen",
                  "127.0.0.1:7601", "--takeover-timeout-ms", "4000", "--secret", "s"});
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(o->standby_of.port == 7600);
  BOOST_TEST(o->takeover_timeout.count() == 4000);
  BOOST_TEST(parse({}).value().standby_of.port == 0);  // none by default
  BOOST_TEST(!parse({"--role", "worker", "--standby-of", "127.0.0.1:7600", "--secret", "s"}));
  BOOST_TEST(succeeded(parse({"--role", "coordinator", "--mode", "dp", "--standby-of",
                              "127.0.0.1:7600", "--secret", "s"})));
  BOOST_TEST(succeeded(parse({"--role", "coordinator", "--mode", "hybrid", "--standby-of",
                              "127.0.0.1:7600", "--secret", "s"})));
  // With a standby listed: above the heartbeat timeout, below half the request timeout.
  const std::vector<std::string> listed = {
      "--role", "worker", "--secret", "s", "--coordinator", "127.0.0.1:7600,127.0.0.1:7601"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), listed.begin(), listed.end());
    return parse(more);
  };
  BOOST_TEST(succeeded(with({})));
  BOOST_TEST(!with({"--takeover-timeout-ms", "1000"}));
  BOOST_TEST(!with({"--request-timeout", "10"}));
  BOOST_TEST(succeeded(parse({"--request-timeout", "4"})));  // no standby: no bound
}

BOOST_AUTO_TEST_CASE(diagnostic_thresholds_default_to_the_seed_and_can_be_set) {
  auto defaults = parse({});
  BOOST_TEST_REQUIRE(succeeded(defaults));
  BOOST_TEST(defaults->warn.update_variance == 0.1);
  BOOST_TEST(defaults->warn.update_ratio == 0.9);
  auto o = parse({"--warn-update-variance", "0.5", "--warn-loss-oscillation", "0.2",
                  "--warn-update-ratio", "0.75"});
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(o->warn.update_variance == 0.5);
  BOOST_TEST(o->warn.loss_oscillation == 0.2);
  BOOST_TEST(o->warn.update_ratio == 0.75);
  BOOST_TEST(!parse({"--warn-update-variance", "-1"}));
  BOOST_TEST(!parse({"--warn-update-ratio", "1.5"}));
}

BOOST_AUTO_TEST_CASE(dash_flags) {
  auto o =
      parse({"--optimizer", "dash", "--dash-block", "64", "--dash-freq", "5", "--dash-solver",
             "ndb", "--dash-storage", "bf16", "--dash-nesterov", "--dash-scaling", "frobenius"});
  BOOST_TEST_REQUIRE(succeeded(o));
  BOOST_TEST(std::string{to_string(o->optimizer)} == "dash");
  BOOST_TEST(o->dash_block == 64u);
  BOOST_TEST(o->dash_freq == 5u);
  BOOST_TEST(std::string{to_string(o->dash_solver)} == "ndb");
  BOOST_TEST(std::string{to_string(o->dash_storage)} == "bf16");
  BOOST_TEST(o->dash_nesterov);
  BOOST_TEST(std::string{to_string(o->dash_scaling)} == "frobenius");
  BOOST_TEST(!parse({"--dash-scaling", "trace"}));
  BOOST_TEST(!parse({"--dash-block", "0"}));
  BOOST_TEST(!parse({"--dash-freq", "0"}));
  BOOST_TEST(!parse({"--dash-solver", "svd"}));
  BOOST_TEST(!parse({"--dash-storage", "fp8"}));
  BOOST_TEST(std::string{to_string(parse({})->dash_device)} == "cpu");
  BOOST_TEST(std::string{to_string(
                 parse({"--optimizer", "dash", "--dash-device", "gpu"})->dash_device)} == "gpu");
  auto adam_on_gpu = parse({"--dash-device", "gpu"});  // embedded Adam: no DASH for a GPU
  BOOST_TEST_REQUIRE(!adam_on_gpu);
  BOOST_TEST(troupe::describe(adam_on_gpu.error()).find("--optimizer dash") != std::string::npos);
  BOOST_TEST(!parse({"--dash-device", "tpu"}));
  // The GPU steps coupled-Newton roots with power scaling only (16-bit statistics stay so on
  // the host).
  BOOST_TEST(!parse({"--optimizer", "dash", "--dash-device", "gpu", "--dash-solver", "evd"}));
  BOOST_TEST(
      !parse({"--optimizer", "dash", "--dash-device", "gpu", "--dash-scaling", "frobenius"}));
  BOOST_TEST(static_cast<bool>(
      parse({"--optimizer", "dash", "--dash-device", "gpu", "--dash-storage", "bf16"})));
}

BOOST_AUTO_TEST_CASE(data_parallel_mode_and_its_flags) {
  auto ps = parse({});
  BOOST_TEST_REQUIRE(bool(ps));
  BOOST_TEST(!ps->data_parallel());
  auto dp = parse({"--mode", "dp", "--bucket-mb", "0.25", "--no-overlap", "--checksum-every", "7",
                   "--max-workers", "4"});
  BOOST_TEST_REQUIRE(bool(dp));
  BOOST_TEST(dp->data_parallel());
  BOOST_TEST(std::string{to_string(dp->dp.collective)} == "gloo");
  BOOST_TEST(dp->dp.bucket_mb == 0.25);
  BOOST_TEST(!dp->dp.overlap);
  BOOST_TEST(dp->dp.checksum_every == 7u);
  BOOST_TEST(dp->max_workers == 4u);
  auto defaults = parse({"--mode", "dp"});
  BOOST_TEST_REQUIRE(bool(defaults));
  BOOST_TEST(defaults->dp.bucket_mb == 25.0);
  BOOST_TEST(defaults->dp.overlap);
  BOOST_TEST(defaults->dp.checksum_every == 100u);
}

BOOST_AUTO_TEST_CASE(data_parallel_refuses_what_belongs_to_the_parameter_service) {
  for (const char* flag : {"--servers", "--consistency", "--dc", "--replication",
                           "--sync-threshold", "--compress", "--buckets"}) {
    const std::string value = std::string(flag) == "--consistency" ? "bsp"
                              : std::string(flag) == "--dc"        ? "linear:0.1"
                              : std::string(flag) == "--compress"  ? "sign"
                                                                   : "1";
    auto refused = parse({"--mode", "dp", flag, value});
    BOOST_TEST(fails_with(refused, errc::bad_configuration), flag);
    if (!refused)
      BOOST_TEST(troupe::describe(refused.error()).find("parameter service") != std::string::npos);
  }
  BOOST_TEST(fails_with(parse({"--mode", "dp", "--prefetch"}), errc::bad_configuration));
  auto nccl = parse({"--mode", "dp", "--collective", "nccl"});  // whether a GPU is here: at start
  BOOST_TEST_REQUIRE(bool(nccl));
  BOOST_TEST(std::string{to_string(nccl->dp.collective)} == "nccl");
  BOOST_TEST(fails_with(parse({"--mode", "dp", "--collective", "mpi"}), errc::bad_configuration));
  BOOST_TEST(fails_with(parse({"--mode", "dp", "--bucket-mb", "0"}), errc::bad_configuration));
  BOOST_TEST(fails_with(parse({"--mode", "dp", "--bucket-mb", "x"}), errc::bad_configuration));
  BOOST_TEST(fails_with(parse({"--mode", "mpi"}), errc::bad_configuration));
  BOOST_TEST(fails_with(parse({"--bucket-mb", "1"}), errc::bad_configuration));  // ps
}

BOOST_AUTO_TEST_CASE(torchrun_in_data_parallel_mode_counts_trainers) {
  auto zero = parse({"--mode", "dp"}, torchrun("0", "3"));
  BOOST_TEST_REQUIRE(bool(zero));
  BOOST_TEST((zero->role == node_role::coordinator));
  BOOST_TEST(zero->dp.coordinator_trains);
  BOOST_TEST(zero->workers == 3u);
  auto two = parse({"--mode", "dp"}, torchrun("2", "3"));
  BOOST_TEST_REQUIRE(bool(two));
  BOOST_TEST((two->role == node_role::worker));
  BOOST_TEST(!two->dp.coordinator_trains);
}

// -- the flag table ----------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(every_flag_is_declared_once_and_takes_back_what_it_shows) {
  std::set<std::string> names;
  const launch_options defaults;
  for (const auto& f : flag_table()) {
    BOOST_TEST_CONTEXT("--" << f.name) {
      BOOST_TEST(names.insert(f.name).second);  // one entry per flag
      BOOST_TEST(!f.help.empty());
      // The shown default parses back to the same value (switches and unset texts show "").
      const std::string shown = f.show(defaults);
      if (shown.empty() || f.name == "secret") continue;
      launch_options o;
      BOOST_TEST(!f.apply(shown, o));
      BOOST_TEST(f.show(o) == shown);
    }
  }
  BOOST_TEST(names.size() >= 60u);  // every flag of the table this replaced
}

BOOST_AUTO_TEST_CASE(a_choice_names_its_choices_when_refused) {
  auto o = parse({"--dash-solver", "lu"});
  BOOST_TEST_REQUIRE(!o);
  BOOST_TEST(describe(o.error()).find("evd, cn, ndb, cheb") != std::string::npos,
             describe(o.error()));
}

BOOST_AUTO_TEST_CASE(settings_show_every_effective_value) {
  auto o = parse({"--optimizer", "dash", "--dash-storage", "bf16", "--consistency", "ssp:3",
                  "--heartbeat-ms", "250"});
  BOOST_TEST_REQUIRE(succeeded(o));
  std::map<std::string, std::string> settings;
  for (auto& [name, value] : flag_settings(*o)) settings[name] = value;
  BOOST_TEST(settings["optimizer"] == "dash");
  BOOST_TEST(settings["dash-storage"] == "bf16");
  BOOST_TEST(settings["consistency"] == "ssp:3");
  BOOST_TEST(settings["heartbeat-ms"] == "250");
  BOOST_TEST(settings["workers"] == "2");
  BOOST_TEST(settings["mode"] == "ps");
  BOOST_TEST(settings.count("help") == 0u);
}

BOOST_AUTO_TEST_CASE(typed_app_flags_are_checked_when_parsed) {
  const std::vector<app_flag> app = {{"fields", "F", "feature fields", "8", app_flag::whole},
                                     {"zipf", "S", "popularity exponent", "1.2", app_flag::number},
                                     {"data", "DIR", "where the data is", "/d"}};
  auto good = parse({"--fields", "12", "--zipf", "0.5", "--data", "x"}, {}, app);
  BOOST_TEST_REQUIRE(succeeded(good));
  BOOST_TEST(*good->app_number<uint32_t>("fields") == 12u);
  BOOST_TEST(*good->app_number<double>("zipf") == 0.5);
  auto fraction = parse({"--fields", "1.5"}, {}, app);
  BOOST_TEST(fails_with(fraction, errc::bad_configuration));
  BOOST_TEST(describe(fraction.error()).find("--fields") != std::string::npos);
  BOOST_TEST(fails_with(parse({"--zipf", "fast"}, {}, app), errc::bad_configuration));
  BOOST_TEST(fails_with(parse({}, {{"TROUPE_FIELDS", "-3"}}, app), errc::bad_configuration));
}

BOOST_AUTO_TEST_CASE(data_parallel_compression_flags_parse_and_are_checked) {
  auto o = parse({"--mode", "dp", "--optimizer", "onebit-adam", "--freeze-step", "50",
                  "--comm-dtype", "bf16", "--compress-skip", "fc1.w,emb", "--balance",
                  "--worker-slowdown", "1:3,0:1.5", "--accumulate", "4"});
  BOOST_TEST_REQUIRE(bool(o));
  BOOST_TEST((o->dp.adam == troupe::compressed_adam::onebit));
  BOOST_TEST((o->optimizer == troupe::optimizer_config::kind::adam));
  BOOST_TEST(o->dp.freeze_step == 50u);
  BOOST_TEST((o->dp.dtype == troupe::comm_dtype::bf16));
  BOOST_TEST((o->dp.compress_skip == std::vector<std::string>{"fc1.w", "emb"}));
  BOOST_TEST(o->dp.balance);
  BOOST_TEST(o->dp.worker_slowdown.at(1) == 3.0);
  BOOST_TEST(o->accumulate == 4u);
  const auto settings = flag_settings(*o);
  auto shown = [&](const std::string& name) {
    for (const auto& [n, v] : settings)
      if (n == name) return v;
    return std::string{"(absent)"};
  };
  BOOST_TEST(shown("optimizer") == "onebit-adam");
  BOOST_TEST(shown("worker-slowdown") == "0:1.5,1:3");
  auto zero_one = parse({"--mode", "dp", "--optimizer", "zero-one-adam"});
  BOOST_TEST_REQUIRE(bool(zero_one));
  BOOST_TEST((zero_one->dp.adam == troupe::compressed_adam::zero_one));
  auto plain = parse({"--mode", "dp", "--optimizer", "zero-one-adam", "--optimizer", "adam"});
  BOOST_TEST((plain && plain->dp.adam == troupe::compressed_adam::none));
  BOOST_TEST(!parse({"--optimizer", "onebit-adam"}));  // the parameter service has no allreduce
  BOOST_TEST(!parse({"--comm-dtype", "bf16"}));
  BOOST_TEST(!parse({"--mode", "dp", "--comm-dtype", "fp8"}));
  BOOST_TEST(!parse({"--mode", "dp", "--worker-slowdown", "1:0.5"}));
  BOOST_TEST(!parse({"--mode", "dp", "--worker-slowdown", "7:2"}));  // 2 workers
  BOOST_TEST(!parse({"--mode", "dp", "--compress-skip", "a,,b"}));
}

BOOST_AUTO_TEST_CASE(zero_stage_parses_and_refuses_what_sharded_state_does_not_take) {
  auto o = parse({"--mode", "dp", "--zero-stage", "1", "--comm-dtype", "bf16", "--accumulate", "2",
                  "--balance"});
  BOOST_TEST_REQUIRE(bool(o));
  BOOST_TEST(o->dp.zero_stage == 1u);
  BOOST_TEST(parse({"--mode", "dp"})->dp.zero_stage == 0u);
  BOOST_TEST(bool(parse({"--mode", "hybrid", "--zero-stage", "1"})));
  // Each refusal says why, naming the flag.
  auto refused = [](const std::vector<std::string>& args, const std::string& why) {
    auto with = args;
    with.insert(with.begin(), {"--mode", "dp", "--zero-stage", "1"});
    auto p = parse(with);
    BOOST_TEST_REQUIRE(!p);
    BOOST_TEST(troupe::testing::is_error(p.error(), troupe::errc::bad_configuration));
    BOOST_TEST(troupe::describe(p.error()).find(why) != std::string::npos,
               troupe::describe(p.error()));
  };
  refused({"--optimizer", "onebit-adam"}, "onebit-adam");
  refused({"--optimizer", "zero-one-adam"}, "zero-one-adam");
  refused({"--optimizer", "dash"}, "--optimizer dash");
  // Sharded state is checkpointed and resumed.
  BOOST_TEST(bool(parse(
      {"--mode", "dp", "--zero-stage", "2", "--checkpoint-dir", "/tmp/x", "--resume", "/tmp/x"})));
  // A group with sharded state re-forms: joiners and standbys are taken.
  BOOST_TEST(bool(parse({"--mode", "dp", "--zero-stage", "1", "--max-workers", "3"})));
  auto backups = parse({"--mode", "dp", "--zero-stage", "1", "--shard-backups", "2"});
  BOOST_TEST_REQUIRE(bool(backups));
  BOOST_TEST(backups->dp.shard_backups == 2u);
  BOOST_TEST(parse({"--mode", "dp"})->dp.shard_backups == 1u);
  auto two = parse({"--mode", "dp", "--zero-stage", "2", "--comm-dtype", "bf16", "--balance"});
  BOOST_TEST_REQUIRE(bool(two));
  BOOST_TEST(two->dp.zero_stage == 2u);
  auto accumulated = parse({"--mode", "dp", "--zero-stage", "2", "--accumulate", "2"});
  BOOST_TEST_REQUIRE(!accumulated);
  BOOST_TEST(troupe::describe(accumulated.error()).find("--zero-stage 2: --accumulate") !=
             std::string::npos);
  BOOST_TEST(!parse({"--mode", "dp", "--zero-stage", "3"}));
  BOOST_TEST(!parse({"--zero-stage", "1"}));  // the parameter service shards by buckets already
}

BOOST_AUTO_TEST_CASE(coordinator_takes_a_list_of_addresses) {
  auto o = parse({"--coordinator", "10.0.0.1:7600,10.0.0.2:7601"});
  BOOST_TEST_REQUIRE(static_cast<bool>(o));
  BOOST_TEST_REQUIRE(o->coordinators.size() == 2u);
  BOOST_TEST(o->coordinators[1].host == "10.0.0.2");
  BOOST_TEST(o->coordinators[1].port == 7601);
  BOOST_TEST(to_string(o->coordinators) == "10.0.0.1:7600,10.0.0.2:7601");
  BOOST_TEST(!parse({"--coordinator", "10.0.0.1:7600,"}));
  BOOST_TEST(!parse({"--coordinator", "10.0.0.1:7600,nonsense"}));
}

BOOST_AUTO_TEST_CASE(layer_widths_parse_as_a_list_and_refuse_a_bad_one) {
  auto widths = parse_widths("hidden", "4096,4096,10", 1u << 16);
  BOOST_TEST_REQUIRE(bool(widths));
  BOOST_TEST((*widths == std::vector<uint32_t>{4096, 4096, 10}));
  BOOST_TEST(parse_widths("hidden", "", 16)->empty());  // no hidden layer
  for (const char* bad : {"0", "17", "8,,8", "8,x", "-1"}) {
    auto refused = parse_widths("hidden", bad, 16);
    BOOST_TEST_REQUIRE(!refused, bad);
    BOOST_TEST(describe(refused.error()).find("--hidden takes widths 1 to 16") != std::string::npos,
               describe(refused.error()));
  }
}

BOOST_AUTO_TEST_CASE(diloco_takes_its_flags_and_refuses_what_a_pseudo_gradient_does_not_fit) {
  using kind = troupe::optimizer_config::kind;
  auto o = parse({"--mode", "diloco", "--sync-every", "20", "--fragments", "4", "--outer-lr", "0.5",
                  "--outer-momentum", "0.8", "--comm-dtype", "int8", "--worker-slowdown", "1:3",
                  "--consistency", "ssp:2"});
  BOOST_TEST_REQUIRE(bool(o), (o ? "" : troupe::describe(o.error())));
  BOOST_TEST(o->parameter_service());
  BOOST_TEST(!o->data_parallel());
  BOOST_TEST(o->diloco.sync_every == 20u);
  BOOST_TEST(o->diloco.fragments == 4u);
  BOOST_TEST(o->dp.worker_slowdown.at(1) == 3.0);
  // The inner optimizer defaults to adamw here; the outer to delayed Nesterov (async, ssp),
  // its momentum stepping once per --workers arrivals.
  BOOST_TEST((o->optimizer == kind::adamw));
  const auto outer = troupe::optimizer_from(*o);
  BOOST_TEST((outer.type == kind::delayed_nesterov));
  BOOST_TEST(outer.lr == 0.5f);
  BOOST_TEST(outer.beta1 == 0.8f);
  BOOST_TEST(outer.delay == o->workers);
  BOOST_TEST((troupe::inner_optimizer_from(*o).type == kind::adamw));
  auto bsp = parse({"--mode", "diloco", "--consistency", "bsp", "--optimizer", "sgd"});
  BOOST_TEST_REQUIRE(bool(bsp));
  BOOST_TEST((troupe::optimizer_from(*bsp).type == kind::nesterov));  // one update a round
  BOOST_TEST((troupe::inner_optimizer_from(*bsp).type == kind::sgd));
  auto chosen =
      parse({"--mode", "diloco", "--outer-optimizer", "delayed-nesterov", "--consistency", "bsp"});
  BOOST_TEST(troupe::optimizer_from(*chosen).delay == 1u);
  BOOST_TEST((parse({"--mode", "ps"})->optimizer == kind::adam));  // elsewhere adam, as before
  auto refused = [](const std::vector<std::string>& args, const std::string& why) {
    auto p = parse(args);
    BOOST_TEST_REQUIRE(!p);
    BOOST_TEST(troupe::testing::is_error(p.error(), troupe::errc::bad_configuration));
    BOOST_TEST(troupe::describe(p.error()).find(why) != std::string::npos,
               troupe::describe(p.error()));
  };
  refused({"--mode", "diloco", "--dc", "dcasgd:0.1"}, "--dc corrects a gradient");
  refused({"--mode", "diloco", "--optimizer", "dash"}, "inner --optimizer");
  refused({"--mode", "diloco", "--prefetch"}, "--prefetch");
  refused({"--mode", "diloco", "--compress", "sign"}, "--comm-dtype int8");
  refused({"--mode", "diloco", "--sync-every", "0"}, "--sync-every");
  refused({"--mode", "diloco", "--sync-every", "2", "--fragments", "3"}, "--fragments");
  refused({"--mode", "diloco", "--buckets", "2", "--fragments", "4"}, "--buckets");
  refused({"--mode", "diloco", "--outer-momentum", "1"}, "--outer-momentum");
  refused({"--mode", "diloco", "--outer-optimizer", "adam"}, "sgd, nesterov or delayed-nesterov");
  refused({"--mode", "dp", "--comm-dtype", "int8"}, "int8 is for --mode diloco");
  refused({"--sync-every", "5"}, "--sync-every is for --mode diloco");
  refused({"--comm-dtype", "bf16"}, "--comm-dtype is for --mode dp, hybrid or diloco");
}
