# Sourced by the dp netns benchmarks (dp_overlap_netns.sh, dp_compression_netns.sh): two
# network namespaces joined by a veth pair shaped with tc netem (RATE, DELAY; tbf, rate only,
# where the kernel has no netem), and run NAME ns|loopback FLAGS..., which runs one dp job of
# troupe-fmnist (the coordinator and worker 0 in one namespace, worker 1 in the other, or all on
# loopback) and prints its step time, overlap, allreduce bytes and accuracy. The caller sets
# rate, delay and epochs first. Needs root (ip netns, tc). Removes what it made on exit.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=$here/build/bin/troupe-fmnist
export TROUPE_SECRET=${TROUPE_SECRET:-$(head -c 24 /dev/urandom | base64)}
a=troupe-ov-a-$$; b=troupe-ov-b-$$; tmp=$(mktemp -d)
cleanup() { ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; rm -rf "$tmp"; }
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

