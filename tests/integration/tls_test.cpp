// Mutual TLS end to end, with real processes on loopback: troupe-certs makes a CA and the
// certificates; a five-process fmnist job with --tls-dir on every node completes while nodes
// with another CA's certificate, with none, or with a broken directory are turned away in one
// line; the console with an operator certificate can drain, one with a member's cannot; junk
// sent to the coordinator's TLS port leaves its memory where it was; a dp job with --tls-dir
// uses the actors backend.
#define BOOST_TEST_MODULE tls_test
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/ssl.h>

#include <csignal>
#include <fstream>
#include <random>

#include "tests/integration/fmnist_cluster.hpp"
#include "troupe/metrics_http.hpp"
#include "troupe/tls.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

const std::vector<std::string> subset = {"--train-limit",  "6000", "--test-limit", "2000",
                                         "--blas-threads", "1",    "--log-level",  "warn"};

// Runs troupe-certs with `args`; true when it succeeded.
bool certs(std::vector<std::string> args) {
  args.insert(args.begin(), TROUPE_CERTS_BIN);
  child_process p(args, scratch("certs.log").string(), {});
  return p.wait(std::chrono::seconds(60)).value_or(-1) == 0;
}

// The cluster's CA and what it issued, plus a stranger's CA and certificate.
struct authority {
  std::string root = scratch("tls").string();
  std::string node = root + "/node", admin = root + "/admin", member = root + "/member";
  std::string stranger = root + "/stranger";

  authority() {
    if (std::filesystem::exists(root + "/ca/ca.key")) return;  // made by an earlier test
    BOOST_TEST_REQUIRE(certs({"init", root + "/ca"}));
    BOOST_TEST_REQUIRE(certs({"issue", root + "/ca", "node", "--out", node}));
    BOOST_TEST_REQUIRE(certs({"issue", root + "/ca", "admin", "--out", admin, "--operator"}));
    BOOST_TEST_REQUIRE(certs({"issue", root + "/ca", "member", "--out", member}));
    BOOST_TEST_REQUIRE(certs({"init", root + "/other-ca"}));
    BOOST_TEST_REQUIRE(certs({"issue", root + "/other-ca", "stranger", "--out", stranger}));
  }
};

std::vector<std::string> with(std::vector<std::string> flags,
                              const std::vector<std::string>& more) {
  flags.insert(flags.end(), more.begin(), more.end());
  return flags;
}

// troupe-console -c `command` against the cluster with `tls_dir`; exit code and output.
std::pair<int, std::string> console(const fmnist_cluster& cluster, const std::string& tls_dir,
                                    const std::string& command) {
  static int runs = 0;
  child_process c(
      {TROUPE_CONSOLE_BIN, "--connect", cluster.address, "--tls-dir", tls_dir, "-c", command},
      scratch("tls-console-" + std::to_string(++runs) + ".log").string(), {cluster.env[0]});
  const int code = c.wait(std::chrono::seconds(60)).value_or(-1);
  return {code, c.output()};
}

// A worker that tries to join with `flags`; its exit code and output.
std::pair<int, std::string> try_join(const fmnist_cluster& cluster,
                                     const std::vector<std::string>& flags) {
  static int runs = 0;
  child_process w(
      fmnist_command({"--role", "worker", "--coordinator", cluster.address, "--join-timeout", "10"},
                     with(subset, flags)),
      scratch("tls-intruder-" + std::to_string(++runs) + ".log").string(), cluster.env);
  const int code = w.wait(std::chrono::seconds(60)).value_or(-1);
  return {code, w.output()};
}

std::vector<char> with_bytes(std::vector<char> a, const std::vector<char>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Opens a TCP connection to the port, sends `bytes`, and closes it.
void send_junk(uint16_t port, const std::vector<char>& bytes) {
  const int fd = connect_loopback(port);
  if (fd < 0) return;
  send_all(fd, bytes.data(), bytes.size());
  ::close(fd);
}

// Resident memory of a process in MiB (VmRSS).
double resident_mib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return -1;
}

// What the issue measured without TLS: a 64-byte header announcing a huge payload, then
// 4 KiB of zeros, 4 KiB of 0xff and 1 MiB of random bytes, each on a fresh connection.
std::vector<std::vector<char>> junk() {
  // A BASP header (CAF 0.17: 32 bytes) of a client handshake announcing a 2 GiB payload.
  std::vector<char> header(64, 0);
  header[0] = 1, header[4] = 0x7f, header[5] = header[6] = '\xff', header[7] = '\xf0';
  std::vector<char> random(1 << 20);
  std::mt19937 gen{7};
  for (auto& c : random) c = static_cast<char>(gen());
  return {header, with_bytes(header, std::vector<char>(4096, 0)),
          with_bytes(header, std::vector<char>(4096, '\xff')), with_bytes(header, random)};
}

// A TLS client of 127.0.0.1:port that trusts `ca_file` and shows the certificate of
// `client_dir` ("" for none). With TLS 1.3 the handshake completes on the client's side
// before the server has judged the client's certificate.
class tls_client {
 public:
  tls_client(uint16_t port, const std::string& ca_file, const std::string& client_dir)
      : ctx_(SSL_CTX_new(TLS_client_method())) {
    SSL_CTX_load_verify_locations(ctx_, ca_file.c_str(), nullptr);
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    if (!client_dir.empty()) {
      const auto files = tls::files_in(client_dir);
      SSL_CTX_use_certificate_file(ctx_, files.cert.c_str(), SSL_FILETYPE_PEM);
      SSL_CTX_use_PrivateKey_file(ctx_, files.key.c_str(), SSL_FILETYPE_PEM);
    }
    ssl_ = SSL_new(ctx_);
    fd_ = connect_loopback(port);
    connected_ = fd_ >= 0 && SSL_set_fd(ssl_, fd_) == 1 && SSL_connect(ssl_) == 1;
  }
  ~tls_client() {
    SSL_free(ssl_);
    SSL_CTX_free(ctx_);
    if (fd_ >= 0) ::close(fd_);
  }
  tls_client(const tls_client&) = delete;
  tls_client& operator=(const tls_client&) = delete;

  bool connected() const { return connected_; }
  int fd() const { return fd_; }
  int write(const std::string& text) {
    return SSL_write(ssl_, text.data(), static_cast<int>(text.size()));
  }
  std::string read_all() {
    std::string out;
    char buffer[4096];
    for (int n; (n = SSL_read(ssl_, buffer, sizeof buffer)) > 0;) out.append(buffer, n);
    return out;
  }

 private:
  SSL_CTX* ctx_;
  SSL* ssl_ = nullptr;
  int fd_ = -1;
  bool connected_ = false;
};

// GET /metrics over TLS with the certificate of `client_dir` ("" for none); the response, or
// "" when the server would not talk.
std::string https_get(uint16_t port, const std::string& ca_file, const std::string& client_dir) {
  tls_client client{port, ca_file, client_dir};
  if (!client.connected()) return "";
  client.write("GET /metrics HTTP/1.0\r\n\r\n");
  return client.read_all();
}

// True once the peer of `fd` has closed its end (within `wait`).
bool peer_hung_up(int fd, std::chrono::milliseconds wait) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, static_cast<int>(wait.count())) > 0 && (p.revents & (POLLRDHUP | POLLHUP));
}

}  // namespace

BOOST_AUTO_TEST_CASE(metrics_are_served_over_https_to_holders_of_a_certificate_only) {
  authority ca;
  auto registry = std::make_shared<metrics_registry>();
  BOOST_TEST_REQUIRE(!registry->declare("troupe_up", metric_kind::gauge, "up"));
  registry->gauge("troupe_up")->set(1);
  auto endpoint = metrics_endpoint::start(registry, host_port{"127.0.0.1", 0}, ca.node);
  BOOST_TEST_REQUIRE(static_cast<bool>(endpoint));
  const uint16_t port = (*endpoint)->port();
  const std::string ca_file = tls::files_in(ca.node).ca;
  const auto good = https_get(port, ca_file, ca.member);
  BOOST_TEST(good.find("200 OK") != std::string::npos, good);
  BOOST_TEST(good.find("troupe_up 1") != std::string::npos, good);
  BOOST_TEST(https_get(port, ca_file, "").find("troupe_up") == std::string::npos);
  BOOST_TEST(https_get(port, ca_file, ca.stranger).find("troupe_up") == std::string::npos);
  BOOST_TEST(http_get(port, "/metrics").find("troupe_up") == std::string::npos);
}

// OpenSSL writes with write(2): without the wrappers of openssl_call_guards.cpp, writing to a
// peer that hung up killed this process (SIGPIPE's default), as it once did in CI.
BOOST_AUTO_TEST_CASE(a_tls_write_to_a_peer_that_hung_up_is_an_error_not_sigpipe) {
  BOOST_TEST_REQUIRE(std::signal(SIGPIPE, SIG_DFL) == SIG_DFL);
  authority ca;
  auto registry = std::make_shared<metrics_registry>();
  auto endpoint = metrics_endpoint::start(registry, host_port{"127.0.0.1", 0}, ca.node);
  BOOST_TEST_REQUIRE(static_cast<bool>(endpoint));
  tls_client client{(*endpoint)->port(), tls::files_in(ca.node).ca, ""};
  BOOST_TEST_REQUIRE(client.connected());  // TLS 1.3: the server has not judged us yet
  BOOST_TEST_REQUIRE(peer_hung_up(client.fd(), std::chrono::seconds(10)));  // no certificate
  int last = 1;
  await(  // the first writes may still reach the socket before it sees the hang-up
      [&] { return (last = client.write("GET /metrics HTTP/1.0\r\n\r\n")) <= 0; },
      std::chrono::seconds(10));
  BOOST_TEST(last <= 0);
  sigset_t pending;
  sigpending(&pending);
  BOOST_TEST(!sigismember(&pending, SIGPIPE));  // taken by the guard, not left for later
}

BOOST_AUTO_TEST_CASE(a_five_process_job_runs_over_mutual_tls_and_strangers_are_turned_away) {
  authority ca;
  // A floor of 5 ms a batch: the joins, consoles and junk below come long before the job's end.
  fmnist_cluster cluster{with(subset, {"--epochs", "30", "--tls-dir", ca.node}), 2, 2,
                         job_floor(2, 5)};
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("epoch 1/30", std::chrono::seconds(120)),
                     cluster.coordinator->output());
  const uint16_t port = static_cast<uint16_t>(std::stoi(cluster.tag));

  // Strangers: another CA, no TLS at all, a directory without the files. One line each.
  const auto [stranger_code, stranger] = try_join(cluster, {"--tls-dir", ca.stranger});
  BOOST_TEST(stranger_code == 1, stranger);
  BOOST_TEST(stranger.find("TLS handshake") != std::string::npos, stranger);
  const auto [plain_code, plain] = try_join(cluster, {});
  BOOST_TEST(plain_code == 1, plain);
  BOOST_TEST(plain.find("closed the connection during the handshake") != std::string::npos, plain);
  const auto [empty_code, empty] = try_join(cluster, {"--tls-dir", ca.root});
  BOOST_TEST(empty_code != 0, empty);
  BOOST_TEST(empty.find("--tls-dir: ") != std::string::npos, empty);

  // Views need membership; changing the job needs an operator certificate.
  const auto [view_code, view] = console(cluster, ca.member, "nodes");
  BOOST_TEST(view_code == 0, view);
  BOOST_TEST(view.find("worker-1-" + cluster.tag) != std::string::npos, view);
  const auto [member_code, member] = console(cluster, ca.member, "drain worker-1-" + cluster.tag);
  BOOST_TEST(member_code != 0, member);
  BOOST_TEST(member.find("is not an operator's") != std::string::npos, member);
  const auto [admin_code, admin] = console(cluster, ca.admin, "drain worker-1-" + cluster.tag);
  BOOST_TEST(admin_code == 0, admin);
  BOOST_TEST(admin.find("drained worker 'worker-1-") != std::string::npos, admin);

  // Junk on the TLS port, then a thousand such connections: memory stays, the job goes on.
  const double before = resident_mib(cluster.coordinator->pid());
  for (const auto& bytes : junk()) send_junk(port, bytes);
  const auto small = junk()[1];
  for (int i = 0; i < 1000; ++i) send_junk(port, small);
  const double after = resident_mib(cluster.coordinator->pid());
  BOOST_TEST_MESSAGE("coordinator resident memory " << before << " MiB before the junk, " << after
                                                    << " MiB after");
  BOOST_TEST(after - before < 64.0);

  BOOST_TEST(cluster.coordinator->wait(std::chrono::seconds(600)).value_or(-1) == 0,
             cluster.coordinator->output());
  const auto report = read_file(cluster.report.string());
  BOOST_TEST(json_number(report, "test_accuracy").value_or(0) > 0.7);
}

BOOST_AUTO_TEST_CASE(a_dp_job_with_tls_uses_the_actors_backend_and_completes) {
  authority ca;
  const std::string address = "127.0.0.1:" + std::to_string(free_port());
  const std::vector<std::string> env = {"TROUPE_SECRET=a-long-random-secret-for-tests"};
  const auto flags = with(subset, {"--mode", "dp", "--epochs", "1", "--tls-dir", ca.node});
  child_process coordinator(
      fmnist_command({"--role", "coordinator", "--listen", address, "--workers", "2"},
                     with(flags, {"--log-level", "info"})),
      scratch("tls-dp-c.log").string(), env);
  std::vector<std::unique_ptr<child_process>> workers;
  for (int i = 0; i < 2; ++i)
    workers.push_back(std::make_unique<child_process>(
        fmnist_command({"--role", "worker", "--coordinator", address}, flags),
        scratch("tls-dp-w" + std::to_string(i) + ".log").string(), env));
  BOOST_TEST(coordinator.wait(std::chrono::seconds(300)).value_or(-1) == 0, coordinator.output());
  BOOST_TEST(coordinator.output().find("over actors") != std::string::npos, coordinator.output());
  for (auto& w : workers) BOOST_TEST(w->wait(std::chrono::seconds(60)).value_or(-1) == 0);
}
