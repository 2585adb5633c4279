// Test helper: a private network of Linux network namespaces, one per node, each joined to a
// bridge in a hub namespace by a veth pair and given 10.231.0.(i + 1)/24. A test runs a
// process inside node i (command()), and cuts or heals the link between two nodes with
// nftables rules inside both namespaces that drop their packets silently, as a partition does
// (TCP connections stay open; nothing reaches the other side), or answer them with resets. Needs
// root, iproute2 and nftables (cmake/bootstrap.sh installs both); ready() is false, with the reason
// in why(), where they are missing, and the test then skips. The destructor deletes every
// namespace: run the processes from objects destroyed first. For tests only.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace troupe::testing {

class network_lab {
 public:
  explicit network_lab(size_t nodes) : prefix_("trp" + std::to_string(::getpid() % 100000)) {
    ip_ = find_tool({"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"});
    nft_ = find_tool({"/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"});
    why_ = build(nodes);
    ready_ = why_.empty();
  }
  ~network_lab() {
    for (const auto& ns : made_) sh(ip_ + " netns del " + ns);
  }
  network_lab(const network_lab&) = delete;
  network_lab& operator=(const network_lab&) = delete;

  bool ready() const { return ready_; }
  const std::string& why() const { return why_; }

  std::string address(size_t i) const { return "10.231.0." + std::to_string(i + 1); }

  // `args` run inside node i's namespace.
  std::vector<std::string> command(size_t i, std::vector<std::string> args) const {
    args.insert(args.begin(), {ip_, "netns", "exec", node(i)});
    return args;
  }

  // How a cut behaves: `drop` loses every packet silently (TCP connections stay open and only
  // time out); `reset` answers each with a TCP reset (both sides see the connection close).
  enum class cut_kind { drop, reset };

  // Nodes i and j stop hearing each other, both directions; heal() undoes it.
  bool cut(size_t i, size_t j, cut_kind how = cut_kind::drop) {
    cuts_[i][j] = how, cuts_[j][i] = how;
    return apply(i) && apply(j);
  }
  bool heal(size_t i, size_t j) {
    cuts_[i].erase(j), cuts_[j].erase(i);
    return apply(i) && apply(j);
  }

 private:
  static std::string find_tool(const std::vector<std::string>& paths) {
    for (const auto& p : paths)
      if (std::filesystem::exists(p)) return p;
    return "";
  }
  static bool sh(const std::string& command) {
    return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
  }
  // Makes the hub and the nodes; "" when all is well, otherwise why not.
  std::string build(size_t nodes) {
    if (::geteuid() != 0) return "network namespaces need root";
    if (ip_.empty() || nft_.empty()) return "iproute2 and nftables are not installed";
    const std::string hub = prefix_ + "h";
    if (!sh(ip_ + " netns add " + hub)) return "ip netns add failed (no namespaces here?)";
    made_.push_back(hub);
    if (!sh(ip_ + " -n " + hub + " link add br0 type bridge") ||
        !sh(ip_ + " -n " + hub + " link set br0 up"))
      return "cannot make the hub's bridge";
    for (size_t i = 0; i < nodes; ++i)
      if (!add_node(i)) return "cannot make node " + std::to_string(i) + "'s namespace";
    return "";
  }
  std::string node(size_t i) const { return prefix_ + "n" + std::to_string(i); }

  bool add_node(size_t i) {
    const std::string ns = node(i), hub = prefix_ + "h", port = fmt::format("p{}", i);
    if (!sh(ip_ + " netns add " + ns)) return false;
    made_.push_back(ns);
    const std::string in_ns = ip_ + " -n " + ns + " ";
    return sh(ip_ + " -n " + hub + " link add " + port + " type veth peer name eth0 netns " + ns) &&
           sh(ip_ + " -n " + hub + " link set " + port + " master br0 up") &&
           sh(in_ns + "addr add " + address(i) + "/24 dev eth0") &&
           sh(in_ns + "link set eth0 up") && sh(in_ns + "link set lo up") &&
           sh(ip_ + " netns exec " + ns + " " + nft_ +
              " 'add table inet lab; add chain inet lab in { type filter hook input priority 0; "
              "}; add chain inet lab out { type filter hook output priority 0; }'");
  }

  // Node i's rules anew: it drops (or resets) what goes to and comes from every node cut off
  // from it.
  bool apply(size_t i) {
    std::string rules = "flush chain inet lab in; flush chain inet lab out";
    for (const auto& [j, how] : cuts_[i]) {
      const std::string in = "; add rule inet lab in ip saddr " + address(j);
      const std::string out = "; add rule inet lab out ip daddr " + address(j);
      if (how == cut_kind::drop) {
        rules += in + " drop" + out + " drop";
      } else {  // the resets themselves pass, so that both sockets see them
        rules += in + " tcp flags rst accept" + in + " meta l4proto tcp reject with tcp reset" +
                 out + " tcp flags rst accept" + out + " meta l4proto tcp reject with tcp reset";
      }
    }
    return sh(ip_ + " netns exec " + node(i) + " " + nft_ + " '" + rules + "'");
  }

  std::string prefix_, ip_, nft_, why_;
  std::vector<std::string> made_;
  std::map<size_t, std::map<size_t, cut_kind>> cuts_;
  bool ready_ = false;
};

}  // namespace troupe::testing
