#!/usr/bin/env bash
# Writes the seed corpora of tests/fuzz/corpus (committed; run again after the schema changes):
# a few well-formed messages for the codec (selector byte, then Cap'n Proto bytes made with
# `capnp encode`), a checkpoint file's frame, option lines and HTTP requests.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
schema=$here/../../messages/troupe.capnp
out=$here/corpus
rm -rf "$out" && mkdir -p "$out"/{codec,checkpoint,options,metrics}

# codec: the selector is the index of the type in codec_fuzz.cpp's `decodable` tuple.
message() {  # NAME SELECTOR STRUCT TEXT
  { printf "\\x$(printf %02x "$2")"; echo "$4" | capnp encode -I/usr/include "$schema" "$3"; } \
    > "$out/codec/$1"
}
message pull_request 0 PullRequest '(bucket = 3, worker = 1, workerClock = 7, rows = [(table = "emb", ids = [1, 5, 9])])'
message push_request 2 PushRequest '(bucket = 1, worker = 0, workerClock = 2, readClock = (entries = [1, 2]), dense = [(name = "w", shape = [2], dtype = f32, data = 0x"0000803f 00000040")])'
message hello 6 Hello '(role = worker, name = "worker-1", nodeNonce = 0x"0102030405060708", schemaVersion = 3)'
message operator_action 9 OperatorAction '(nonce = "ab12", action = ["drain", "worker-1"], certificate = 0x"2d2d2d2d", proof = 0x"0011")'
message heartbeat 12 Heartbeat '(name = "server-0", sequence = 4, sentUnixMs = 1700000000000, cpuSeconds = 1.5, rssBytes = 1048576)'
message bucket_state_part 18 BucketStatePart '(bucket = 0, kind = firstMoment, worker = 0, tensors = [(name = "w", shape = [1], dtype = f32, data = 0x"0000803f")])'
message job_checkpoint 19 JobCheckpoint '(step = 10, epochs = 2, batchesPerEpoch = 5, chunk = 1, buckets = 1, modelValues = 4, finished = [5, 5])'
message store_entry 23 StoreEntry '(generation = 1, rank = 0, token = 99, key = "actors/0", value = 0x"31323700")'

# checkpoint: magic, version 1, no buckets, then the job's part (owner 0xffffffff, size, digest).
job=$(echo '(step = 10, epochs = 2, batchesPerEpoch = 5, chunk = 1, buckets = 0)' |
      capnp encode -I/usr/include "$schema" JobCheckpoint | xxd -p | tr -d '\n')
size=$(( ${#job} / 2 ))
le() { printf "%0$(( $2 * 2 ))x" "$1" | fold -w2 | tac | tr -d '\n'; }
digest=$(echo -n "$job" | xxd -r -p | sha256sum | cut -c1-64)
printf 'TROUPECK' > "$out/checkpoint/empty_job"  # checkpoint_file.cpp's magic
echo -n "$(le 1 4)$(le 0 4)$(le 4294967295 4)$(le "$size" 8)$digest$job" | xxd -r -p \
  >> "$out/checkpoint/empty_job"

printf -- '--role\nworker\n--coordinator\n127.0.0.1:7600\nenv:TROUPE_SECRET=s\n' > "$out/options/worker"
printf -- '--mode\ndp\n--comm-dtype\nbf16\n--optimizer\nonebit-adam\n--freeze-step\n5\n' > "$out/options/dp"
printf -- '--consistency\nssp:2\nenv:TROUPE_WORKERS=4\n--worker-delay-ms\n0:5,1:10\n' > "$out/options/ssp"
printf 'GET /metrics HTTP/1.0\r\n\r\n' > "$out/metrics/get"
printf 'GET /metrics?name=x HTTP/1.1\r\nHost: a\r\n\r\n' > "$out/metrics/query"
printf 'POST / HTTP/1.0\r\n\r\n' > "$out/metrics/post"
ls -R "$out" | head -30
