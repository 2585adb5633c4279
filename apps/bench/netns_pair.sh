# Sourced by the netns benchmarks (dp_overlap_netns.sh, dp_compression_netns.sh,
# diloco_netns.sh): two network namespaces joined by a veth pair shaped with tc netem (RATE,
# DELAY; tbf, rate only, where the kernel has no netem), and run NAME ns|loopback FLAGS...,
# which runs one dp job of troupe-fmnist (the coordinator and worker 0 in one namespace, worker
# 1 in the other, or all on loopback) and prints its step time, overlap, allreduce bytes and
# accuracy. With hub=1 a third namespace joins the first through a second shaped pair, and
# run_hub NAME FLAGS... runs a job of any --mode with the coordinator and servers in the first
# (the hub) and worker 0 and worker 1 each behind its own link, so that every worker's traffic
# crosses a shaped link (a dp group's crosses both, through the hub). The caller sets rate,
# delay and epochs first. Needs root (ip netns, tc). Removes what it made on exit.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=$here/build/bin/troupe-fmnist
export TROUPE_SECRET=${TROUPE_SECRET:-$(head -c 24 /dev/urandom | base64)}
a=troupe-ov-a-$$; b=troupe-ov-b-$$; c=troupe-ov-c-$$; tmp=$(mktemp -d)
cleanup() {
  for n in "$a" "$b" "$c"; do ip netns del "$n" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$a"; ip netns add "$b"
ip link add va-$$ type veth peer name vb-$$
ip link set va-$$ netns "$a"; ip link set vb-$$ netns "$b"
ip -n "$a" addr add 10.77.0.1/24 dev va-$$; ip -n "$b" addr add 10.77.0.2/24 dev vb-$$
for n in "$a" "$b"; do ip -n "$n" link set lo up; done
ip -n "$a" link set va-$$ up; ip -n "$b" link set vb-$$ up
# netem (rate and delay) where the kernel has it, else tbf (rate only: no delay).
shaping="netem rate $rate delay $delay"
shape() {
  ip netns exec "$1" tc qdisc add dev "$2" root netem rate "$rate" delay "$delay" 2>/dev/null ||
    { shaping="tbf rate $rate (this kernel has no netem: no delay)";
      ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$rate" burst 256kb latency 100ms; }
}
shape "$a" va-$$; shape "$b" vb-$$
if [ "${hub:-0}" = 1 ]; then  # c behind a second shaped pair; a forwards between b and c
  ip netns add "$c"
  ip link add vh-$$ type veth peer name vc-$$
  ip link set vh-$$ netns "$a"; ip link set vc-$$ netns "$c"
  ip -n "$a" addr add 10.78.0.1/24 dev vh-$$; ip -n "$c" addr add 10.78.0.2/24 dev vc-$$
  ip -n "$c" link set lo up; ip -n "$a" link set vh-$$ up; ip -n "$c" link set vc-$$ up
  ip netns exec "$a" sysctl -qw net.ipv4.ip_forward=1
  ip -n "$b" route add 10.78.0.0/24 via 10.77.0.1; ip -n "$c" route add 10.77.0.0/24 via 10.78.0.1
  shape "$a" vh-$$; shape "$c" vc-$$
fi

# Bytes through the hub's two links so far, both ways.
hub_bytes() {
  ip netns exec "$a" cat /sys/class/net/va-$$/statistics/{tx,rx}_bytes \
    /sys/class/net/vh-$$/statistics/{tx,rx}_bytes | awk '{s += $1} END {printf "%.0f\n", s}'
}

# run_hub NAME FLAGS...: one job of `epochs` epochs, the coordinator (and --servers 2 unless
# --mode dp) in the hub, worker 0 behind one link, worker 1 behind the other. Prints the first
# epoch whose test accuracy reaches 0.86 and the time to it (the epoch's end), the accuracy of
# the last epoch, and the bytes per epoch that crossed the links (all traffic, both ways).
run_hub() {
  local name=$1; shift
  local common=(--batch 64 --epochs "$epochs" --log-level warn --insecure "$@")
  local servers=(--servers 2)
  case " $* " in *" --mode dp "*) servers=() ;; esac
  local before; before=$(hub_bytes)
  ip netns exec "$a" "$bin" --role coordinator --listen 10.77.0.1:7700 --workers 2 \
    "${servers[@]}" --report "$tmp/r.json" "${common[@]}" > "$tmp/c.log" 2>&1 &
  if [ "${#servers[@]}" -gt 0 ]; then
    for i in 0 1; do
      ip netns exec "$a" "$bin" --role server --coordinator 10.77.0.1:7700 \
        --listen 10.77.0.1:0 "${common[@]}" > "$tmp/s$i.log" 2>&1 &
    done
  fi
  ip netns exec "$c" "$bin" --role worker --coordinator 10.77.0.1:7700 --listen 10.78.0.2:0 \
    --name worker-0 "${common[@]}" > "$tmp/w0.log" 2>&1 &
  ip netns exec "$b" "$bin" --role worker --coordinator 10.77.0.1:7700 --listen 10.77.0.2:0 \
    --name worker-1 "${common[@]}" > "$tmp/w1.log" 2>&1 &
  wait
  local after; after=$(hub_bytes)
  python3 - "$name" "$tmp/r.json" "$((after - before))" <<'PY'
import json, sys
name, path, crossed = sys.argv[1], sys.argv[2], int(sys.argv[3])
r = json.load(open(path))
epochs = r["epochs"]
reached = next((e for e in epochs if e["test_accuracy"] >= 0.86), None)
to = f"epoch {reached['epoch']:2d} at {reached['wall_s']:7.1f} s" if reached else "not reached     "
print(f"{name:<44} 0.86: {to}   last epoch {epochs[-1]['test_accuracy']:.4f}   "
      f"MB/epoch {crossed / 1e6 / len(epochs):8.1f}   wall {r['wall_s']:7.1f} s   "
      f"{r['status']}", flush=True)
PY
}

# run NAME WHERE(ns|loopback) FLAGS...: one job; prints step ms and overlap.
run() {
  local name=$1 where=$2; shift 2
  local common=(--mode dp --batch 64 --epochs "$epochs" --log-level warn "$@")
  if [ "$where" = ns ]; then
    ip netns exec "$a" "$bin" --role coordinator --insecure --listen 10.77.0.1:7700 --workers 2 \
      --report "$tmp/r.json" "${common[@]}" > "$tmp/c.log" 2>&1 &
    ip netns exec "$a" "$bin" --role worker --coordinator 10.77.0.1:7700 --listen 10.77.0.1:0 \
      --insecure "${common[@]}" > "$tmp/w0.log" 2>&1 &
    ip netns exec "$b" "$bin" --role worker --coordinator 10.77.0.1:7700 --listen 10.77.0.2:0 \
      --insecure "${common[@]}" > "$tmp/w1.log" 2>&1 &
  else
    local port=$((20000 + RANDOM % 20000))
    "$bin" --role coordinator --listen 127.0.0.1:$port --workers 2 --report "$tmp/r.json" \
      "${common[@]}" > "$tmp/c.log" 2>&1 &
    for i in 0 1; do
      "$bin" --role worker --coordinator 127.0.0.1:$port "${common[@]}" > "$tmp/w$i.log" 2>&1 &
    done
  fi
  wait
  python3 - "$name" "$tmp/r.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[2]))
print(f"{sys.argv[1]:<34} step {1000 * r['wall_s'] / r['steps']:7.2f} ms   overlap {r['overlap']:.3f}   "
      f"allreduce_s {r['allreduce_s']:.1f}   MB {r['allreduce_bytes'] / 1e6:8.1f}   "
      f"test_accuracy {r['test_accuracy']:.4f}")
PY
}

